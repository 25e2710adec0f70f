"""``podmortem operator`` processes against the real control plane, set up as the chart sets them up.

:func:`install` applies what the chart renders for one release (Helm's own engine, through
``tests/chart/_render.py``) that an operator process needs from the API: the TrainingJob CRD, the
operator's ServiceAccount, its ClusterRole and bindings, and the Role for its Lease. :func:`start`
runs ``podmortem operator`` locally with the chart's environment and a kubeconfig holding that
ServiceAccount's token (TokenRequest), so RBAC decides every call it makes, as in a cluster.

The tests see only what a user sees: ``/readyz``, ``/metrics``, the process's log, and the API
server's own audit log (:meth:`ControlPlane.audit`).
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import signal
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import helm_python as helm
from prometheus_client.parser import text_string_to_metric_families
from tests.chart import _render
from tests.cli import entrypoints as ep
from tests.controlplane.cluster import ControlPlane

T = TypeVar("T")

#: The object kinds of a rendering that the operator's own calls need (no Deployment, no Service:
#: the process runs here).
_NEEDED = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@dataclass(frozen=True)
class Release:
    """One rendering of the chart, installed for the operator processes of one test."""

    name: str
    namespace: str
    service_account: str
    lease: str
    #: The operator container's environment as the chart renders it (plain values only).
    env: dict[str, str]
    #: The cluster-scoped objects it created (removed by :func:`install`'s exit).
    cluster_objects: tuple[tuple[str, str], ...]

    @property
    def user(self) -> str:
        """The ServiceAccount's user name, as the API server's audit log names it."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@contextmanager
def install(plane: ControlPlane, namespace: str, **values: Any) -> Iterator[Release]:
    """The chart's operator RBAC for a release in ``namespace`` that watches ``namespace``.

    ``values`` are chart values on top of: this namespace watched, no node agent (none runs here).
    """
    chart_values: dict[str, Any] = {"watchNamespaces": [namespace], "agent": {"enabled": False}, **values}
    name = f"pm-{uuid.uuid4().hex[:6]}"
    with helm.Chart.load(_render.CHART_DIR) as chart:
        rendered = _render.render(chart, chart_values, name=name, namespace=namespace)
    objects = [o for o in rendered.objects if o["kind"] in _NEEDED]
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(_render.CRD_FILE))
    plane.kubectl("wait", "--for=condition=Established", "crd/trainingjobs.podmortem.io", "--timeout=60s")
    plane.apply(*objects)
    deployment = rendered.one("Deployment", "operator")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}
    release = Release(
        name=name, namespace=namespace,
        service_account=deployment["spec"]["template"]["spec"]["serviceAccountName"],
        lease=env["PODMORTEM_LEADER_ELECTION_LEASE"], env=env,
        cluster_objects=tuple((o["kind"].lower(), o["metadata"]["name"]) for o in objects
                              if "namespace" not in o["metadata"]),
    )
    try:
        yield release
    finally:
        for kind, obj in release.cluster_objects:
            plane.run("kubectl", "delete", kind, obj, "--ignore-not-found", "--wait=false", check=False)


@dataclass
class Operator:
    """One ``podmortem operator`` process and the ports it serves on."""

    identity: str
    process: ep.Process
    env: dict[str, str]

    @property
    def health(self) -> str:
        return f"http://127.0.0.1:{self.env['PODMORTEM_HEALTH_PORT']}"

    @property
    def pid(self) -> int:
        return int(self.process.proc.pid)

    def readyz(self) -> tuple[int, str]:
        return ep.http_get(self.health + "/readyz")

    def wait_ready(self, contains: str = "", *, timeout: float = 120) -> str:
        return self.process.wait_http(self.health + "/readyz", contains=contains, timeout=timeout)[1]

    def metric(self, name: str) -> float | None:
        """The value of an unlabelled metric (a gauge) from ``/metrics``; None if not there."""
        status, text = ep.http_get(f"http://127.0.0.1:{self.env['PODMORTEM_METRICS_PORT']}/metrics")
        if status != 200:
            return None
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and not sample.labels:
                    return float(sample.value)
        return None

    def output(self) -> str:
        return self.process.output()

    def pause(self) -> None:
        """SIGSTOP: the process reads nothing more; the API server's streams to it fall behind."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL, as the kernel's OOM killer or a node failure ends it: no Lease released."""
        if self.process.alive():
            self.process.proc.kill()
            self.process.proc.wait(30)

    def stop(self) -> int:
        if self.process.alive():
            self.resume()  # a stopped process would not handle SIGTERM
        return self.process.stop()


def start(plane: ControlPlane, release: Release, tmp: Path, identity: str, *,
          store: Path | None = None, server: str | None = None, **extra: str) -> Operator:
    """``podmortem operator`` with the chart's environment, logged in as the release's ServiceAccount.

    Each process gets its own ports and ``PODMORTEM_POD_NAME`` (its Lease identity); ``store``: the
    log store folder (shared by replicas, as a ReadWriteMany volume would be). ``server``: another
    URL for the API server (a proxy in front of it), in the kubeconfig; its certificate must name it.
    """
    home = tmp / identity
    home.mkdir(parents=True, exist_ok=True)
    kubeconfig = plane.service_account_kubeconfig(home / "kubeconfig", namespace=release.namespace,
                                                  name=release.service_account)
    if server is not None:
        kubeconfig.write_text(kubeconfig.read_text().replace(plane.url, server))
    for attempt in range(5):
        env = ep.clean_env(home, **{
            **release.env,
            "PODMORTEM_POD_NAME": identity,
            "PODMORTEM_POD_NAMESPACE": release.namespace,
            "PODMORTEM_LOG_STORE_DIR": str(store or home / "store"),
            "PODMORTEM_HTTP_PORT": str(ep.free_port()),
            "PODMORTEM_METRICS_PORT": str(ep.free_port()),
            "PODMORTEM_HEALTH_PORT": str(ep.free_port()),
            **extra,
        })
        env.pop("PODMORTEM_LOG_STORE_MAX_BYTES", None)  # the chart's emptyDir budget: no emptyDir here
        operator = Operator(identity=identity, env=env, process=ep.start(
            ["operator", "--kubeconfig", str(kubeconfig)], env=env, log=tmp / f"{identity}.log"))
        # A port found free may be taken by another process on a shared machine before the operator
        # binds it: start again with others (the operator exits 2 and says so).
        deadline = time.monotonic() + 120
        while operator.process.alive() and time.monotonic() < deadline:
            if ep.http_get(operator.health + "/healthz")[0] == 200:
                return operator
            time.sleep(0.2)
        if operator.process.alive() or "Address already in use" not in operator.output() or attempt == 4:
            return operator  # wait_ready reports what it is
    raise AssertionError("unreachable")


def wait(probe: Callable[[], T | None], *, what: str, timeout: float = 120.0, every: float = 0.25,
         operators: tuple[Operator, ...] = ()) -> T:
    """Poll ``probe`` until it returns something else than None; fail with the operators' logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value is not None:
            return value
        time.sleep(every)
    logs = "".join(f"\n--- {o.identity} ---\n{o.output()[-3000:]}" for o in operators)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{logs}")


def pod(name: str, namespace: str, *, scheduled: bool = True) -> dict[str, Any]:
    """A bare pod annotated ``podmortem.io/watch: "true"``; ``scheduled=False``: one no scheduler
    takes (it stays Pending, with no log to follow: it costs the operator only its watch state)."""
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}],
                            "terminationGracePeriodSeconds": 0}
    if not scheduled:
        spec["schedulerName"] = "nobody-schedules-this"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {"podmortem.io/watch": "true"}},
            "spec": spec}


def lease(plane: ControlPlane, release: Release) -> dict[str, Any] | None:
    return plane.get(f"/apis/coordination.k8s.io/v1/namespaces/{release.namespace}/leases/{release.lease}")


def holder(plane: ControlPlane, release: Release) -> str:
    spec = (lease(plane, release) or {}).get("spec") or {}
    return str(spec.get("holderIdentity") or "")


class Relay:
    """A TCP relay in front of the API server that a test can cut (:meth:`cut` closes every
    connection through it at once), as a load balancer or a network blip cuts a watch.

    It does not terminate TLS: the client still talks to the real API server, whose certificate names
    127.0.0.1, through :attr:`url`.
    """

    def __init__(self, target_port: int) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._target = target_port
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target), timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), name="relay-pump", daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> int:
        """Close every connection through the relay now; how many there were."""
        with self._lock:
            sockets, self._open = self._open, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        return len(sockets) // 2

    def close(self) -> None:
        self._server.close()
        self.cut()


class LeaseHold:
    """A validating admission webhook that holds the operator's Lease writes at the API server.

    The API server calls it between reading the stored Lease and writing it: a write held here while
    another lands behind it fails the API server's compare-and-swap, and the held request is answered
    ``409 Conflict`` by the API server itself (its own message and body), as in a real race. It only
    sees the release's ServiceAccount's Lease writes of the operation it was armed for (a
    ``matchConditions`` on the user), and holds nothing until :meth:`arm` is called.
    """

    def __init__(self, plane: ControlPlane, release: Release, tmp: Path) -> None:
        from tests.controlplane.pki import Authority

        self.plane = plane
        authority = Authority("podmortem-test-webhook-ca")
        cert, key = authority.issue("127.0.0.1", names=("127.0.0.1",))
        (tmp / "webhook.crt").write_bytes(cert)
        (tmp / "webhook.key").write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp / "webhook.crt", tmp / "webhook.key")
        self._cond = threading.Condition()
        self._operation = ""
        self._want = 0
        self._auto = False
        self._released = True
        #: (operation, holderIdentity) of each write held so far.
        self.held: list[tuple[str, str]] = []
        hold = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                request = review["request"]
                hold._admit(request["operation"],
                            str(((request.get("object") or {}).get("spec") or {}).get("holderIdentity")))
                body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                   "response": {"uid": request["uid"], "allowed": True}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, name="lease-hold", daemon=True).start()
        self.name = f"{release.name}-lease-hold"
        plane.apply({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [{
                "name": "hold.leases.podmortem.test",
                "clientConfig": {"url": f"https://127.0.0.1:{self._server.server_address[1]}/hold",
                                 "caBundle": base64.b64encode(authority.pem).decode()},
                "rules": [{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"],
                           "operations": ["CREATE", "UPDATE"], "resources": ["leases"],
                           "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": release.namespace}},
                "matchConditions": [{"name": "the-operator-only",
                                     "expression": f"request.userInfo.username == '{release.user}'"}],
                "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 30,
                "failurePolicy": "Fail",
            }],
        })

    def _admit(self, operation: str, holder: str) -> None:
        with self._cond:
            if self._released or operation != self._operation:
                return
            self.held.append((operation, holder))
            if self._auto and len(self.held) >= self._want:
                self._released = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._released, timeout=25)

    def arm(self, operation: str, count: int = 1, *, together: bool = False) -> None:
        """Hold the next writes of ``operation`` (CREATE, UPDATE: a patch is an UPDATE) until
        :meth:`release`; ``together``: until ``count`` of them are held, then let them all go at once."""
        with self._cond:
            self._operation, self._want, self._auto = operation, count, together
            self._released, self.held = False, []

    def wait_held(self, count: int, *, timeout: float = 60) -> list[tuple[str, str]]:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.held) >= count, timeout=timeout):
                raise AssertionError(f"{count} Lease write(s) never reached the webhook; held {self.held}")
            return list(self.held)

    def release(self) -> None:
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def close(self) -> None:
        self.release()
        self.plane.run("kubectl", "delete", "validatingwebhookconfiguration", self.name, "--ignore-not-found",
                       check=False)
        self._server.shutdown()
        self._server.server_close()
