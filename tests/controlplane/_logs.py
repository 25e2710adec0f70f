"""What the log tests against the real control plane share: a followed pod whose log a test writes,
the operator as a process, the stored log read back, and the exactly-once check.

The test plays the container and the kubelet: a :class:`LineWriter` thread appends numbered lines
in the CRI format to the file kwok serves, at a bounded rate, in bursts whose lines share one
timestamp (and many bursts share one second, which ``sinceTime`` truncates to), and
:func:`restart_container` replaces the instance as the kubelet does. What the operator stored is
read back through its log server (``GET /logs/...?format=jsonl``) and compared with what was
written, per instance: :func:`compare` counts lost, repeated and out-of-order lines.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tests.cli import entrypoints as ep
from tests.controlplane.cluster import REPO, ControlPlane

CONTAINER = "main"
CRD = REPO / "charts" / "podmortem" / "crds" / "trainingjob.yaml"
CHART = REPO / "charts" / "podmortem"
#: The annotation that makes the operator follow a bare pod.
WATCH = {"podmortem.io/watch": "true"}


def rfc3339_ns(ts_ns: int) -> str:
    """``ts_ns`` as the CRI log format writes a time: RFC 3339 with nine digits of fraction, UTC."""
    whole, frac = divmod(ts_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{frac:09d}Z"


@dataclass
class Instance:
    """One container instance as the test wrote it: its id, its file, its lines (ts_ns, text)."""

    container_id: str
    path: Path
    lines: list[tuple[int, str]] = field(default_factory=list)


class LineWriter:
    """A thread that appends numbered lines to the current instance's log file at a bounded rate.

    Every ``interval_s`` it writes ``burst`` lines that share one timestamp (nanoseconds of the
    moment of the burst), so a second holds many bursts and a burst many lines of one timestamp:
    a resume with ``sinceTime`` (whole seconds) must skip exactly what it already has. Lines are
    numbered across instances (``line 000042 ...``), so a line in the wrong instance is seen too.
    """

    def __init__(self, first: Instance, *, burst: int = 4, interval_s: float = 0.02) -> None:
        self.instances = [first]
        self.burst = burst
        self.interval_s = interval_s
        self._seq = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="line-writer", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> LineWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def written(self) -> int:
        return sum(len(i.lines) for i in self.instances)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        if self.error is not None:
            raise AssertionError(f"the line writer failed: {self.error!r}")

    def write_burst(self) -> None:
        with self._lock:
            inst = self.instances[-1]
            ts = time.time_ns()
            if inst.lines and ts < inst.lines[-1][0]:
                ts = inst.lines[-1][0]  # the clock stepped back: a log's times never do
            out = []
            for _ in range(self.burst):
                text = (f"line {self._seq:06d} of instance {len(self.instances) - 1}"
                        f" step={self._seq * 7 % 1000}")
                self._seq += 1
                inst.lines.append((ts, text))
                out.append(f"{rfc3339_ns(ts)} stdout F {text}\n")
            with inst.path.open("a") as f:
                f.write("".join(out))

    @contextmanager
    def paused(self) -> Iterator[Instance]:
        """Hold the writer (between bursts) for the block; yields the current instance."""
        with self._lock:
            yield self.instances[-1]

    def switch(self, new: Instance) -> None:
        """From now on, write ``new`` (called with the writer paused, or between bursts)."""
        self.instances.append(new)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                self.write_burst()
        except BaseException as exc:  # reported by stop()
            self.error = exc


# -- the pod, as the kubelet would show it ----------------------------------------------------------


def new_container_id() -> str:
    return f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}"


def start_pod(plane: ControlPlane, namespace: str, pod: str) -> Instance:
    """A running pod annotated for the operator, its log served by kwok from a file the test writes.

    kwok's fast stages make the pod Running but set no ``containerID`` (a kubelet always does):
    the test sets one, as the kubelet would, so the pod looks like one a real node runs.
    """
    plane.serve_logs(namespace, pod, [CONTAINER])
    plane.apply({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": pod, "namespace": namespace, "annotations": WATCH},
                 "spec": {"containers": [{"name": CONTAINER, "image": "trainer:1"}],
                          "restartPolicy": "Always"}})
    plane.wait(lambda: _status(plane, namespace, pod).get("phase") == "Running" or None,
               what=f"pod {pod} Running", timeout=120)
    first = Instance(new_container_id(), plane.pod_log_file(namespace, pod, CONTAINER))
    started = _status(plane, namespace, pod)["containerStatuses"][0]["state"]["running"]["startedAt"]
    patch_container_status(plane, namespace, pod, {
        "name": CONTAINER, "ready": True, "restartCount": 0, "image": "trainer:1", "imageID": "",
        "containerID": first.container_id, "started": True,
        "state": {"running": {"startedAt": started}}, "lastState": {}})
    return first


def _status(plane: ControlPlane, namespace: str, pod: str) -> dict[str, Any]:
    body = plane.get(f"/api/v1/namespaces/{namespace}/pods/{pod}") or {}
    status: dict[str, Any] = body.get("status") or {}
    return status


def patch_container_status(plane: ControlPlane, namespace: str, pod: str, status: dict[str, Any]) -> None:
    """Set one container's status through the status subresource, as the kubelet does (admin)."""
    plane.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=strategic",
                  "-p", json.dumps({"status": {"containerStatuses": [status]}}))


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def restart_container(plane: ControlPlane, namespace: str, pod: str, writer: LineWriter) -> Instance:
    """Replace the container's instance in the order the kubelet does it on a restart.

    The kubelet writes each instance to a file of its own (``<restartCount>.log``); a new instance's
    file exists before the status names the instance. So: the writer goes on in a new file; kwok's
    ``Logs`` object names it as the current log and the old one as ``previous`` (and kwok serves
    them so); then the pod's status shows the old instance terminated (``lastState``),
    ``restartCount`` 1 and a new ``containerID`` running.

    Not the same path for both instances: kwok follows a log *path* (the kubelet's ReadLogs reopens
    a file recreated under its name, for rotation), so a follow of the old instance would go on into
    the new instance's file, which no kubelet does (its follow ends when its container exits).
    """
    with writer.paused() as old:
        new = Instance(new_container_id(), old.path.with_name(f"{CONTAINER}.{len(writer.instances)}.log"))
        new.path.touch()
        writer.switch(new)
    old_last = old.lines[-1][1]
    plane.apply({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                 "metadata": {"name": pod, "namespace": namespace},
                 "spec": {"logs": [{"containers": [CONTAINER], "logsFile": str(new.path),
                                    "previousLogsFile": str(old.path), "follow": True}]}})
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log?container={CONTAINER}&previous=true&tailLines=1"
    plane.wait(lambda: True if plane.request("GET", path)[1] == old_last + "\n" else None,
               what="kwok serving the old instance's file as previous", timeout=60)
    at = now_rfc3339()
    patch_container_status(plane, namespace, pod, {
        "name": CONTAINER, "ready": True, "restartCount": 1, "image": "trainer:1", "imageID": "",
        "containerID": new.container_id, "started": True,
        "state": {"running": {"startedAt": at}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": at,
                                     "finishedAt": at, "containerID": old.container_id}}})
    return new


# -- the operator as a process ------------------------------------------------------------------------


def operator_account(plane: ControlPlane, namespace: str, folder: Path) -> Path:
    """A kubeconfig for a ServiceAccount bound, in ``namespace``, to the chart's operator ClusterRole.

    The ClusterRole is the chart's own, rendered by helm; a RoleBinding grants it in the test's
    namespace only (the operator watches that namespace alone).
    """
    rendered = plane.run("helm", "template", "pm", str(CHART), "-n", "podmortem",
                         "--kube-version", plane_version(plane), "--set", "image.repository=podmortem",
                         "--set-string", "image.tag=test").stdout
    roles = [o for o in yaml.safe_load_all(rendered)
             if o and o["kind"] == "ClusterRole"
             and o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "operator"]
    assert roles, "the chart renders no operator ClusterRole"
    plane.apply(*roles)
    plane.kubectl("create", "serviceaccount", "podmortem-operator", "-n", namespace)
    plane.apply(*({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": role["metadata"]["name"], "namespace": namespace},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": role["metadata"]["name"]},
                   "subjects": [{"kind": "ServiceAccount", "name": "podmortem-operator",
                                 "namespace": namespace}]} for role in roles))
    return plane.service_account_kubeconfig(folder / "operator.kubeconfig", namespace=namespace,
                                            name="podmortem-operator")


def plane_version(plane: ControlPlane) -> str:
    from tests.controlplane.cluster import versions
    return versions()["KUBERNETES_VERSION"].lstrip("v")


def install_crd(plane: ControlPlane) -> None:
    """The chart's TrainingJob CRD (the operator lists TrainingJobs to be ready)."""
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))

    def established() -> bool | None:
        crd = plane.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainingjobs.podmortem.io")
        conditions = ((crd or {}).get("status") or {}).get("conditions") or []
        return True if any(c.get("type") == "Established" and c.get("status") == "True"
                           for c in conditions) else None

    plane.wait(established, what="the TrainingJob CRD Established", timeout=120)


@dataclass
class Operator:
    """``podmortem operator`` started as a process for one namespace, with its store in ``folder``."""

    kubeconfig: Path
    namespace: str
    folder: Path
    http_port: int = field(default_factory=ep.free_port)
    health_port: int = field(default_factory=ep.free_port)
    metrics_port: int = field(default_factory=ep.free_port)
    process: ep.Process | None = None
    starts: int = 0

    def env(self) -> dict[str, str]:
        return ep.clean_env(
            self.folder,
            KUBECONFIG=str(self.kubeconfig),
            PODMORTEM_NAMESPACES=self.namespace,
            PODMORTEM_LOG_STORE_DIR=str(self.folder / "store"),
            PODMORTEM_HTTP_PORT=str(self.http_port),
            PODMORTEM_METRICS_PORT=str(self.metrics_port),
            PODMORTEM_HEALTH_PORT=str(self.health_port),
            PODMORTEM_HTTP_AUTH="none",  # the log server's own login is not what these tests are about
            PODMORTEM_AGENT_ENABLED="false",
        )

    def start(self) -> Operator:
        """Start it and wait until it is ready; on a port taken meanwhile (the kernel hands out ports
        it gave out before, and the machine is shared), again on new ports."""
        for _ in range(5):
            self.starts += 1
            self.process = ep.start(["operator"], env=self.env(),
                                    log=self.folder / f"operator-{self.starts}.log")
            try:
                self.process.wait_http(f"http://127.0.0.1:{self.health_port}/readyz", timeout=120)
                return self
            except AssertionError:
                if self.process.alive() or "Address already in use" not in self.process.output():
                    raise
            self.http_port, self.health_port = ep.free_port(), ep.free_port()
            self.metrics_port = ep.free_port()
        raise AssertionError(f"the operator found no free ports:\n{self.output()[-2000:]}")

    def stop(self, *, sig: int | None = None) -> int:
        """SIGTERM (the default) and wait; or send ``sig`` (SIGKILL) and wait."""
        assert self.process is not None
        if sig is None:
            return self.process.stop(timeout=60)
        self.process.proc.send_signal(sig)
        return int(self.process.proc.wait(60))

    def output(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.folder.glob("operator-*.log")))

    def stored(self, namespace: str, pod: str, *, previous: bool = False) -> list[dict[str, Any]]:
        """The operator's stored log of the container, as its log server serves it (jsonl records)."""
        url = (f"http://127.0.0.1:{self.http_port}/logs/{namespace}/{pod}?container={CONTAINER}"
               f"&format=jsonl{'&previous=true' if previous else ''}")
        status, body = ep.http_get(url, timeout=30)
        if status == 404:
            return []
        assert status == 200, f"GET {url}: {status} {body[:500]}"
        return [json.loads(line) for line in body.splitlines() if line.strip()]


# -- the check ----------------------------------------------------------------------------------------


@dataclass
class Comparison:
    """Stored records against written lines, for one instance."""

    written: int
    stored: int
    lost: int
    repeated: int
    out_of_order: int
    #: Records that are not lines (gaps, ends, damage), as stored.
    others: list[dict[str, Any]]
    #: Stored lines that were never written (wrong text or timestamp).
    unknown: list[tuple[int, str]]
    first_problem: str = ""

    @property
    def exact(self) -> bool:
        return (self.lost == self.repeated == self.out_of_order == 0 and not self.unknown
                and not [r for r in self.others if r.get("type") != "end"])

    def summary(self) -> str:
        return (f"written {self.written}, stored {self.stored}: lost {self.lost}, repeated {self.repeated}, "
                f"out of order {self.out_of_order}, unknown {len(self.unknown)}, "
                f"other records {[r.get('type') for r in self.others]}"
                + (f"; first problem: {self.first_problem}" if self.first_problem else ""))


def compare(written: list[tuple[int, str]], records: list[dict[str, Any]]) -> Comparison:
    """Count what ``records`` (the stored jsonl) lost, repeated or reordered of ``written``."""
    index = {line: i for i, line in enumerate(written)}
    got = [(int(r["ts_ns"]), str(r["text"])) for r in records if r.get("type") == "line"]
    others = [r for r in records if r.get("type") != "line"]
    seen: set[int] = set()
    repeated = out_of_order = 0
    unknown: list[tuple[int, str]] = []
    first = ""
    last = -1
    for n, line in enumerate(got):
        i = index.get(line)
        if i is None:
            unknown.append(line)
            first = first or f"stored line {n} {line!r} was never written"
            continue
        if i in seen:
            repeated += 1
            first = first or f"stored line {n} repeats written line {i} {line!r}"
            continue
        seen.add(i)
        if i < last:
            out_of_order += 1
            first = first or f"stored line {n} is written line {i}, after written line {last}"
        last = max(last, i)
    missing = [i for i in range(len(written)) if i not in seen]
    if missing and not first:
        first = f"written line {missing[0]} {written[missing[0]]!r} was not stored"
    return Comparison(written=len(written), stored=len(got), lost=len(missing), repeated=repeated,
                      out_of_order=out_of_order, others=others, unknown=unknown, first_problem=first)


def wait_stored(operator: Operator, namespace: str, pod: str, instances: list[Instance], *,
                timeout: float = 240.0, alive: Callable[[], bool] | None = None) -> list[Comparison]:
    """Poll the log server until every instance's stored lines hold its last written line (or time
    out); then compare each instance (the last is the current one, the one before it ``previous``).
    """
    def read() -> list[list[dict[str, Any]]]:
        # At most two instances: the one before the last is the log server's ``previous``.
        assert len(instances) <= 2
        return [operator.stored(namespace, pod, previous=k < len(instances) - 1)
                for k in range(len(instances))]

    def complete(records: list[list[dict[str, Any]]]) -> bool:
        for inst, recs in zip(instances, records, strict=True):
            if inst.lines and not any(r.get("type") == "line"
                                      and (int(r["ts_ns"]), r["text"]) == inst.lines[-1]
                                      for r in recs[-50:]):
                return False
        return True

    deadline = time.monotonic() + timeout
    records = read()
    while not complete(records) and time.monotonic() < deadline:
        if alive is not None and not alive():
            break
        time.sleep(1.0)
        records = read()
    return [compare(inst.lines, recs) for inst, recs in zip(instances, records, strict=True)]


def copy_logs_on_failure(plane: ControlPlane, folder: Path) -> None:
    """Keep the control plane's component logs next to the operator's (for a failed run's reader)."""
    for name in ("kube-apiserver", "kwok"):
        src = plane.root / f"{name}.log"
        if src.exists():
            shutil.copy(src, folder / f"{name}.log")


# -- a cut in the network -----------------------------------------------------------------------------


class CuttingProxy:
    """A TCP relay in front of the API server that can cut every connection through it at once.

    What a load balancer's idle cut or a dropped NAT entry does to a long log stream: the operator's
    TLS connections (its watches and its log streams) end mid-stream with a reset, and it must resume
    from its cursor with ``sinceTime``. The relay passes bytes unchanged (TLS end to end). It runs an
    event loop in a thread of its own: a reset is an abort of both transports, never a close racing
    a thread blocked in ``recv``.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.cuts = 0
        self._open: set[asyncio.Transport] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cutting-proxy", daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", 0), self._loop).result(30)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def kubeconfig(self, source: Path, dest: Path) -> Path:
        """``source`` with its server pointed at this relay (the certificate names 127.0.0.1 still)."""
        config = yaml.safe_load(source.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        dest.write_text(yaml.safe_dump(config))
        dest.chmod(0o600)
        return dest

    def cut(self) -> int:
        """Reset every connection now open; how many there were."""
        async def reset() -> int:
            transports, self._open = list(self._open), set()
            for t in transports:
                sock = t.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                t.abort()
            return len(transports) // 2
        self.cuts += 1
        return asyncio.run_coroutine_threadsafe(reset(), self._loop).result(30)

    def close(self) -> None:
        async def shut() -> None:
            self._server.close()
            for t in list(self._open):
                t.abort()
        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_w.transport.abort()
            return
        pair = (client_w.transport, up_w.transport)
        self._open.update(pair)  # type: ignore[arg-type]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            for t in pair:
                self._open.discard(t)  # type: ignore[arg-type]
                t.close()

        await asyncio.gather(pump(client_r, up_w), pump(up_r, client_w))


def reconnects(operator: Operator) -> dict[str, float]:
    """The operator's follower reconnects so far, by reason (those that happened), from its ``/metrics``
    (for a failure's message: why the follower stored nothing); empty when the metrics cannot be read."""
    status, body = ep.http_get(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10)
    prefix = 'podmortem_logs_reconnects_total{reason="'
    found: dict[str, float] = {}
    for line in body.splitlines() if status == 200 else []:
        if line.startswith(prefix):
            reason, _, value = line[len(prefix):].partition('"} ')
            if float(value):
                found[reason] = float(value)
    return found


def metric(port: int, name: str) -> float:
    """The sum of one metric's samples on the operator's ``/metrics``."""
    status, body = ep.http_get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert status == 200, body[:300]
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total
