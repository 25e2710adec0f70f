"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, built from their own Go modules by ``hack/control-plane/build.sh``.

The tests run podmortem against this so that what the real API server does (paging, the watch cache,
410 after compaction, the pod log proxy, structural schemas, Leases, RBAC, TokenReview, admission
webhooks, PodSecurity) is what the tests see, not what our emulation believes it does.

kube-apiserver is started as a managed cluster starts it: TLS, ``--authorization-mode=Node,RBAC``,
service-account token signing, the default admission plugins (PodSecurity, MutatingAdmissionWebhook,
ValidatingAdmissionWebhook among them) and the watch cache. kwok plays the kubelets: its nodes
register with 127.0.0.1 and its server's port as their kubelet endpoint, so ``pods/log`` goes
through the API server's real log proxy to kwok, which serves each container's log from a file in
the CRI format the kubelet reads (:meth:`ControlPlane.pod_log_file`).

Run by hand: ``python -m tests.controlplane.cluster up`` (see ``--help``); it prints the admin
kubeconfig's path and runs until interrupted.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from tests.cli import entrypoints
from tests.controlplane.pki import Authority, Files, write_pki

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack" / "control-plane"
#: The annotation kwok's controller is told to manage nodes by (``--manage-nodes-with-annotation-selector``).
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SERVICE_CIDR = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
#: The binaries build.sh makes; all must be there for the control plane to start.
BINARIES = ("etcd", "etcdctl", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
            "kubectl", "kwok", "helm")
#: What the API server's audit log records (:meth:`ControlPlane.audit`): every request of a
#: ServiceAccount (podmortem's processes log in as one) on pods and Leases, at Metadata level (the
#: request URI with its query, the verb, the user, the response code), and nothing else. Each
#: request is one line (its ResponseComplete stage; a watch also its ResponseStarted one).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"],
         "resources": [{"group": "", "resources": ["pods"]},
                       {"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {"level": "None"},
    ],
}


def versions() -> dict[str, str]:
    """``hack/control-plane/versions.env`` as a mapping."""
    pins: dict[str, str] = {}
    for line in (HACK / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            pins[key] = value
    return pins


def cache_dir() -> Path:
    """Where build.sh puts the binaries (the same rule as the script's)."""
    if "PODMORTEM_CONTROL_PLANE_CACHE" in os.environ:
        return Path(os.environ["PODMORTEM_CONTROL_PLANE_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "podmortem" / "control-plane"


def bin_dir() -> Path:
    v = versions()
    return cache_dir() / (f"bin-k8s{v['KUBERNETES_VERSION']}-etcd{v['ETCD_VERSION']}"
                          f"-kwok{v['KWOK_VERSION']}-helm{v['HELM_VERSION']}")


def kwok_data_dir() -> Path:
    """kwok's own stage and CRD manifests, copied from its module by build.sh."""
    return cache_dir() / f"kwok-{versions()['KWOK_VERSION']}"


def missing_binaries() -> list[str]:
    """The binaries build.sh has not made yet (empty when the control plane can start)."""
    folder = bin_dir()
    missing = [b for b in BINARIES if not (folder / b).exists()]
    if not (kwok_data_dir() / "stages").is_dir():
        missing.append("kwok stages")
    return missing


def free_port() -> int:
    """A free port, never one this test process handed out before (``tests.cli.entrypoints``' registry).

    Another process may still bind it before the component does: :meth:`ControlPlane.start` then
    starts over with new ports.
    """
    return entrypoints.free_port()


class ControlPlaneError(RuntimeError):
    """A component would not start or answer; the message carries the tail of its log."""


@dataclass
class Component:
    """One started binary: its command line, its log file and its process."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            out.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env={**os.environ, **self.env},
                                         start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, *, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, started in ``root``.

    ``nodes`` kwok nodes are registered. The admin kubeconfig (``system:masters``, a client
    certificate) is :attr:`admin_kubeconfig`; :meth:`service_account_kubeconfig` makes one that holds
    a ServiceAccount's token, so that RBAC decides every call made with it.
    """

    root: Path
    nodes: int = 3
    bin: Path = field(default_factory=bin_dir)
    components: dict[str, Component] = field(default_factory=dict)
    apiserver_port: int = 0
    etcd_port: int = 0
    kwok_port: int = 0
    pki: Files | None = None
    _authority: Authority | None = None

    # -- paths -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def logs_dir(self) -> Path:
        return self.root / "pod-logs"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (JSON lines; what it holds: :data:`AUDIT_POLICY`)."""
        return self.root / "audit.log"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    # -- start and stop ----------------------------------------------------------------------

    #: Starts tried when a component finds its port taken between our pick and its bind.
    START_ATTEMPTS = 3

    def start(self) -> ControlPlane:
        missing = missing_binaries()
        if missing:
            raise ControlPlaneError(f"not built: {', '.join(missing)} (run hack/control-plane/build.sh)")
        for attempt in range(1, self.START_ATTEMPTS + 1):
            try:
                return self._start_once()
            except ControlPlaneError as exc:
                if "address already in use" not in str(exc) or attempt == self.START_ATTEMPTS:
                    raise
                shutil.rmtree(self.root / "etcd", ignore_errors=True)
        raise AssertionError("unreachable")

    def _start_once(self) -> ControlPlane:
        self.root.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        self._authority = Authority()
        self.pki = write_pki(self.root / "pki", self._authority)
        self.apiserver_port, self.etcd_port, self.kwok_port = free_port(), free_port(), free_port()
        peer_port = free_port()
        self._write_kubeconfigs()
        (self.root / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        self.components = {
            "etcd": self._component("etcd", [
                "--name=podmortem", f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=podmortem=http://127.0.0.1:{peer_port}",
                # A test machine, not a cluster: the disk's fsync latency is not what is tested.
                "--unsafe-no-fsync", "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ]),
            "kube-apiserver": self._component("kube-apiserver", self._apiserver_args()),
            "kube-controller-manager": self._component("kube-controller-manager", [
                f"--kubeconfig={self.root / 'controller-manager.kubeconfig'}",
                f"--authentication-kubeconfig={self.root / 'controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={self.root / 'controller-manager.kubeconfig'}",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca}", "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={self.pki.ca}",
                f"--cluster-signing-key-file={self.pki.ca_key}",
                "--leader-elect=false", f"--secure-port={free_port()}", "--bind-address=127.0.0.1",
                "--controllers=*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle",
                "--concurrent-gc-syncs=5", "--kube-api-qps=200", "--kube-api-burst=400", "--v=1",
            ]),
            "kube-scheduler": self._component("kube-scheduler", [
                f"--kubeconfig={self.root / 'scheduler.kubeconfig'}",
                f"--authentication-kubeconfig={self.root / 'scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={self.root / 'scheduler.kubeconfig'}",
                "--leader-elect=false", f"--secure-port={free_port()}", "--bind-address=127.0.0.1",
                "--kube-api-qps=500", "--kube-api-burst=1000", "--v=1",
            ]),
            "kwok": self._component("kwok", self._kwok_args()),
        }
        try:
            self._start("etcd")
            self._wait(lambda: self._etcd_healthy() or None, what="etcd healthy", component="etcd")
            self._start("kube-apiserver")
            self._wait(lambda: self._api_ready() or None, what="kube-apiserver /readyz",
                       component="kube-apiserver", timeout=120)
            self._start("kube-controller-manager")
            self._start("kube-scheduler")
            self._install_kwok()
            self._start("kwok")
            self.add_nodes(self.nodes)
            self._wait(self._default_service_account, what="the default ServiceAccount",
                       component="kube-controller-manager", timeout=60)
            for comp in self.components.values():
                if not comp.alive():
                    code = comp.proc.returncode if comp.proc else None
                    raise ControlPlaneError(f"{comp.name} exited {code} during start:\n{comp.tail()}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in reversed(list(self.components)):
            self.components[name].stop()

    def restart(self, name: str, *, sig: int = signal.SIGTERM) -> None:
        """Stop one component (SIGKILL with ``sig=signal.SIGKILL``) and start it again, waiting for it."""
        self.components[name].stop(sig=sig)
        self._start(name)
        if name == "kube-apiserver":
            self._wait(lambda: self._api_ready() or None, what="kube-apiserver /readyz again",
                       component=name, timeout=120)
        elif name == "etcd":
            self._wait(lambda: self._etcd_healthy() or None, what="etcd again", component=name)

    def kill(self, name: str) -> None:
        """SIGKILL one component and leave it down."""
        self.components[name].stop(sig=signal.SIGKILL)

    def start_component(self, name: str) -> None:
        self._start(name)

    def _component(self, name: str, args: list[str]) -> Component:
        return Component(name, [str(self.bin / name), *args], self.root / f"{name}.log")

    def _start(self, name: str) -> None:
        self.components[name].start()

    def _apiserver_args(self) -> list[str]:
        assert self.pki is not None
        return [
            f"--etcd-servers={self.etcd_url}", f"--secure-port={self.apiserver_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--tls-cert-file={self.pki.apiserver}", f"--tls-private-key-file={self.pki.apiserver_key}",
            f"--client-ca-file={self.pki.ca}",
            f"--service-account-issuer={ISSUER}", f"--api-audiences={ISSUER}",
            f"--service-account-key-file={self.pki.sa_pub}",
            f"--service-account-signing-key-file={self.pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            # On top of the defaults (NamespaceLifecycle, LimitRanger, ServiceAccount, PodSecurity,
            # Priority, DefaultTolerationSeconds, Mutating/ValidatingAdmissionWebhook, ResourceQuota,
            # ...), what a managed cluster adds.
            "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={self.pki.kubelet_client}",
            f"--kubelet-client-key={self.pki.kubelet_client_key}",
            f"--kubelet-certificate-authority={self.pki.ca}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--requestheader-client-ca-file={self.pki.front_proxy_ca}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.pki.front_proxy_client}",
            f"--proxy-client-key-file={self.pki.front_proxy_client_key}",
            "--allow-privileged=true", "--profiling=false", "--v=1",
            "--event-ttl=1h",
            f"--audit-policy-file={self.root / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
            "--audit-log-mode=blocking",
        ]

    def _kwok_args(self) -> list[str]:
        assert self.pki is not None
        return [
            f"--kubeconfig={self.root / 'kwok.kubeconfig'}", f"--config={self.root / 'kwok.yaml'}",
            f"--manage-nodes-with-annotation-selector={'='.join(KWOK_NODE_ANNOTATION)}",
            "--node-ip=127.0.0.1", f"--node-port={self.kwok_port}",
            f"--server-address=127.0.0.1:{self.kwok_port}",
            f"--tls-cert-file={self.pki.kwok_serving}", f"--tls-private-key-file={self.pki.kwok_serving_key}",
            "--enable-crds=Logs,PortForward",
        ]

    def _install_kwok(self) -> None:
        """kwok's Logs CRD (one object per pod names its log files), its PortForward CRD (one object per
        pod sends its ports' forwards to a local address: :meth:`forward_port`) and its stages."""
        data = kwok_data_dir()
        for kind in ("logs", "portforwards"):
            self.kubectl("apply", "--server-side", "-f", str(data / "crds" / f"kwok.x-k8s.io_{kind}.yaml"))
            self.kubectl("wait", "--for=condition=Established", f"crd/{kind}.kwok.x-k8s.io",
                         "--timeout=60s")
        stages = [
            data / "stages" / "node" / "fast" / "node-initialize.yaml",
            data / "stages" / "node" / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml",
            data / "stages" / "pod" / "fast" / "pod-ready.yaml",
            data / "stages" / "pod" / "fast" / "pod-complete.yaml",
            data / "stages" / "pod" / "fast" / "pod-delete.yaml",
        ]
        # kwok applies its option defaults only when no configuration is given: they are spelled out.
        # The CIDR only names pods' IPs in their status (no traffic goes there); /16 holds 65,534 pods.
        config = [{"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
                   "options": {"enableCRDs": ["Logs", "PortForward"], "cidr": "10.0.0.1/16",
                               "manageAllNodes": False, "enableDebuggingHandlers": True,
                               "enableContentionProfiling": False, "enableProfilingHandler": False,
                               "podPlayStageParallelism": 16, "nodePlayStageParallelism": 4,
                               "nodeLeaseParallelism": 4, "nodeLeaseDurationSeconds": 40,
                               "podsOnNodeSyncParallelism": 1, "enablePodsOnNodeSyncListPager": True,
                               "enablePodsOnNodeSyncStreamWatch": False}}]
        text = yaml.safe_dump_all(config) + "".join("---\n" + p.read_text() for p in stages)
        (self.root / "kwok.yaml").write_text(text)

    # -- kubeconfigs -------------------------------------------------------------------------

    def _write_kubeconfigs(self) -> None:
        assert self._authority is not None
        for name, user, groups in (
            ("admin", "kubernetes-admin", ("system:masters",)),
            ("controller-manager", "system:kube-controller-manager", ()),
            ("scheduler", "system:kube-scheduler", ()),
            ("kwok", "kwok-controller", ("system:masters",)),
        ):
            cert, key = self._authority.issue(user, groups=groups)
            self._kubeconfig(self.root / f"{name}.kubeconfig",
                             {"client-certificate-data": base64.b64encode(cert).decode(),
                              "client-key-data": base64.b64encode(key).decode()})

    def _kubeconfig(self, path: Path, user: Mapping[str, str], *, namespace: str = "default") -> Path:
        assert self._authority is not None
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "podmortem-real",
            "clusters": [{"name": "podmortem-real", "cluster": {
                "server": self.url,
                "certificate-authority-data": base64.b64encode(self._authority.pem).decode()}}],
            "users": [{"name": "user", "user": dict(user)}],
            "contexts": [{"name": "podmortem-real", "context": {
                "cluster": "podmortem-real", "user": "user", "namespace": namespace}}],
        }))
        path.chmod(0o600)
        return path

    def service_account_kubeconfig(self, path: Path, *, namespace: str, name: str,
                                   duration: str = "2h") -> Path:
        """A kubeconfig holding a token the API server issued for this ServiceAccount (TokenRequest)."""
        token = self.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").strip()
        return self._kubeconfig(path, {"token": token}, namespace=namespace)

    def mounted_service_account(self, path: Path, *, namespace: str, name: str) -> Path:
        """The files the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount for a pod of
        this ServiceAccount: a token the API server issued (TokenRequest), its CA and the namespace."""
        path.mkdir(parents=True, exist_ok=True)
        (path / "token").write_text(self.token(namespace, name))
        (path / "ca.crt").write_bytes(self.ca_pem)
        (path / "namespace").write_text(namespace)
        return path

    def token(self, namespace: str, name: str, *, audience: str | None = None) -> str:
        args = ["create", "token", name, "-n", namespace, "--duration=2h"]
        if audience:
            args.append(f"--audience={audience}")
        return self.kubectl(*args).strip()

    @property
    def ca_pem(self) -> bytes:
        assert self._authority is not None
        return self._authority.pem

    # -- using it ----------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """An environment whose kubectl and helm reach this control plane as its admin."""
        return {**os.environ, "KUBECONFIG": str(self.admin_kubeconfig),
                "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
                "HELM_CACHE_HOME": str(self.root / "helm" / "cache"),
                "HELM_CONFIG_HOME": str(self.root / "helm" / "config"),
                "HELM_DATA_HOME": str(self.root / "helm" / "data")}

    def run(self, tool: str, *args: str, input: str | None = None, check: bool = True,
            kubeconfig: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run kubectl, helm or etcdctl from the built set; raise with its stderr when it fails."""
        env = self.env()
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        argv = [str(self.bin / tool), *args]
        if tool == "etcdctl":
            argv.insert(1, f"--endpoints={self.etcd_url}")
        result = subprocess.run(argv, input=input, capture_output=True, text=True, env=env,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise ControlPlaneError(f"{tool} {' '.join(args)} exited {result.returncode}:\n"
                                    f"{result.stderr[-3000:]}{result.stdout[-1000:]}")
        return result

    def kubectl(self, *args: str, input: str | None = None, kubeconfig: Path | None = None) -> str:
        return self.run("kubectl", *args, input=input, kubeconfig=kubeconfig).stdout

    def apply(self, *objects: Mapping[str, Any], server_side: bool = False) -> None:
        args = ["apply", "-f", "-"] + (["--server-side", "--force-conflicts"] if server_side else [])
        self.kubectl(*args, input=yaml.safe_dump_all([dict(o) for o in objects]))

    def get(self, path: str, *, kubeconfig: Path | None = None) -> dict[str, Any] | None:
        """GET an API path as the admin; None on 404."""
        result = self.run("kubectl", "get", "--raw", path, check=False, kubeconfig=kubeconfig)
        if result.returncode != 0:
            if "NotFound" in result.stderr or "not found" in result.stderr:
                return None
            raise ControlPlaneError(f"GET {path}: {result.stderr[-2000:]}")
        value: dict[str, Any] = json.loads(result.stdout)
        return value

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                token: str | None = None, timeout: float = 30) -> tuple[int, Any]:
        """One HTTPS call with the admin's client certificate (or ``token``): (status, decoded body)."""
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        headers = {"Accept": "application/json"}
        if token is None:
            cert, key = self._admin_cert_files()
            context.load_cert_chain(cert, key)
        else:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, context=context, timeout=timeout) as resp:
                raw = resp.read()
                status = int(resp.status)
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), int(exc.code)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    def _admin_cert_files(self) -> tuple[Path, Path]:
        cert, key = self.root / "pki" / "admin-client.crt", self.root / "pki" / "admin-client.key"
        if not cert.exists():
            config = yaml.safe_load(self.admin_kubeconfig.read_text())
            user = config["users"][0]["user"]
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            key.chmod(0o600)
        return cert, key

    def create_namespace(self, name: str) -> str:
        """Create a namespace and wait for its ``default`` ServiceAccount, as a user's next step would.

        Until kube-controller-manager has made that ServiceAccount, the ServiceAccount admission
        plugin refuses every pod in the namespace ("error looking up service account"): on a loaded
        machine that took seconds, and tests that created a pod at once failed.
        """
        self.kubectl("create", "namespace", name)
        self.wait(lambda: True if self.get(f"/api/v1/namespaces/{name}/serviceaccounts/default") else None,
                  what=f"the default ServiceAccount of namespace {name}", timeout=120)
        return name

    def add_nodes(self, count: int, *, prefix: str = "kwok-node") -> list[str]:
        """Register ``count`` more kwok nodes; wait until each is Ready."""
        existing = {n["metadata"]["name"] for n in (self.get("/api/v1/nodes") or {}).get("items", [])}
        names: list[str] = []
        i = 0
        while len(names) < count:
            name = f"{prefix}-{i}"
            i += 1
            if name not in existing:
                names.append(name)
        self.apply(*({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n, "annotations": {KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1],
                                                     "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"kubernetes.io/hostname": n, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok"}},
        } for n in names))

        def ready() -> bool | None:
            nodes = (self.get("/api/v1/nodes") or {}).get("items", [])
            ok = {n["metadata"]["name"] for n in nodes
                  for c in n.get("status", {}).get("conditions", [])
                  if c.get("type") == "Ready" and c.get("status") == "True"}
            return True if set(names) <= ok else None

        self._wait(ready, what=f"{count} kwok node(s) Ready", component="kwok", timeout=60)
        for n in names:
            self._give_hostname(n)
        return names

    def _give_hostname(self, node: str) -> None:
        """Write the node's ``Hostname`` address beside kwok's ``InternalIP``, as a kubelet reports both.

        kwok (run without ``--node-name``) gives a node only an ``InternalIP``; its node-initialize
        stage, played again whenever the node is not Ready (its lease lapsed: kwok was down, or
        starved of CPU, for the node monitor's grace period), then writes an empty ``addresses``
        list, and the API server can no longer reach the node: every pod log request answers 500
        ("no preferred addresses found") until a later heartbeat writes the address back, up to
        10 minutes later. With both addresses the stage leaves the list alone.
        """
        code, answer = self.request(
            "PATCH", f"/api/v1/nodes/{node}/status",
            {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                      {"type": "Hostname", "address": node}]}},
            content_type="application/strategic-merge-patch+json")
        if code != 200:
            raise ControlPlaneError(f"writing the addresses of node {node}: {code} {answer}")

    def pod_log_file(self, namespace: str, pod: str, container: str, *, previous: bool = False) -> Path:
        """The file kwok serves as this container's log (``--previous``: the earlier instance's).

        A kwok ``Logs`` object names it; write lines with :func:`cri_line`.
        """
        folder = self.logs_dir / namespace / pod
        folder.mkdir(parents=True, exist_ok=True)
        return folder / (f"{container}.previous.log" if previous else f"{container}.log")

    def give_container_ids(self, pod: Mapping[str, Any]) -> None:
        """Write a ``containerID`` for each started container of ``pod`` (its body as read) that has none.

        kwok's "fast" stages make a pod Running without one; a kubelet always reports one for a started
        container, and the operator follows a container only once it has one. Written here as the
        kubelet would, through the status subresource.
        """
        meta, statuses = pod["metadata"], pod["status"].get("containerStatuses") or []
        if all(s.get("containerID") for s in statuses):
            return
        patched = [{**s, "containerID": s.get("containerID")
                    or f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}"} for s in statuses]
        where = f"{meta['namespace']}/pods/{meta['name']}"
        code, answer = self.request("PATCH", f"/api/v1/namespaces/{where}/status",
                                    {"status": {"containerStatuses": patched}},
                                    content_type="application/merge-patch+json")
        if code != 200:
            raise ControlPlaneError(f"writing the containerIDs of {where}: {code} {answer}")

    def serve_logs(self, namespace: str, pod: str, containers: Sequence[str]) -> None:
        """Tell kwok where each container's log lies (creates the files empty if they are missing)."""
        logs = []
        for c in containers:
            current, previous = (self.pod_log_file(namespace, pod, c),
                                 self.pod_log_file(namespace, pod, c, previous=True))
            current.touch()
            previous.touch()
            logs.append({"containers": [c], "logsFile": str(current), "previousLogsFile": str(previous),
                         "follow": True})
        self.apply({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                    "metadata": {"name": pod, "namespace": namespace}, "spec": {"logs": logs}})

    def forward_port(self, namespace: str, pod: str, port: int, *, to: tuple[str, int]) -> None:
        """Tell kwok to serve ``pods/portforward`` of ``pod``'s ``port`` by connecting to ``to`` (a local
        address, where a test's process listens), as a kubelet would connect to the container."""
        self.apply({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "PortForward",
                    "metadata": {"name": pod, "namespace": namespace},
                    "spec": {"forwards": [{"ports": [port],
                                           "target": {"address": to[0], "port": to[1]}}]}})

    def audit(self, *, user: str | None = None) -> list[dict[str, Any]]:
        """The audit log's events (:data:`AUDIT_POLICY`), oldest first; only ``user``'s when given
        (a ServiceAccount's: ``system:serviceaccount:NAMESPACE:NAME``)."""
        try:
            lines = self.audit_log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []
        events = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line being written now
            if user is None or event.get("user", {}).get("username") == user:
                events.append(event)
        return events

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (as the API server's own compactor does); the revision."""
        status = json.loads(self.run("etcdctl", "endpoint", "status", "-w", "json").stdout)
        revision = int(status[0]["Status"]["header"]["revision"])
        self.run("etcdctl", "compact", str(revision), "--physical")
        return revision

    # -- waiting -----------------------------------------------------------------------------

    def _wait(self, probe: Callable[[], T | None], *, what: str, component: str,
              timeout: float = 60.0) -> T:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            comp = self.components.get(component)
            if comp is not None and comp.proc is not None and not comp.alive():
                raise ControlPlaneError(f"{component} exited {comp.proc.returncode} while waiting for "
                                        f"{what}:\n{comp.tail()}")
            try:
                value = probe()
            except (OSError, ControlPlaneError, ValueError, subprocess.SubprocessError):
                value = None
            if value is not None:
                return value
            time.sleep(0.25)
        comp = self.components.get(component)
        raise ControlPlaneError(f"timed out after {timeout:.0f} s waiting for {what}:\n"
                                f"{comp.tail() if comp else ''}")

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.etcd_url + "/health", timeout=2) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _api_ready(self) -> bool:
        status, _ = self.request("GET", "/readyz", timeout=5)
        return status == 200

    def _default_service_account(self) -> bool | None:
        return True if self.get("/api/v1/namespaces/default/serviceaccounts/default") else None

    def wait(self, probe: Callable[[], T | None], *, what: str, timeout: float = 60.0) -> T:
        """Poll ``probe`` until it returns something else than None."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                value = probe()
            except (OSError, ControlPlaneError, ValueError, KeyError, subprocess.SubprocessError) as exc:
                last, value = exc, None
            if value is not None:
                return value
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}"
                             + (f" (last error: {last})" if last else ""))


def cri_line(text: str, *, stream: str = "stdout", at: float | None = None, partial: bool = False) -> str:
    """One line of a container log file as the kubelet's CRI runtime writes it (and kwok reads it)."""
    stamp = time.time() if at is None else at
    whole, frac = divmod(stamp, 1)
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int(frac * 1e9):09d}Z"
    return f"{iso} {stream} {'P' if partial else 'F'} {text}\n"


@contextmanager
def running(root: Path | None = None, *, nodes: int = 3) -> Iterator[ControlPlane]:
    """A started control plane for the length of the block; its files are removed after."""
    owned = root is None
    folder = Path(tempfile.mkdtemp(prefix="podmortem-cp-")) if root is None else root
    plane = ControlPlane(folder, nodes=nodes).start()
    try:
        yield plane
    finally:
        plane.stop()
        if owned:
            shutil.rmtree(folder, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.controlplane.cluster",
        description="Start the real control plane (etcd, kube-apiserver, kube-controller-manager, "
                    "kube-scheduler, kwok) on loopback and keep it running until interrupted. "
                    "Build it first with hack/control-plane/build.sh.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start it; print the admin kubeconfig's path; run until Ctrl-C")
    up.add_argument("--dir", type=Path, default=None,
                    help="where its files go (default: a new temporary folder, removed at exit)")
    up.add_argument("--nodes", type=int, default=3, help="kwok nodes to register (default 3)")
    args = parser.parse_args(argv)
    missing = missing_binaries()
    if missing:
        print(f"not built: {', '.join(missing)}; run: bash hack/control-plane/build.sh", file=sys.stderr)
        return 2
    started = time.monotonic()
    with running(args.dir, nodes=args.nodes) as plane:
        print(f"control plane up in {time.monotonic() - started:.1f} s; logs in {plane.root}",
              file=sys.stderr)
        print(f"export KUBECONFIG={plane.admin_kubeconfig} PATH={plane.bin}:$PATH", file=sys.stderr)
        print(plane.admin_kubeconfig, flush=True)
        with suppress(KeyboardInterrupt):
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    sys.exit(main())
