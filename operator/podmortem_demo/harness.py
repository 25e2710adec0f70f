"""An emulated cluster, a node-agent double and the real operator, as end-to-end tests and benchmarks use.

Why here, in the demo layer: the harness runs the real operator
(:mod:`podmortem.operator`) against :mod:`podmortem_demo.emulated`'s emulated API,
and only the demo layer sits above both (``podmortem_demo.emulated`` sits below
the handlers, see ``.importlinter``). Keeping it in the package, rather than
in ``tests/``, gives ``tests/podmortem_operator`` and ``bench/`` one importable copy
without path tricks, type-checked with the rest; it needs the ``demo`` extra
(kmock), like ``podmortem demo``.

Unlike the demo's kubelet, nothing runs processes here: a test makes a pod
"run" and "die" by writing its status (:func:`run_pod`, :func:`kill`), and the
agent double serves whatever evidence the test put in it.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
import kmock
from aiohttp import web
from aiohttp.test_utils import RawTestServer

from podmortem.kube.owners import ForeignKind
from podmortem.logs.settings import FollowSettings
from podmortem.operator.settings import AgentAccessSettings, OperatorSettings, PrometheusSettings
from podmortem.reports.evidence import PodEvidence
from podmortem.reports.memory import MemorySample
from podmortem.reports.oom_record import OomKillRecord
from podmortem_demo.emulated import PodLogsApi, resources
from podmortem_demo.emulated.kubelet import LineText, plain_text
from podmortem_demo.emulated.tls import Pki
from podmortem_demo.threads import LoopThread, OperatorThread, wait_for

if TYPE_CHECKING:
    from podmortem.operator.watching import run as runtime

T = TypeVar("T")
NODE = "node-a"
AGENT_TOKEN = "s3cret-agent-token"
AGENT_NS = "podmortem"
AGENT_LABELS = {"app.kubernetes.io/name": "podmortem", "app.kubernetes.io/component": "agent"}
GIB = 2**30


class AgentDouble:
    """The node agent's evidence endpoint: a real aiohttp server with the agent's token check.

    ``held`` pods' kernel records are withheld (served as an empty list) until released, as the
    real agent withholds a record until the kernel log has been quiet for a second.
    """

    def __init__(self) -> None:
        self.evidence: dict[str, PodEvidence] = {}
        self.held: set[str] = set()
        self.requests: list[str] = []
        self.available = True
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _serve(self, request: web.Request) -> web.Response:
        uid = request.match_info["uid"]
        self.requests.append(uid)
        if request.headers.get("Authorization") != f"Bearer {AGENT_TOKEN}":
            return web.json_response({"error": "bad token"}, status=401)
        if not self.available:
            return web.json_response({"error": "agent is starting"}, status=503)
        found = self.evidence.get(uid)
        if found is None:
            return web.json_response({"error": "unknown pod"}, status=404)
        if uid in self.held:
            found = found.model_copy(update={"kernel_records": []})
        return web.Response(body=found.model_dump_json(by_alias=True), content_type="application/json")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/pods/{uid}/evidence", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class _Cluster(LoopThread):
    """kmock with the resources the operator uses, and the agent double, on one loop."""

    def __init__(self, agent: AgentDouble, *, pki: Pki | None = None, tokens: set[str] | None = None,
                 tmp: Path | None = None) -> None:
        super().__init__(name="cluster")
        self.agent = agent
        self.api: PodLogsApi
        self.url = ""
        self.pki = pki
        self.tokens = tokens
        self.tmp = tmp

    def _server(self, api: PodLogsApi) -> kmock.Server:
        """Plain HTTP; or HTTPS with the PKI's server certificate, the harness's own client trusting it."""
        if self.pki is None:
            return kmock.Server(api)
        assert self.tmp is not None
        server_context = self.pki.server_context(self.tmp / "apiserver-tls")
        client_context = ssl.create_default_context(cadata=self.pki.ca_pem.decode())
        client_context.check_hostname = False  # the harness's own client: any name the test gave the server

        def client(url: Any) -> aiohttp.ClientSession:
            return aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(ssl=client_context))

        class TlsServer(RawTestServer):
            async def start_server(self, loop: Any = None, **kwargs: Any) -> None:
                await super().start_server(loop, ssl=server_context, **kwargs)

        return kmock.Server(api, server_cls=TlsServer, client_fct=client)

    async def serve(self) -> None:
        api = PodLogsApi(tokens=self.tokens)
        resources.declare(api)
        async with api, self._server(api) as server:
            self.api = api
            self.url = str(server.url).rstrip("/")
            await self.agent.start()
            self.ready()
            await self.stopped()
            await self.agent.stop()


class Harness:
    """The emulated cluster and (once :meth:`start_operator` is called) the operator, driven from a test."""

    def __init__(self, tmp: Path, *, pki: Pki | None = None, tokens: set[str] | None = None,
                 admin_token: str | None = None) -> None:
        """``pki`` serves the API over TLS with its server certificate; ``tokens`` makes it accept
        only those bearer tokens, the harness itself sending ``admin_token``."""
        self.tmp = tmp
        self.agent = AgentDouble()
        self.cluster = _Cluster(self.agent, pki=pki, tokens=tokens, tmp=tmp)
        self.admin_token = admin_token
        self.operator: OperatorThread | None = None

    @property
    def api(self) -> PodLogsApi:
        return self.cluster.api

    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def running(self) -> list[runtime.Running]:
        return self.operator.running if self.operator is not None else []

    @property
    def operator_error(self) -> BaseException | None:
        return self.operator.error if self.operator is not None else None

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the cluster's loop and wait for its result."""
        return self.cluster.call(coro, timeout=timeout)

    def sync(self, fn: Callable[[], T]) -> T:
        """Run a plain function on the cluster's loop (kmock's state is not thread-safe)."""
        return self.cluster.sync(fn)

    def settings(self, **overrides: Any) -> OperatorSettings:
        """Operator settings for this cluster: its agent double, free ports, a store under ``tmp``."""
        token = self.tmp / "agent-token"
        token.write_text(AGENT_TOKEN + "\n")
        base: dict[str, Any] = dict(
            agent=AgentAccessSettings(
                namespace=AGENT_NS,
                port=self.agent.port,
                token_path=token,
                label_selector=",".join(f"{k}={v}" for k, v in AGENT_LABELS.items()),
                record_retry_min_s=0.1,
                record_retry_max_s=0.5,
            ),
            prometheus=PrometheusSettings(url=None),
            store_dir=self.tmp / "store",
            foreign_kinds=(ForeignKind("batch", "jobs", "v1"),),
            listen_host="127.0.0.1",
            metrics_port=0,
            health_port=0,
            log_http_port=0,
            stale_log_threshold_s=600.0,
        )
        base.update(overrides)
        return OperatorSettings(**base)

    def start_operator(self, settings: OperatorSettings) -> runtime.Running:
        follow = FollowSettings(read_timeout_s=5.0, backoff_min_s=0.05, backoff_max_s=0.2)
        self.operator = OperatorThread(url=self.url, settings=settings, follow=follow)
        return self.operator.start()

    def stop_operator(self) -> None:
        if self.operator is not None:
            self.operator.stop(timeout=30)

    def start(self) -> None:
        self.cluster.start()

    def stop(self) -> None:
        self.stop_operator()
        self.cluster.stop(timeout=30)

    # --- API helpers (run on the cluster loop) --------------------------------------------------

    async def _request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        client = self.api.servers[0].client
        data = json.dumps(body) if body is not None else None
        headers = {"Content-Type": content_type}
        if self.admin_token is not None:
            headers["Authorization"] = f"Bearer {self.admin_token}"
        async with client.request(method, path, data=data, headers=headers) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {text[:300]}")
            return json.loads(text) if text else {}

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call(self._request("POST", path, body))

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call(self._request("PATCH", path, body, "application/merge-patch+json"))

    def delete(self, path: str) -> None:
        self.call(self._request("DELETE", path))

    def get(self, path: str) -> dict[str, Any] | None:
        async def get() -> dict[str, Any] | None:
            try:
                return await self._request("GET", path)
            except RuntimeError:
                return None

        return self.call(get())

    def http_get(self, url: str) -> tuple[int, bytes]:
        """A plain GET from the caller's thread (the operator's own servers)."""
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            out = []
            for (res, ns, _name), obj in self.api.objects.items():
                if (
                    f"{res.group}/{res.version}/{res.plural}".lstrip("/") == resource
                    and not obj.deleted
                    and (namespace is None or ns == namespace)
                ):
                    out.append(json.loads(json.dumps(obj.raw)))
            return out

        return self.sync(read)

    def stored(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as kmock stores it (GET of a pod answers with the emulated kubelet's view)."""
        return next((o for o in self.objects(resource, namespace) if o["metadata"]["name"] == name), None)

    def events_for(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.objects("v1/events") if e.get("involvedObject", {}).get("name") == name]

    def add_agent_pod(self) -> None:
        self.create(
            f"/api/v1/namespaces/{AGENT_NS}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"agent-{NODE}", "namespace": AGENT_NS, "labels": AGENT_LABELS},
                "spec": {"nodeName": NODE, "containers": [{"name": "agent", "image": "podmortem"}]},
                "status": {"phase": "Running", "podIP": "127.0.0.1"},
            },
        )

    @staticmethod
    def wait(probe: Callable[[], T | None], *, what: str, timeout: float = 20.0) -> T:
        return wait_for(probe, what=what, timeout=timeout)


@contextlib.contextmanager
def harness(tmp: Path, **options: Any) -> Iterator[Harness]:
    """A started :class:`Harness` (``options`` as its constructor takes them), stopped at the end."""
    h = Harness(tmp, **options)
    h.start()
    try:
        yield h
    finally:
        h.stop()


def evidence_for(uid: str, record: OomKillRecord | None) -> PodEvidence:
    """Agent evidence of a pod on :data:`NODE`: five rising samples, and the kernel record if given."""
    now = datetime.now(UTC)
    samples = [
        MemorySample(
            at=now - timedelta(seconds=10 * (5 - i)),
            usage_bytes=(20 + 2 * i) * GIB,
            limit_bytes=32 * GIB,
            peak_bytes=(21 + 2 * i) * GIB,
        )
        for i in range(5)
    ]
    return PodEvidence(
        pod_uid=uid, node=NODE, samples=samples, kernel_records=[record] if record is not None else []
    )


def _container_status(cid: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"name": "trainer", "containerID": cid, "restartCount": 0, "state": state}


def run_pod(
    h: Harness,
    *,
    name: str,
    namespace: str = "default",
    text: Callable[[str, int], LineText] = plain_text,
) -> str:
    """Make an existing pod run on :data:`NODE`: emulated container logs plus a Running status; its uid.

    ``text(container, instance)`` gives the line maker of the emulated log (see ``podmortem_demo.emulated``).
    """
    pod = h.wait(lambda: h.get(f"/api/v1/namespaces/{namespace}/pods/{name}"), what=f"pod {name}")
    emulated = h.sync(lambda: h.api.add_pod(name, namespace=namespace, containers=("trainer",), text=text))
    cid = emulated.containers["trainer"].current.container_id
    h.patch(
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        {
            "spec": {"nodeName": NODE},
            "status": {
                "phase": "Running",
                "startTime": "2024-05-01T10:00:00Z",
                "containerStatuses": [
                    _container_status(cid, {"running": {"startedAt": "2024-05-01T10:00:00Z"}})
                ],
            },
        },
    )
    return str(pod["metadata"]["uid"])


def kill(
    h: Harness,
    *,
    name: str,
    namespace: str = "default",
    reason: str = "OOMKilled",
    pod_reason: str | None = None,
    pod_message: str | None = None,
    exit_code: int = 137,
    finished_at: str | None = None,
) -> None:
    """Exit ``exit_code`` (137) with ``reason``, as the kubelet reports it (``pod_reason``: Evicted,
    Preempting...); ``finished_at`` (RFC 3339, default now) lets a test deliver kills out of time order."""
    container = h.sync(lambda: h.api.pods[namespace, name]).containers["trainer"]
    h.sync(lambda: container.terminate(exit_code))
    cid = container.current.container_id
    terminated = {
        "exitCode": exit_code,
        "reason": reason,
        "containerID": cid,
        "startedAt": "2024-05-01T10:00:00Z",
        "finishedAt": finished_at or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    status: dict[str, Any] = {
        "phase": "Failed",
        "containerStatuses": [_container_status(cid, {"terminated": terminated})],
    }
    if pod_reason:
        status["reason"] = pod_reason
    if pod_message:
        status["message"] = pod_message
    h.patch(f"/api/v1/namespaces/{namespace}/pods/{name}", {"status": status})
