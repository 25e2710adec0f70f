"""``podmortem logs`` on a pod that is gone: the operator's stored copy, read through the API server.

The operator keeps every followed pod's log and serves it at ``GET /logs`` (docs/log-store.md). This
finds the operator by the chart's labels on its Service, opens a port-forward to one of its pods
through the API server with the user's own kubeconfig (`podmortem.kube.portforward`, as ``kubectl
port-forward`` does), and asks with the user's own bearer token, so the log server's own check
(TokenReview, then ``get pods/log`` in the pod's namespace) decides exactly as for ``kubectl logs``.

Lines arrive as ``<RFC3339> <text>`` and go to the same sink as a live pod's; the store's own lines
(``--- podmortem: ... ---``: a gap, a retention cut, the end of the log) go to stderr as notes.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from podmortem.errors import PodmortemError
from podmortem.kube.read_at_most import read_at_most
from podmortem.logs import lines
from podmortem.logs.cursor import LogCursor

if TYPE_CHECKING:
    import aiohttp

    from podmortem.kube.config import ClusterAccess
    from podmortem.kube.session import ApiSession
    from podmortem.logs.following.sinks import StdoutSink

#: The labels the chart puts on the operator's Service (``podmortem.componentLabels``).
SERVICE_LABELS = "app.kubernetes.io/part-of=podmortem,app.kubernetes.io/component=operator"
#: Where the chart is installed when the user cannot list Services across namespaces.
FALLBACK_NAMESPACE = "podmortem"
#: The longest line the store serves (16 MiB of text and its timestamp), and so the most held here.
LINE_MAX = 16 * 1024 * 1024 + 64
#: Bytes of an error answer read for its message.
ERROR_BODY_MAX = 4096
#: Bytes of one answer of the API server read while looking for the operator (a list of Services in
#: every namespace: a few KiB each).
API_ANSWER_MAX_BYTES = 16 * 1024 * 1024
_MARKER = b"--- podmortem: "


class StoredCopyError(PodmortemError):
    """The stored copy cannot be read: what is wrong, in one line, for the user."""


class ContainerRequired(StoredCopyError):
    """The stored pod had several containers and none was chosen; :attr:`containers` names them."""

    def __init__(self, message: str, containers: list[str]) -> None:
        super().__init__(message)
        self.containers = containers


@dataclass(frozen=True)
class OperatorTarget:
    """The operator found: its Service (what the note names), the pod behind it, its log port."""

    namespace: str
    service: str
    pod: str
    port: int
    scheme: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.service}"


@dataclass
class ApiReader:
    """GETs of JSON objects from the API server with the user's credentials, each within
    :data:`API_ANSWER_MAX_BYTES` (a list of Services in every namespace is asked for)."""

    api: ApiSession

    async def get(self, path: str, query: dict[str, str] | None = None) -> tuple[int, Any]:
        import aiohttp

        try:
            async with self.api.response("GET", path, query=query, headers={"Accept": "application/json"},
                                         client_timeout=aiohttp.ClientTimeout(total=30)) as resp:
                data = await read_at_most(resp.content, API_ANSWER_MAX_BYTES + 1)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise StoredCopyError(f"GET {path}: {type(exc).__name__}: {exc}") from exc
        if len(data) > API_ANSWER_MAX_BYTES:
            raise StoredCopyError(f"GET {path}: the answer is over {API_ANSWER_MAX_BYTES} bytes")
        text = data.decode("utf-8", "replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text


def _message(body: Any) -> str:
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(body).strip().splitlines()[0][:300] if str(body).strip() else ""


async def find_operator(api: ApiReader, *, namespace: str | None) -> OperatorTarget:
    """The chart's operator Service in ``namespace`` (None: in any namespace the user may list, else in
    :data:`FALLBACK_NAMESPACE`) and a running pod behind it."""
    query = {"labelSelector": SERVICE_LABELS}
    where = f"namespace {namespace}"
    if namespace is None:
        status, body = await api.get("/api/v1/services", query)
        where = "any namespace"
        if status in (401, 403):
            namespace, where = FALLBACK_NAMESPACE, (f"namespace {FALLBACK_NAMESPACE} (you may not list "
                                                    "Services in all namespaces)")
    if namespace is not None:
        status, body = await api.get(f"/api/v1/namespaces/{quote(namespace, safe='')}/services", query)
    if status != 200 or not isinstance(body, dict):
        raise StoredCopyError(f"cannot look for the podmortem operator in {where}: HTTP {status}: "
                              f"{_message(body)}; give --operator-namespace")
    services = sorted(body.get("items") or [], key=lambda s: (s["metadata"]["namespace"],
                                                               s["metadata"]["name"]))
    if not services:
        raise StoredCopyError(f"no podmortem operator found: no Service labelled {SERVICE_LABELS} in {where}"
                              " (installed with the chart? give --operator-namespace)")
    spaces = sorted({s["metadata"]["namespace"] for s in services})
    if len(spaces) > 1:
        raise StoredCopyError(f"podmortem operators in several namespaces ({', '.join(spaces)}): "
                              "choose one with --operator-namespace")
    return await _target(api, services[0])


async def _target(api: ApiReader, service: dict[str, Any]) -> OperatorTarget:
    ns, name = service["metadata"]["namespace"], service["metadata"]["name"]
    spec = service.get("spec") or {}
    ports = spec.get("ports") or []
    port = next((p for p in ports if p.get("name") == "http"), ports[0] if ports else None)
    selector = spec.get("selector") or {}
    if port is None or not selector:
        raise StoredCopyError(f"the operator's Service {ns}/{name} has no port or no selector")
    status, body = await api.get(f"/api/v1/namespaces/{quote(ns, safe='')}/pods",
                                 {"labelSelector": ",".join(f"{k}={v}" for k, v in sorted(selector.items()))})
    if status != 200 or not isinstance(body, dict):
        raise StoredCopyError(f"cannot list the operator's pods in namespace {ns}: HTTP {status}: "
                              f"{_message(body)}")

    def rank(pod: dict[str, Any]) -> int:
        conditions = (pod.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        return 0 if ready else 1

    running = [p for p in body.get("items") or [] if (p.get("status") or {}).get("phase") == "Running"
               and not p["metadata"].get("deletionTimestamp")]
    if not running:
        raise StoredCopyError(f"the podmortem operator ({ns}/{name}) has no running pod")
    pod = sorted(running, key=rank)[0]
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, str):
        named = [cp.get("containerPort") for c in pod["spec"].get("containers") or []
                 for cp in c.get("ports") or [] if cp.get("name") == target]
        if not named:
            raise StoredCopyError(f"the operator pod {ns}/{pod['metadata']['name']} has no port named "
                                  f"{target}")
        target = named[0]
    scheme = "https" if port.get("appProtocol") == "https" else "http"
    return OperatorTarget(ns, name, pod["metadata"]["name"], int(target), scheme)


@contextlib.asynccontextmanager
async def connected(access: ClusterAccess, target: OperatorTarget) -> AsyncIterator[StoreClient]:
    """A port-forward to the operator's log port, and an HTTP client on it, for the block."""
    import aiohttp

    from podmortem.kube import portforward

    try:
        async with portforward.local_port(access, namespace=target.namespace, pod=target.pod,
                                          port=target.port) as forward:
            tls: ssl.SSLContext | bool = False
            if target.scheme == "https":
                # The far end of the tunnel is the pod the API server reached; the operator's
                # certificate names its Service, not 127.0.0.1.
                tls = ssl.create_default_context()
                tls.check_hostname = False
                tls.verify_mode = ssl.CERT_NONE
            connector = aiohttp.TCPConnector(ssl=tls, force_close=True)
            async with aiohttp.ClientSession(connector=connector) as session:
                yield StoreClient(session, access, target, forward)
    except portforward.PortForwardError as exc:
        hint = ""
        if exc.status == 403:
            hint = (f" (reading the stored copy needs create and get on pods/portforward in namespace "
                    f"{target.namespace})")
        raise StoredCopyError(f"cannot reach the podmortem operator ({target}): {exc}{hint}") from None


@dataclass
class StoreClient:
    """Requests to the operator's log server over one port-forward."""

    session: aiohttp.ClientSession
    access: ClusterAccess
    target: OperatorTarget
    forward: Any

    async def read(self, *, namespace: str, pod: str, container: str | None, sink: StdoutSink,
                   previous: bool, tail: int | None, since: str | None, follow: bool,
                   note: Callable[[str], None], opened: Callable[[], None]) -> None:
        """Print one stored container log into ``sink``; the store's own lines go to ``note``;
        ``opened`` is called once the log server answered with the log."""
        import aiohttp

        query = {"timestamps": "true"}
        if container is not None:
            query["container"] = container
        if previous:
            query["previous"] = "true"
        if tail is not None:
            query["tail"] = str(tail)
        if since is not None:
            query["since"] = since
        if follow:
            query["follow"] = "true"
        headers = {}
        authorization = self.access.authorization_header()
        if authorization is not None:
            headers["Authorization"] = authorization
        url = (f"{self.target.scheme}://127.0.0.1:{self.forward.port}/logs/{quote(namespace, safe='')}/"
               f"{quote(pod, safe='')}")
        try:
            async with self.session.get(url, params=query, headers=headers,
                                        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)) as resp:
                if resp.status != 200:
                    text = (await read_at_most(resp.content, ERROR_BODY_MAX)).decode("utf-8", "replace")
                    text = text.strip()
                    raise self._refused(resp.status, text, namespace=namespace, pod=pod,
                                        bearer=authorization is not None)
                opened()
                await _print(resp.content, container=container or "", sink=sink, note=note)
        except (aiohttp.ClientError, OSError) as exc:
            said = self.forward.error_text()
            raise StoredCopyError(f"the podmortem operator ({self.target}) did not answer: "
                                  f"{said or f'{type(exc).__name__}: {exc}'}") from None

    def _refused(self, status: int, text: str, *, namespace: str, pod: str, bearer: bool) -> StoredCopyError:
        first = text.splitlines()[0] if text else ""
        if status == 400 and "choose one of:" in first:
            names = [n.strip() for n in first.split("choose one of:", 1)[1].split("(")[0].split(",")]
            return ContainerRequired(first, [n for n in names if n])
        if status == 401:
            why = ("your kubeconfig has no bearer token (a client certificate cannot be passed on); "
                   "use a token, e.g. kubectl create token" if not bearer else first)
            return StoredCopyError("the podmortem operator's log server did not accept your credentials: "
                                   + why)
        if status == 403:
            return StoredCopyError(f"not allowed to read logs in namespace {namespace}: {first}")
        if status == 404:
            return StoredCopyError(f"the podmortem operator has no stored log for {namespace}/{pod}: {first}")
        return StoredCopyError(f"the podmortem operator's log server answered HTTP {status}: {first}")


async def _print(body: aiohttp.StreamReader, *, container: str, sink: StdoutSink,
                 note: Callable[[str], None]) -> None:
    """Split the answer into lines; runs of stored lines go to the sink, the store's own to ``note``."""
    held: list[bytes] = []  # the unfinished line's pieces, joined once its end comes (a long line
    held_bytes = 0          # arrives in many chunks: joining at each would copy it again and again)
    while chunk := await body.readany():
        end = chunk.rfind(b"\n")
        if end < 0:
            held.append(chunk)
            held_bytes += len(chunk)
            if held_bytes > LINE_MAX:
                raise StoredCopyError(f"the log server sent a line longer than {LINE_MAX} bytes")
            continue
        data = b"".join([*held, chunk[:end]]) if held else chunk[:end]
        held, held_bytes = ([chunk[end + 1:]], len(chunk) - end - 1) if end + 1 < len(chunk) else ([], 0)
        run: list[bytes] = []
        for line in data.split(b"\n"):
            if line.startswith(_MARKER):
                await _flush(run, container, sink)
                note(line.decode("utf-8", "replace").removeprefix("--- podmortem: ").removesuffix(" ---"))
            else:
                run.append(line)
        await _flush(run, container, sink)
    if held:
        await _flush([b"".join(held)], container, sink)


async def _flush(run: list[bytes], container: str, sink: StdoutSink) -> None:
    if not run:
        return
    first, _ = lines.split_line(run[0])
    last, _ = lines.split_line(run[-1])
    batch = lines.LineBatch(container=container, raw=b"\n".join(run) + b"\n", count=len(run),
                            first_ts_ns=first, last_ts_ns=last)
    run.clear()
    await sink.write(container, batch, LogCursor())
