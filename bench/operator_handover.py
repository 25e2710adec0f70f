"""Benchmark: leader hand-over at scale, the leader SIGKILLed with 10,000 followed pods.

The scenario of ``tests/cli/test_handover_scale.py``, parameterised. Two
``podmortem operator`` processes are started as the chart starts them: leader
election on, a distinct ``PODMORTEM_POD_NAME`` each, one shared
``PODMORTEM_LOG_STORE_DIR`` standing in for the ReadWriteMany volume, the Lease
settings given here (default the chart's: lease 15 s, renew deadline 10 s, retry
2 s), agent off, log HTTP auth off. The emulated cluster (kmock + emulated kubelet,
``podmortem_demo.scale_cluster``) runs in a process of its own, seeded with P
Running pods annotated ``podmortem.io/watch`` that have written
``--initial-lines`` lines and then stay silent unless told to write.

1. Replica A starts, takes the Lease and follows every pod. Measured from its start:
   ``/readyz`` says leader, ``podmortem_followed_pods`` (its metrics port) = P,
   ``podmortem_logs_lines_total`` = P x initial lines, and every pod's log, read back
   from A's log HTTP server, holds its first lines.
2. Replica B starts and reports itself a ready standby. Every pod writes ``--lines``
   lines; the bench waits until A has stored them (read back as above).
3. A is killed with SIGKILL: no release of the Lease, no graceful stop, no cursor
   flushed at the end. While no one leads, every pod writes ``--lines`` more lines and
   ``--killed`` pods (spread evenly over the P) are OOM-killed (exit 137).
4. Measured from the kill: B holding the Lease (goal: within the lease duration +
   10 s), B's ``/readyz`` saying leader, B's ``podmortem_followed_pods`` reaching the
   live pods (P - killed; a killed pod's follow ends with its log) and P if it ever
   does, B's ``podmortem_logs_lines_total`` reaching P x lines (what it had to store),
   every pod's whole log (initial + before + during) served by B, and the failure
   report on the last killed pod (the emulated cluster notes the operator's PATCH of
   ``podmortem.io/failure-report``).
5. After a short settle (a line stored twice would show by then), every pod's log is
   read once more from B's log HTTP server, with ``--readers`` threads at once, and
   checked line by line: each pod's lines must be exactly 0 .. N-1 (each emulated
   line carries its sequence number), in order, with no gap marker. Lines lost and
   lines repeated are counted over all pods. The pods' reports are read from the
   API's pod list: K of K killed pods reported, none on another pod.

Printed: the timings above, how long the log checks took, B's RSS and CPU seconds
(as a standby, and spent on the hand-over), A's at the kill, B's gap and duplicate
counters, the emulated cluster's CPU, and one line per goal, MET or NOT MET with
the numbers. The three processes share this machine's cores; the bench's own log
reads compete with B (they start only once B has stored what it had to).

Needs open files for about 2 x P sockets in the emulated cluster while A's streams
are being torn down and B's opened (``ulimit -n``); the operators raise their own
soft limit to the hard one.

Usage: python bench/operator_handover.py [--pods 10000] [--killed 100] [--lines 15]
       [--lease-duration 15] [--renew-deadline 10] [--retry-period 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from podmortem.operator.watch_options import FAILURE_REPORT
from podmortem_demo.scale_cluster import NAMESPACE, ScaleCluster

#: The ``podmortem`` console script of this environment (what ``pip install`` made).
PODMORTEM = str(Path(sys.executable).with_name("podmortem"))
LEASE_NS, LEASE_NAME = "podmortem", "podmortem-operator"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{LEASE_NAME}"
#: The issue's bound on the take-over: the lease duration plus this.
LEASE_SLACK_S = 10.0
#: Each emulated line is ``trainer 0 <seq> step=... loss=...`` (``kubelet.plain_text``), seq from 0.
LINE = re.compile(r"^trainer 0 (\d+) step=\d+ loss=0\.\d{4}$")
#: Seconds between the last log served complete and the final read (a line stored twice shows by then).
SETTLE_S = 2.0
#: Variables that would point a process at some other cluster.
_FOREIGN_ENV = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_GIVEN: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now, and not one handed out before (two binds may get the same)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


def http_get(url: str, *, timeout: float = 30.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return 0, str(exc)


@dataclass
class Replica:
    """One ``podmortem operator`` process, its ports and its log file."""

    identity: str
    tmp: Path
    kubeconfig: Path
    store: Path
    args: argparse.Namespace
    proc: subprocess.Popen[bytes] = field(init=False)
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.http_port, self.metrics_port, self.health_port = free_port(), free_port(), free_port()
        self.home = self.tmp / self.identity
        self.home.mkdir()
        self.log = self.tmp / f"{self.identity}.log"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in _FOREIGN_ENV and not k.startswith("PODMORTEM_")}
        env.update(
            HOME=str(self.home), PYTHONUNBUFFERED="1",
            PODMORTEM_LOG_STORE_DIR=str(self.store),
            PODMORTEM_HTTP_PORT=str(self.http_port),
            PODMORTEM_METRICS_PORT=str(self.metrics_port),
            PODMORTEM_HEALTH_PORT=str(self.health_port),
            PODMORTEM_HTTP_AUTH="none",  # kmock has no TokenReview
            PODMORTEM_AGENT_ENABLED="false",  # no node agent: reports from the pod status and logs
            PODMORTEM_LEADER_ELECTION="true",
            PODMORTEM_LEADER_ELECTION_LEASE=LEASE_NAME,
            PODMORTEM_POD_NAMESPACE=LEASE_NS,
            PODMORTEM_POD_NAME=self.identity,
            PODMORTEM_LEADER_ELECTION_LEASE_DURATION_SECONDS=f"{self.args.lease_duration:g}",
            PODMORTEM_LEADER_ELECTION_RENEW_DEADLINE_SECONDS=f"{self.args.renew_deadline:g}",
            PODMORTEM_LEADER_ELECTION_RETRY_PERIOD_SECONDS=f"{self.args.retry_period:g}",
        )
        return env

    def start(self) -> Replica:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([PODMORTEM, "operator", "--kubeconfig", str(self.kubeconfig)],
                                         env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self.started = time.monotonic()
        return self

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, n: int = 40) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(f"  | {line}" for line in lines[-n:])

    def check_alive(self, what: str) -> None:
        if not self.alive():
            raise SystemExit(f"{self.identity} exited {self.proc.returncode} while {what}:\n{self.tail()}")

    def readyz(self) -> str:
        status, body = http_get(f"http://127.0.0.1:{self.health_port}/readyz", timeout=5)
        return body if status == 200 else ""

    def metrics(self) -> dict[str, float]:
        """The samples of /metrics, summed over their labels (name -> value); empty if it does not answer."""
        status, body = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10)
        out: dict[str, float] = {}
        if status != 200:
            return out
        for line in body.splitlines():
            if line and not line.startswith("#"):
                sample, _, value = line.rpartition(" ")
                name = sample.split("{", 1)[0]
                with contextlib.suppress(ValueError):
                    out[name] = out.get(name, 0.0) + float(value)
        return out

    def log_url(self, pod: str) -> str:
        return f"http://127.0.0.1:{self.http_port}/logs/{NAMESPACE}/{pod}"

    def rss_cpu(self) -> tuple[int, float]:
        """Resident bytes and CPU seconds (user + system) of the process, from /proc."""
        with open(f"/proc/{self.proc.pid}/statm") as f:
            rss = int(f.read().split()[1]) * _PAGE
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return rss, (int(fields[11]) + int(fields[12])) / _TICK

    def stop(self) -> float:
        """SIGTERM, as the kubelet stops a pod; seconds it took (SIGKILL after 120 s)."""
        t0 = time.monotonic()
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return time.monotonic() - t0


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": server}}],
        "users": [{"name": "bench", "user": {"token": "t"}}],
        "contexts": [{"name": "bench",
                      "context": {"cluster": "bench", "user": "bench", "namespace": "default"}}],
    }))
    return path


def api_get(url: str) -> dict[str, Any] | None:
    status, body = http_get(url, timeout=120)
    if status == 404:
        return None
    if status != 200:
        raise RuntimeError(f"GET {url}: {status} {body[:200]}")
    got: dict[str, Any] = json.loads(body)
    return got


def holder(cluster: ScaleCluster) -> str:
    lease = api_get(cluster.url + LEASE_PATH)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


@dataclass
class LogCheck:
    """What one pod's served log holds."""

    seqs: list[int]
    odd: list[str]  # lines neither emulated lines nor end markers: gap markers, anything unexpected

    @classmethod
    def parse(cls, body: str) -> LogCheck:
        seqs: list[int] = []
        odd: list[str] = []
        for line in body.splitlines():
            m = LINE.match(line)
            if m is not None:
                seqs.append(int(m.group(1)))
            elif not (line.startswith("--- podmortem: end of log") and line.endswith("---")):
                odd.append(line)
        return cls(seqs, odd)


def read_logs(pool: ThreadPoolExecutor, replica: Replica, names: Iterable[str]) -> dict[str, LogCheck]:
    """Every named pod's log as served by ``replica`` (an empty log where it did not answer 200)."""
    def one(name: str) -> tuple[str, LogCheck]:
        status, body = http_get(replica.log_url(name), timeout=60)
        return name, LogCheck.parse(body if status == 200 else "")
    return dict(pool.map(one, names))


def served_complete(pool: ThreadPoolExecutor, replica: Replica, names: list[str], expected: int, *,
                    timeout: float, gate: Callable[[], bool] | None = None, every: float = 1.0
                    ) -> tuple[float | None, int, float]:
    """Read the pods' logs until each holds ``expected`` lines; re-read only those still short.

    ``gate`` (a cheap probe, e.g. a metric) is waited for before the first read. Returns the
    monotonic time every log was complete (``None``: timed out), the pods still short, and the
    seconds spent reading."""
    deadline = time.monotonic() + timeout
    pending = list(names)
    reading = 0.0
    while gate is not None and not gate() and time.monotonic() < deadline:
        replica.check_alive("waiting for its lines")
        time.sleep(every)
    while pending:
        replica.check_alive("serving logs")
        t0 = time.monotonic()
        got = read_logs(pool, replica, pending)
        reading += time.monotonic() - t0
        pending = [n for n in pending if len(got[n].seqs) < expected]
        if not pending:
            break
        if time.monotonic() > deadline:
            return None, len(pending), reading
        time.sleep(every)
    return time.monotonic(), 0, reading


def reports_on_pods(cluster: ScaleCluster) -> dict[str, dict[str, Any]]:
    """The failure reports on the pods, by name, from the list (kmock's store, where the PATCH lands)."""
    listed = api_get(f"{cluster.url}/api/v1/namespaces/{NAMESPACE}/pods") or {}
    out = {}
    for pod in listed.get("items") or ():
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(FAILURE_REPORT)
        if raw is not None:
            out[pod["metadata"]["name"]] = json.loads(raw)
    return out


def killed_pods(names: list[str], k: int) -> list[str]:
    """``k`` pods spread evenly over ``names`` (as the test's every 20th, starting at the 8th)."""
    if k <= 0:
        return []
    step = len(names) / k
    return [names[int(i * step + step / 2)] for i in range(k)]


def wait_for(probe: Callable[[], bool], *, replica: Replica, what: str, timeout: float,
             every: float = 0.5) -> float | None:
    """Poll until ``probe`` holds: the monotonic time it did, or ``None`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replica.check_alive(what)
        if probe():
            return time.monotonic()
        time.sleep(every)
    return None


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def since(at: float | None, t0: float) -> str:
    return "never" if at is None else f"{at - t0:.1f} s"


def measure(args: argparse.Namespace) -> int:
    pods, lines = args.pods, args.lines
    initial = args.initial_lines
    total = initial + 2 * lines
    t_cluster = time.monotonic()
    cluster = ScaleCluster(pods, initial_lines=initial, line_every=0)
    names = list(cluster.names)
    killed = killed_pods(names, min(args.killed, pods))
    print(f"emulated cluster: {pods:,} annotated Running pods ({cluster.seed_s:.1f} s to seed, "
          f"{time.monotonic() - t_cluster:.1f} s to start); each wrote {initial} lines; then {lines} "
          f"while A leads and {lines} while no one leads; {len(killed)} OOM-killed during the hand-over")
    print(f"lease {args.lease_duration:g} s, renew deadline {args.renew_deadline:g} s, "
          f"retry {args.retry_period:g} s; log reads {args.readers} at once", flush=True)
    pool = ThreadPoolExecutor(args.readers, thread_name_prefix="read")
    replicas: list[Replica] = []
    try:
        with tempfile.TemporaryDirectory(prefix="podmortem-handover-") as tmp_name:
            tmp = Path(tmp_name)
            kubeconfig = write_kubeconfig(tmp / "kubeconfig", cluster.url)
            store = tmp / "shared-store"
            a = Replica("podmortem-a", tmp, kubeconfig, store, args)
            b = Replica("podmortem-b", tmp, kubeconfig, store, args)
            replicas += [a, b]
            try:
                return _run(args, cluster, pool, a, b, names, killed, total)
            finally:
                for r in replicas:
                    if hasattr(r, "proc") and r.alive():
                        print(f"graceful stop of {r.identity}: {r.stop():.1f} s")
                if args.keep_logs is not None:
                    args.keep_logs.mkdir(parents=True, exist_ok=True)
                    for r in replicas:
                        if r.log.exists():
                            (args.keep_logs / r.log.name).write_bytes(r.log.read_bytes())
                    print(f"replica logs kept in {args.keep_logs}")
    finally:
        pool.shutdown(cancel_futures=True)
        cluster.close()


def _run(args: argparse.Namespace, cluster: ScaleCluster, pool: ThreadPoolExecutor, a: Replica, b: Replica,
         names: list[str], killed: list[str], total: int) -> int:
    pods, lines, initial = args.pods, args.lines, args.initial_lines
    timeout = args.timeout

    # 1. A leads and follows every pod.
    a.start()
    marks: dict[str, float | None] = {}
    marks["/readyz: leader"] = wait_for(lambda: "leader (lease" in a.readyz(), replica=a,
                                        what="starting", timeout=timeout)
    if holder(cluster) != a.identity:
        raise SystemExit(f"A is ready as the leader but the Lease names {holder(cluster)!r}")
    seen: dict[str, float] = {}

    def a_progress() -> bool:
        m = a.metrics()
        now = time.monotonic()
        if m.get("podmortem_followed_pods", 0) >= pods:
            seen.setdefault("followed", now)
        if m.get("podmortem_logs_lines_total", 0) >= pods * initial:
            seen.setdefault("lines", now)
        return len(seen) == 2

    wait_for(a_progress, replica=a, what="following", timeout=timeout, every=1.0)
    marks["podmortem_followed_pods = P"] = seen.get("followed")
    marks["podmortem_logs_lines_total = P x initial"] = seen.get("lines")
    at, short, read_s = served_complete(pool, a, names, initial, timeout=timeout)
    marks["every pod's first lines read back"] = at
    print(f"leader A (from its start; {pods:,} pods):")
    for what, t in marks.items():
        print(f"  {since(t, a.started):>9}  {what}")
    print(f"  (reading {pods:,} logs back took {read_s:.1f} s)")
    if at is None:
        raise SystemExit(f"{short} pods' first {initial} lines not served by A after {timeout:g} s\n"
                         f"{a.tail()}")

    # 2. B stands by; the pods write while A leads.
    b.start()
    b_ready = wait_for(lambda: f"standby (leader: {a.identity})" in b.readyz(), replica=b,
                       what="starting as a standby", timeout=timeout)
    if b_ready is None:
        raise SystemExit(f"B never reported a ready standby\n{b.tail()}")
    print(f"standby B ready {b_ready - b.started:.1f} s after its start")
    t_write = time.monotonic()
    assert cluster.ask({"cmd": "lines", "pods": names, "n": lines})["done"] == pods
    at, short, read_s = served_complete(
        pool, a, names, initial + lines, timeout=timeout,
        gate=lambda: a.metrics().get("podmortem_logs_lines_total", 0) >= pods * (initial + lines))
    if at is None:
        raise SystemExit(f"{short} pods' next {lines} lines not served by A after {timeout:g} s\n{a.tail()}")
    print(f"A stored every pod's next {lines} lines {at - t_write:.1f} s after they were written "
          f"(reading back took {read_s:.1f} s)")
    a_rss, a_cpu = a.rss_cpu()
    b_rss0, b_cpu0 = b.rss_cpu()

    # 3. SIGKILL: no release of the Lease, no graceful stop of the followers.
    a.proc.kill()
    killed_at = time.monotonic()
    a.proc.wait(30)
    ccpu0, _ = cluster.stats()
    assert cluster.ask({"cmd": "lines", "pods": names, "n": lines})["done"] == pods
    wrote_s = time.monotonic() - killed_at
    terminated_at = time.monotonic()
    assert cluster.terminate(killed, exit_code=137, reason="OOMKilled") == len(killed)
    print(f"SIGKILL of A at {killed_at - a.started:.1f} s after its start (A then: RSS {mib(a_rss)}, "
          f"CPU {a_cpu:.1f} s); {lines} lines per pod written {wrote_s:.1f} s after the kill, "
          f"{len(killed)} pods OOM-killed at {terminated_at - killed_at:.1f} s", flush=True)

    # 4. B takes over: poll the cheap probes here; read the logs back in a thread of its own.
    after: dict[str, float] = {}
    reports_awaited = len(killed)
    latencies: list[float] = []
    b_max = 0.0
    b_metrics: dict[str, float] = {}
    logs_job: Future[tuple[float | None, int, float]] | None = None
    deadline = killed_at + timeout
    live = pods - len(killed)
    while time.monotonic() < deadline:
        b.check_alive("taking over")
        now = time.monotonic()
        if "lease" not in after and holder(cluster) == b.identity:
            after["lease"] = time.monotonic()
        if "lease" in after:
            if "ready" not in after and "ready: leader" in b.readyz():
                after["ready"] = time.monotonic()
            b_metrics = b.metrics() or b_metrics
            gauge = b_metrics.get("podmortem_followed_pods", 0.0)
            b_max = max(b_max, gauge)
            now = time.monotonic()
            if gauge >= live:
                after.setdefault("followed live", now)
            if gauge >= pods:
                after.setdefault("followed P", now)
            if b_metrics.get("podmortem_logs_lines_total", 0.0) >= pods * lines:
                after.setdefault("lines stored", now)
            if logs_job is None and "lines stored" in after:
                logs_job = pool_one(lambda: served_complete(
                    pool, b, names, total, timeout=max(1.0, deadline - time.monotonic())))
        if reports_awaited:
            got, reports_awaited = cluster.reports()
            latencies += got
            if not reports_awaited:
                after["reports"] = time.monotonic()
        if logs_job is not None and logs_job.done() and not reports_awaited:
            break
        time.sleep(0.25)
    if logs_job is None:  # B never stored what it had to: read what it serves anyway
        logs_job = pool_one(lambda: served_complete(pool, b, names, total, timeout=1.0))
    complete_at, short, complete_read_s = logs_job.result()
    if "reports" in after and latencies:  # when the last PATCH came, not when the poll saw it
        after["reports"] = terminated_at + max(latencies)
    b_rss1, b_cpu1 = b.rss_cpu()

    bound = args.lease_duration + LEASE_SLACK_S
    lease_s = after["lease"] - killed_at if "lease" in after else None
    print(f"stand-by B (from A's SIGKILL; {pods:,} pods, {len(killed)} killed):")
    for key, what in (("lease", f"holds the Lease (bound: lease {args.lease_duration:g} s + "
                                f"{LEASE_SLACK_S:g} s = {bound:g} s: "
                                f"{'MET' if lease_s is not None and lease_s <= bound else 'NOT MET'})"),
                      ("ready", "/readyz: leader"),
                      ("followed live", f"podmortem_followed_pods >= {live:,} (the live pods)"),
                      ("followed P", f"podmortem_followed_pods >= {pods:,} (highest seen: {b_max:.0f})"),
                      ("lines stored", f"podmortem_logs_lines_total >= {pods * lines:,} (P x lines during)"),
                      ("reports", f"last of {len(killed)} reports on the killed pods PATCHed "
                                  "(as the emulated API saw it)")):
        print(f"  {since(after.get(key), killed_at):>9}  {what}")
    print(f"  {since(complete_at, killed_at):>9}  every pod's {total} lines served by B "
          f"(reading them back took {complete_read_s:.1f} s{f'; {short} pods still short' if short else ''})")
    if latencies:
        print(f"  reports: {len(latencies)} PATCHed {min(latencies):.1f}–{max(latencies):.1f} s after "
              f"their pod's termination")

    # 5. The final check: every pod's log, every line once and in order.
    time.sleep(SETTLE_S)
    t0 = time.monotonic()
    logs = read_logs(pool, b, names)
    check_s = time.monotonic() - t0
    lost = repeated = disordered = odd = bad = 0
    examples: list[str] = []
    expected = set(range(total))
    for name, log in logs.items():
        have = set(log.seqs)
        n_lost = len(expected - have)
        n_rep = len(log.seqs) - len(have)
        n_dis = int(log.seqs != sorted(log.seqs))
        n_odd = len(log.odd) + len(have - expected)
        lost, repeated, disordered, odd = lost + n_lost, repeated + n_rep, disordered + n_dis, odd + n_odd
        if n_lost or n_rep or n_dis or n_odd:
            bad += 1
            if len(examples) < 3:
                examples.append(f"{name}: {len(log.seqs)} lines, {n_lost} lost, {n_rep} repeated, "
                                f"{'out of order, ' if n_dis else ''}odd {log.odd[:2]!r}")
    print(f"final check of {pods:,} logs ({pods * total:,} lines expected) read from B with "
          f"{args.readers} readers in {check_s:.1f} s: {lost:,} lost, {repeated:,} repeated, "
          f"{disordered} pods out of order, {odd} other lines; {bad} pods not exactly right")
    for ex in examples:
        print(f"  e.g. {ex}")
    t0 = time.monotonic()
    reports = reports_on_pods(cluster)
    list_s = time.monotonic() - t0
    found = [n for n in killed if n in reports and reports[n].get("verdict")
             and (reports[n].get("pod") or {}).get("name") == n]
    extra = sorted(set(reports) - set(killed))
    print(f"reports on the pods (one list of {pods:,} pods, {list_s:.1f} s): {len(found)} of {len(killed)} "
          f"killed pods reported; {len(extra)} reports on pods not killed{f' {extra[:5]}' if extra else ''}")
    print(f"B: RSS {mib(b_rss0)} as a standby, {mib(b_rss1)} after the hand-over; CPU {b_cpu0:.1f} s as a "
          f"standby, {b_cpu1 - b_cpu0:.1f} s from the kill to the end of the take-over; "
          f"gaps {b_metrics.get('podmortem_logs_gaps_total', 0):.0f}, duplicate lines dropped "
          f"{b_metrics.get('podmortem_logs_duplicate_lines_dropped_total', 0):.0f}")
    ccpu1, _ = cluster.stats()
    print(f"emulated cluster CPU from the kill to the end: {ccpu1 - ccpu0:.1f} s (its own process)")

    def say(met: bool, text: str) -> None:
        print(f"{'MET    ' if met else 'NOT MET'}  {text}")

    lease_ok = lease_s is not None and lease_s <= bound
    say(lease_ok, f"standby holds the Lease within duration + {LEASE_SLACK_S:g} s = {bound:g} s: "
        f"{'never' if lease_s is None else f'{lease_s:.1f} s'} after the SIGKILL")
    lines_ok = complete_at is not None and lost == repeated == disordered == odd == 0
    say(lines_ok, f"every follow resumed from its cursor, nothing lost or repeated: {pods:,} pods x {total} "
        f"lines, {lost:,} lost, {repeated:,} repeated, {disordered} pods out of order, {odd} other lines; "
        f"complete at {since(complete_at, killed_at)} after the SIGKILL")
    reports_ok = len(found) == len(killed) and not extra
    say(reports_ok, f"reports on the pods that died during the hand-over: {len(found)} of {len(killed)}, "
        f"the last {since(after.get('reports'), killed_at)} after the SIGKILL; {len(extra)} on other pods")
    if not (lease_ok and lines_ok and reports_ok):
        print(f"B's log, last lines:\n{b.tail()}")
        return 1
    return 0


def pool_one(fn: Callable[[], tuple[float | None, int, float]]) -> Future[tuple[float | None, int, float]]:
    """``fn`` on a thread of its own (the read pool's threads are what it uses)."""
    job: Future[tuple[float | None, int, float]] = Future()

    def run() -> None:
        try:
            job.set_result(fn())
        except BaseException as exc:  # handed to the caller through the future
            job.set_exception(exc)

    threading.Thread(target=run, name="logs-check", daemon=True).start()
    return job


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=10_000,
                        help="annotated Running pods followed (default 10000)")
    parser.add_argument("--killed", type=int, default=100,
                        help="pods OOM-killed while no replica leads (default 100)")
    parser.add_argument("--lines", type=int, default=15,
                        help="lines each pod writes while A leads, and again while no one leads (default 15)")
    parser.add_argument("--initial-lines", type=int, default=20,
                        help="lines each pod wrote before A started (default 20)")
    parser.add_argument("--lease-duration", type=float, default=15.0,
                        help="PODMORTEM_LEADER_ELECTION_LEASE_DURATION_SECONDS (default 15, the chart's)")
    parser.add_argument("--renew-deadline", type=float, default=10.0,
                        help="PODMORTEM_LEADER_ELECTION_RENEW_DEADLINE_SECONDS (default 10, the chart's)")
    parser.add_argument("--retry-period", type=float, default=2.0,
                        help="PODMORTEM_LEADER_ELECTION_RETRY_PERIOD_SECONDS (default 2, the chart's)")
    parser.add_argument("--readers", type=int, default=16,
                        help="log reads at once when checking (default 16)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds to wait for each stage before reporting what is missing (default 900)")
    parser.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                        help="copy both replicas' logs here at the end")
    args = parser.parse_args()
    if not args.retry_period < args.renew_deadline < args.lease_duration:
        parser.error("leader election needs retry period < renew deadline < lease duration")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
