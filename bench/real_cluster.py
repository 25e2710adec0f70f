"""The real control plane under ``bench/operator_scale.py --cluster real``: P annotated pods on kwok nodes.

A helper, not a benchmark. It starts ``tests.controlplane.cluster.ControlPlane`` (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and kwok on loopback, built by
``hack/control-plane/build.sh``), installs the operator's identity as the chart renders it (the
TrainingJob CRD, the operator's ServiceAccount, ClusterRole and bindings: ``helm template``), and
creates P Running pods annotated ``podmortem.io/watch: "true"`` in namespace ``bench``, each with
its own kwok ``Logs`` object naming its own CRI log file, which holds ``initial_lines`` lines
before the operator starts.

The pods are created with ``spec.nodeName`` set, round-robin over the kwok nodes (as kubemark and
clusterloader2's "pods without the scheduler" runs do): the scheduler's bind of P pods is not what
is measured. They are created over raw HTTPS POSTs from a pool of threads, each with a kept-alive
connection, as the admin (``system:masters``: APF's ``exempt`` level, so setting up is never
throttled). The operator gets a token of its own ServiceAccount (TokenRequest), so RBAC decides its
calls and API Priority and Fairness classifies them as any in-cluster controller's
(``service-accounts`` flow schema, ``workload-low`` priority level), at the default settings.

What it reads for the bench: the API server's ``/metrics`` (requests by verb, resource and
subresource; APF's dispatched and rejected requests; long-running requests open), and each
component's CPU seconds and RSS from ``/proc/PID/stat`` and ``/proc/PID/status``.

kwok serves a followed log as the kubelet does (``k8s.io/cri-client``'s ``ReadLogs``): each follow
that reaches the end of its file opens an inotify instance of its own, and the kernel allows
``fs.inotify.max_user_instances`` of them per user (128 by default). :func:`inotify_instances`
reads the limit; the bench says when it is below the pods followed.

``python bench/real_cluster.py populate ...`` makes the pods (their files, Logs objects, pods and
statuses) in a process of its own, so that the bench's process holds only the operator when its RSS
is read. ``python bench/real_cluster.py tick DIR --every S`` appends a line to every pod's log under DIR
every S seconds, spread evenly (run as a process of its own, so that its CPU is not the operator's).
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the control plane comes from the tests
from tests.controlplane.cluster import ControlPlane, cri_line, missing_binaries  # noqa: E402

NAMESPACE = "bench"
#: The release the operator's RBAC is rendered for, and its namespace (the chart's ServiceAccount).
RELEASE, RELEASE_NAMESPACE = "pm", "podmortem"
SERVICE_ACCOUNT = "pm-podmortem-operator"
CONTAINER = "trainer"
#: The components whose CPU and memory are read (each a process of its own).
COMPONENTS = ("kube-apiserver", "etcd", "kwok", "kube-controller-manager", "kube-scheduler")
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def inotify_instances() -> int | None:
    """``fs.inotify.max_user_instances``: how many follows one kwok (or kubelet) can hold open."""
    try:
        return int(INOTIFY_INSTANCES.read_text())
    except (OSError, ValueError):
        return None


def parse_metrics(text: str, names: Iterable[str]) -> list[tuple[str, dict[str, str], float]]:
    """Samples of the named families from Prometheus' text format: (name, labels, value)."""
    wanted = set(names)
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None or m.group(1) not in wanted:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def proc_usage(pid: int) -> tuple[float, int, int]:
    """A process's CPU seconds (user + system), RSS in bytes and open descriptors, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15)
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        fds = -1
    return cpu, rss, fds


class Poster:
    """HTTPS calls as the admin over one kept-alive connection per thread (``http.client``)."""

    def __init__(self, *, port: int, ca: Path, cert: Path, key: Path) -> None:
        self.host, self.port = "127.0.0.1", port
        self.context = ssl.create_default_context(cafile=str(ca))
        self.context.load_cert_chain(cert, key)
        self.local = threading.local()

    def get(self, path: str) -> Any:
        """GET a JSON document (raises unless 200)."""
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=120)
        try:
            conn.request("GET", path, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {resp.status}: {raw[:500]!r}")
        return json.loads(raw)

    def post(self, path: str, body: dict[str, Any], *, method: str = "POST",
             content_type: str = "application/json") -> int:
        data = json.dumps(body).encode()
        for attempt in range(5):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPSConnection(
                    self.host, self.port, context=self.context, timeout=60)
            try:
                conn.request(method, path, body=data, headers={"Content-Type": content_type,
                                                               "Accept": "application/json"})
                resp = conn.getresponse()
                resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                time.sleep(0.2 * (attempt + 1))
                continue
            if resp.status == 429 or resp.status >= 500:
                time.sleep(0.2 * (attempt + 1))
                continue
            return int(resp.status)
        raise RuntimeError(f"{method} {path} failed 5 times")


class RealCluster:
    """The control plane with P annotated Running pods; ``access`` is the operator's ServiceAccount."""

    def __init__(self, pods: int, *, initial_lines: int = 20, line_every: float = 10.0, nodes: int = 10,
                 creators: int = 8) -> None:
        missing = missing_binaries()
        if missing:
            raise SystemExit(f"the real control plane is not built ({', '.join(missing)} missing): "
                             "run `bash hack/control-plane/build.sh`")
        from podmortem.kube import config

        self.pods = pods
        self.line_every = line_every
        self.root = Path(tempfile.mkdtemp(prefix="podmortem-realscale-"))
        self.marks: dict[str, float] = {}
        self._ticker: subprocess.Popen[bytes] | None = None
        t0 = time.monotonic()
        self.plane = ControlPlane(self.root, nodes=nodes)
        try:
            self.plane.start()
            self.marks["control plane up"] = time.monotonic() - t0
            self._install_operator_identity()
            self.names = [f"idle-{i}" for i in range(pods)]
            t1 = time.monotonic()
            self.uids = self._populate(initial_lines=initial_lines, creators=creators)
            self.seed_s = time.monotonic() - t1
            self.access = config.load(self.plane.service_account_kubeconfig(
                self.root / "operator.kubeconfig", namespace=RELEASE_NAMESPACE, name=SERVICE_ACCOUNT))
            if line_every > 0:
                self._ticker = subprocess.Popen(
                    [sys.executable, __file__, "tick", str(self.plane.logs_dir / NAMESPACE),
                     "--every", str(line_every)], stdin=subprocess.DEVNULL)
        except BaseException:
            self.close()
            raise

    # -- setting up ------------------------------------------------------------------------------

    def _install_operator_identity(self) -> None:
        plane = self.plane
        plane.kubectl("apply", "--server-side", "-f", str(REPO / "charts" / "podmortem" / "crds"))
        for ns in (RELEASE_NAMESPACE, NAMESPACE):
            plane.create_namespace(ns)
        rendered = plane.run("helm", "template", RELEASE, str(REPO / "charts" / "podmortem"),
                             "--namespace", RELEASE_NAMESPACE, "--kube-version", "1.36.0",
                             "--show-only", "templates/serviceaccounts.yaml",
                             "--show-only", "templates/operator-rbac.yaml",
                             "--set", "agent.enabled=false").stdout
        objects = [o for o in yaml.safe_load_all(rendered) if o]
        plane.apply(*objects)
        plane.kubectl("wait", "--for=condition=Established", "crd/trainingjobs.podmortem.io", "--timeout=60s")
        for ns in (RELEASE_NAMESPACE, NAMESPACE):
            path = f"/api/v1/namespaces/{ns}/serviceaccounts/default"
            plane.wait(functools.partial(plane.get, path), what=f"{ns}'s default ServiceAccount")

    def _populate(self, *, initial_lines: int, creators: int) -> list[str]:
        """Every pod, its log file and Logs object, made by ``populate`` in a process of its own (so
        that what making 2P objects leaves in this process's heap is not counted as the operator's);
        the pods' uids, in the order of :attr:`names`."""
        assert self.plane.pki is not None
        cert, key = self.plane._admin_cert_files()
        nodes = [n["metadata"]["name"] for n in (self.plane.get("/api/v1/nodes") or {}).get("items", [])]
        out = subprocess.run(
            [sys.executable, __file__, "populate", "--port", str(self.plane.apiserver_port),
             "--ca", str(self.plane.pki.ca), "--cert", str(cert), "--key", str(key),
             "--logs-dir", str(self.plane.logs_dir), "--pods", str(self.pods),
             "--initial-lines", str(initial_lines), "--creators", str(creators), "--nodes", ",".join(nodes)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, check=True, text=True).stdout
        result = json.loads(out)
        self.marks.update(result["marks"])
        uids: list[str] = result["uids"]
        return uids

    # -- measuring -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.plane.url

    def metrics_text(self) -> str:
        status, body = self.plane.request("GET", "/metrics", timeout=60)
        assert status == 200 and isinstance(body, str), status
        return body

    def usage(self) -> dict[str, tuple[float, int, int]]:
        """CPU seconds, RSS bytes and open descriptors of each component's process."""
        out = {}
        for name in COMPONENTS:
            comp = self.plane.components.get(name)
            if comp is not None and comp.proc is not None and comp.alive():
                out[name] = proc_usage(comp.proc.pid)
        return out

    def stats(self) -> tuple[float, dict[str, int]]:
        """As the emulated cluster's: the control plane's CPU seconds, and the API requests served
        (completed ones, by verb and resource, from ``apiserver_request_total``)."""
        cpu = sum(c for c, _, _ in self.usage().values())
        return cpu, request_counts(self.metrics_text())

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.terminate()
            self._ticker.wait(10)
            self._ticker = None
        self.plane.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class Populator:
    """Makes the pods (``python bench/real_cluster.py populate``): files, Logs objects, pods, statuses."""

    def __init__(self, poster: Poster, *, logs_dir: Path, names: list[str], nodes: list[str]) -> None:
        self.poster = poster
        self.logs_dir = logs_dir
        self.names = names
        self.node_names = nodes
        self.pods = len(names)

    def run(self, *, initial_lines: int, creators: int) -> dict[str, Any]:
        marks: dict[str, float] = {}
        self._write_logs(initial_lines)
        t1 = time.monotonic()
        self._create(creators)
        marks["pods and Logs created"] = time.monotonic() - t1
        t2 = time.monotonic()
        self._wait_running()
        marks["every pod Running (kwok)"] = time.monotonic() - t2
        t3 = time.monotonic()
        uids = self._set_container_ids(creators)
        marks["containerIDs set"] = time.monotonic() - t3
        return {"uids": uids, "marks": marks}

    def _write_logs(self, initial_lines: int) -> None:
        """Each pod's CRI log file with its first lines, before anything follows it."""
        now = time.time()
        for name in self.names:
            folder = self.logs_dir / NAMESPACE / name
            folder.mkdir(parents=True, exist_ok=True)
            lines = (cri_line(f"{name} line {n}", at=now - initial_lines + n) for n in range(initial_lines))
            (folder / f"{CONTAINER}.log").write_text("".join(lines))
            (folder / f"{CONTAINER}.previous.log").touch()

    def _create(self, creators: int) -> None:
        """A Logs object, then the pod, for every pod; ``creators`` threads of kept-alive POSTs."""
        poster = self.poster
        nodes = self.node_names

        def one(i: int) -> None:
            name = self.names[i]
            folder = self.logs_dir / NAMESPACE / name
            log = {"containers": [CONTAINER], "logsFile": str(folder / f"{CONTAINER}.log"),
                   "previousLogsFile": str(folder / f"{CONTAINER}.previous.log"), "follow": True}
            logs = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                    "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"logs": [log]}}
            status = poster.post(f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{NAMESPACE}/logs", logs)
            if status not in (201, 409):
                raise RuntimeError(f"creating Logs {name}: HTTP {status}")
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": NAMESPACE,
                                "annotations": {"podmortem.io/watch": "true"}},
                   "spec": {"nodeName": nodes[i % len(nodes)], "automountServiceAccountToken": False,
                            "containers": [{"name": CONTAINER, "image": "trainer:bench"}]}}
            status = poster.post(f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
            if status not in (201, 409):
                raise RuntimeError(f"creating pod {name}: HTTP {status}")

        with ThreadPoolExecutor(creators, thread_name_prefix="create") as pool:
            for _ in pool.map(one, range(self.pods)):
                pass

    def _wait_running(self) -> None:
        path = (f"/api/v1/namespaces/{NAMESPACE}/pods?limit=1"
                "&fieldSelector=status.phase%21%3DRunning")
        deadline = time.monotonic() + max(300.0, self.pods / 20)
        while time.monotonic() < deadline:
            body = self.poster.get(path)
            if not body["items"] and not body["metadata"].get("continue"):
                return
            time.sleep(1.0)
        raise RuntimeError("not every pod was Running in time")

    def _set_container_ids(self, creators: int) -> list[str]:
        """Give each running container a ``containerID``, as a kubelet's status always has; the uids.

        kwok's pod-ready stage writes none, and a follower waits for the instance it will read.
        """
        pods: dict[str, dict[str, Any]] = {}
        cont = ""
        while True:
            page = f"/api/v1/namespaces/{NAMESPACE}/pods?limit=500" + (f"&continue={cont}" if cont else "")
            body = self.poster.get(page)
            for pod in body["items"]:
                pods[pod["metadata"]["name"]] = pod
            cont = body["metadata"].get("continue") or ""
            if not cont:
                break
        poster = self.poster

        def one(name: str) -> None:
            pod = pods[name]
            statuses = [{**c, "containerID": f"containerd://{pod['metadata']['uid']}-{c['name']}"}
                        for c in pod["status"]["containerStatuses"]]
            status = poster.post(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status",
                                 {"status": {"containerStatuses": statuses}}, method="PATCH",
                                 content_type="application/merge-patch+json")
            if status != 200:
                raise RuntimeError(f"patching pod {name}'s status: HTTP {status}")

        with ThreadPoolExecutor(creators, thread_name_prefix="status") as pool:
            for _ in pool.map(one, self.names):
                pass
        return [pods[n]["metadata"]["uid"] for n in self.names]


def request_counts(text: str) -> dict[str, int]:
    """``apiserver_request_total`` summed by ``VERB resource[/subresource] code``."""
    counts: dict[str, int] = {}
    for _, labels, value in parse_metrics(text, ["apiserver_request_total"]):
        what = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        key = f"{labels.get('verb', '?')} {what} {labels.get('code', '?')}"
        counts[key] = counts.get(key, 0) + int(value)
    return counts


def apf_counts(text: str) -> dict[str, dict[str, float]]:
    """APF's dispatched and rejected requests by flow schema, and the long-running requests open."""
    out: dict[str, dict[str, float]] = {"dispatched": {}, "rejected": {}, "longrunning": {}}
    families = ["apiserver_flowcontrol_dispatched_requests_total",
                "apiserver_flowcontrol_rejected_requests_total", "apiserver_longrunning_requests"]
    for name, labels, value in parse_metrics(text, families):
        if name == "apiserver_longrunning_requests":
            key = f"{labels.get('verb', '?')} {labels.get('resource', '')}" + (
                f"/{labels['subresource']}" if labels.get("subresource") else "")
            bucket = out["longrunning"]
        else:
            key = f"{labels.get('flow_schema', '?')}/{labels.get('priority_level', '?')}" + (
                f" ({labels['reason']})" if labels.get("reason") else "")
            bucket = out["dispatched" if "dispatched" in name else "rejected"]
        bucket[key] = bucket.get(key, 0.0) + value
    return out


def diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


# -- the line writer (a process of its own) --------------------------------------------------------


def _tick(folder: Path, every: float) -> None:
    files = sorted(folder.glob(f"*/{CONTAINER}.log"))
    if not files:
        return
    gap = every / len(files)
    n = 0
    start = time.monotonic()
    for round_ in _rounds():
        for i, path in enumerate(files):
            due = start + round_ * every + i * gap
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with path.open("a") as out:
                out.write(cri_line(f"{path.parent.name} tick {n}"))
            n += 1


def _rounds() -> Iterator[int]:
    i = 0
    while True:
        yield i
        i += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    tick = sub.add_parser("tick", help="append a line to every pod's log every --every seconds")
    tick.add_argument("folder", type=Path)
    tick.add_argument("--every", type=float, default=10.0)
    populate = sub.add_parser("populate", help="make the pods (RealCluster runs it); print their uids (JSON)")
    populate.add_argument("--port", type=int, required=True)
    for name in ("ca", "cert", "key", "logs-dir"):
        populate.add_argument(f"--{name}", type=Path, required=True)
    populate.add_argument("--pods", type=int, required=True)
    populate.add_argument("--initial-lines", type=int, default=20)
    populate.add_argument("--creators", type=int, default=8)
    populate.add_argument("--nodes", required=True, help="kwok node names, comma-separated")
    args = parser.parse_args()
    if args.command == "tick":
        _tick(args.folder, args.every)
        return 0
    poster = Poster(port=args.port, ca=args.ca, cert=args.cert, key=args.key)
    populator = Populator(poster, logs_dir=args.logs_dir, names=[f"idle-{i}" for i in range(args.pods)],
                          nodes=args.nodes.split(","))
    print(json.dumps(populator.run(initial_lines=args.initial_lines, creators=args.creators)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
