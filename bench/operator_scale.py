"""Benchmark: the operator's memory and idle CPU with 1,000 followed pods, and where its startup goes.

The real operator (``run_operator``: kopf, the follower, the store, the metrics
and health servers) runs on its own thread in this process; the emulated
cluster (kmock + emulated kubelet, ``podmortem_demo.scale_cluster``) runs in a
process of its own, seeded with P Running pods annotated ``podmortem.io/watch``
whose quiet logs print a line every ``--line-every`` seconds. The operator uses
the production follow settings (``FollowSettings()``: 120 s read timeout).

Measured in this process:

* RSS once the operator's code is imported but before kopf starts, and once every
  pod's first lines are in the store (``podmortem_followed_pods`` = P and each
  pod's follower has stored its ``--initial-lines``); the difference over P is
  the memory per followed pod. ``--tracemalloc`` adds the Python-heap share and
  the biggest allocation sites (tracing slows startup; its RSS is then inflated).
* CPU seconds of this process over an ``--idle`` window with P follows open, as a
  share of one core, and the lines that came in meanwhile.
* Startup timestamps (operator up, kopf ready, followed gauge, lines stored);
  ``--profile`` adds a cProfile of the operator thread over startup.

``--cluster real`` runs the same operator against a real control plane instead
(``bench/real_cluster.py``: kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok
on loopback, built by ``hack/control-plane/build.sh``): P pods on kwok nodes, each log a CRI file
served through the API server's log proxy, the operator logged in as its chart's ServiceAccount.
It also prints the API server's own count of the requests (``apiserver_request_total``; APF's
dispatched and rejected requests by flow schema; the log streams open), the 429s and the
operator's back-offs, and each component's CPU seconds and RSS over start-up.

Usage: python bench/operator_scale.py [--pods 1000] [--idle 30] [--tracemalloc] [--profile]
                                      [--cluster emulated|real] [--nodes 10] [--creators 8]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import logging
import os
import pstats
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from podmortem import startup_gc, tls_buffers
from podmortem.logs.settings import FollowSettings

# Everything the operator runs is imported before the baseline, so the baseline holds the code
# and the per-pod figure holds only what running and following adds.
from podmortem.operator import metrics
from podmortem.operator.settings import AgentAccessSettings, OperatorSettings
from podmortem.operator.watching import run as runtime
from podmortem_demo.gc_pauses import GOAL_S, GcPauses, LoopLag
from podmortem_demo.scale_cluster import ScaleCluster
from podmortem_demo.threads import OperatorThread
from real_cluster import RealCluster  # the bench's own folder is on sys.path when it runs

#: Seconds to wait after startup before measuring: kopf's per-object worker idle timeout (5 s) + margin.
SETTLE_S = 8.0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def followed_gauge() -> float:
    """``podmortem_followed_pods``, read from its own collector (the registry's would run every one)."""
    return float(next(iter(metrics.FOLLOWED_PODS.collect())).samples[0].value)


class ScaleOperator(OperatorThread):
    """The operator thread, optionally under cProfile (which profiles only the thread it runs on)."""

    def __init__(self, *, profile: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.profiler = cProfile.Profile() if profile else None

    def _main(self) -> None:
        if self.profiler is not None:
            self.profiler.enable()
        try:
            super()._main()
        finally:
            if self.profiler is not None:
                self.profiler.disable()

    def stop_profiling(self) -> None:
        """cProfile profiles one thread and must be disabled on it: ask the operator's loop."""
        if self.profiler is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(self.profiler.disable)


def stored_lines(handles: runtime.Running, uids: list[str]) -> list[int]:
    """Lines each pod's follower has written to the store (0 for a pod not followed yet)."""
    following = handles.service.following
    assert following is not None
    out = []
    for uid in uids:
        facts = following.facts(uid)
        out.append(facts.lines if facts is not None else 0)
    return out


def ready(health_url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(health_url + "/readyz", timeout=2) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def measure(args: argparse.Namespace) -> int:
    pods = args.pods
    cluster: ScaleCluster | RealCluster
    if args.cluster == "real":
        cluster = _real_cluster(args)
    else:
        cluster = ScaleCluster(pods, initial_lines=args.initial_lines, line_every=args.line_every)
        print(f"emulated cluster: {pods:,} annotated Running pods seeded into kmock's store in "
              f"{cluster.seed_s:.2f} s; each pod writes {args.initial_lines} lines, then one every "
              f"{args.line_every:g} s")
    print("operator: run_operator with the production FollowSettings() (read timeout 120 s), agent off")
    try:
        with tempfile.TemporaryDirectory(prefix="podmortem-opscale-") as tmp:
            settings = OperatorSettings(
                agent=AgentAccessSettings(enabled=False), store_dir=Path(tmp) / "store",
                listen_host="127.0.0.1", metrics_port=0, health_port=0, log_http_port=0, log_http_auth=False,
                foreign_kinds=(),
            )
            backoffs = WarningLog()
            if isinstance(cluster, RealCluster):
                logging.getLogger().addHandler(backoffs)
            startup_gc.freeze()  # as `podmortem operator` does after its imports
            startup_gc.set_thresholds()
            tls_buffers.shrink()  # as `podmortem operator` does (the emulated cluster is plain HTTP)
            base = rss_bytes()
            if args.tracemalloc:
                tracemalloc.start(1)
                traced0 = tracemalloc.take_snapshot()
            pauses = GcPauses()
            operator = ScaleOperator(url=cluster.url, settings=settings, follow=FollowSettings(),
                                     profile=args.profile,
                                     access=cluster.access if isinstance(cluster, RealCluster) else None)
            server0 = ServerSide.read(cluster) if isinstance(cluster, RealCluster) else None
            t0 = time.monotonic()
            cpu0 = cpu_s()
            pauses.on = True
            handles = operator.start(timeout=120)
            lag = LoopLag()  # the operator's loop, from start-up through the idle window
            assert operator.loop is not None
            lag.start(operator.loop)
            marks: dict[str, float] = {"operator up (servers, store)": time.monotonic() - t0}
            done = _wait_startup(args, operator, handles, cluster, t0, marks)
            operator.stop_profiling()
            startup_cpu = cpu_s() - cpu0
            pauses.on = False
            lag.on = False  # the bench's own full collections below stop every thread
            if isinstance(cluster, RealCluster):
                assert server0 is not None
                server1 = ServerSide.read(cluster)
                for what, at in marks.items():
                    print(f"  {at:7.2f} s  {what}")
                _print_server_side(server0, server1, pods=pods, startup_cpu=startup_cpu,
                                   wall=time.monotonic() - t0)
                _print_operator_backoffs(handles, cluster.uids, backoffs)
            else:
                ccpu, requests = cluster.stats()
                for what, at in marks.items():
                    print(f"  {at:7.2f} s  {what}")
                print(f"startup CPU: operator process {startup_cpu:.1f} s "
                      f"({1000 * startup_cpu / pods:.2f} ms per pod; issue 40's goal <= 1 ms), "
                      f"emulated cluster {ccpu:.1f} s; "
                      f"API requests served: {_requests(requests)} "
                      f"({sum(requests.values()) / pods:.2f} per pod)")
            print(f"garbage collector pauses over startup: {pauses.summary()}")
            if not done:
                got = sum(n >= args.initial_lines for n in stored_lines(handles, cluster.uids))
                print(f"UNFINISHED: after {args.startup_timeout:g} s only {got} of {pods} pods had their "
                      f"first {args.initial_lines} lines stored; "
                      f"podmortem_followed_pods = {followed_gauge():.0f}")
            gc.collect()
            at_start = rss_bytes()
            # kopf keeps a worker (and the object's last event) per object until its queue has been
            # idle for queueing.idle_timeout (5 s): measure once those are gone, as in steady state.
            time.sleep(SETTLE_S)
            gc.collect()
            after = rss_bytes()
            print(f"operator RSS: before kopf {base / 2**20:.1f} MiB; with {pods:,} followed pods "
                  f"{at_start / 2**20:.1f} MiB at once, {after / 2**20:.1f} MiB {SETTLE_S:g} s later "
                  f"-> {(after - base) / pods / 1024:.1f} KiB per followed pod"
                  + (" (tracemalloc on: inflated)" if args.tracemalloc else ""))
            fds = len(os.listdir("/proc/self/fd"))
            print(f"open file descriptors with {pods:,} followed, quiet pods: {fds:,} "
                  f"({fds / pods:.2f} per pod; the store keeps at most 256 segment files open)")
            if args.tracemalloc:
                _print_traced(traced0, tracemalloc.take_snapshot(), pods)
                tracemalloc.stop()
            if args.profile and operator.profiler is not None:
                _print_profile(operator.profiler)
                if args.profile_out is not None:
                    operator.profiler.dump_stats(args.profile_out)
            if done and args.idle > 0:
                lag.on = True
                if isinstance(cluster, RealCluster):
                    _idle_real(args, handles, cluster)
                else:
                    _idle(args, handles, cluster)
            lag.stop()
            paused = max(lag.longest, pauses.longest[2])
            print(f"{'MET' if paused <= GOAL_S else 'NOT MET'}: the longest event-loop pause "
                  f"{1000 * lag.longest:.0f} ms (a {1000 * lag.TICK_S:.0f} ms sleep's lateness, ending "
                  f"{lag.longest_at:.1f} s after the operator was up, the loop's thread running "
                  f"{1000 * lag.longest_cpu:.0f} ms of it; over start-up and the idle window), "
                  f"the longest full collection {1000 * pauses.longest[2]:.0f} ms over start-up; goal <= "
                  f"{1000 * GOAL_S:.0f} ms")
            stop0 = time.monotonic()
            operator.stop(timeout=120)
            print(f"graceful stop with {pods:,} follows: {time.monotonic() - stop0:.1f} s")
            if operator.error is not None:
                print(f"operator error: {operator.error!r}")
                return 1
            return 3 if done and paused > GOAL_S else 0 if done else 2
    finally:
        cluster.close()


def _wait_startup(args: argparse.Namespace, operator: ScaleOperator, handles: runtime.Running,
                  cluster: ScaleCluster | RealCluster, t0: float, marks: dict[str, float]) -> bool:
    """Wait until every pod's first lines are stored; note when each stage was reached."""
    pods = args.pods
    deadline = t0 + args.startup_timeout
    next_progress = t0 + 15.0
    steps = {"kopf ready (/readyz)": False}
    thresholds = [(n, f"podmortem_followed_pods >= {n}") for n in (1, pods // 2, pods)]
    stored_marks = [(1, "first pod's lines stored"), (pods // 2, "half the pods' lines stored"),
                    (pods, "every pod's first lines stored")]
    # Growth as it goes: time, memory and descriptors when 1,000, 5,000, 10,000 ... pods are stored.
    milestones = [n for n in (1_000, 5_000, 10_000, 20_000, 50_000) if n <= pods]
    while time.monotonic() < deadline:
        if operator.error is not None:
            raise SystemExit(f"the operator failed: {operator.error!r}")
        now = time.monotonic() - t0
        if not steps["kopf ready (/readyz)"] and ready(handles.health_url):
            steps["kopf ready (/readyz)"] = True
            marks["kopf ready (/readyz)"] = now
        gauge = followed_gauge()
        for n, what in thresholds:
            if what not in marks and gauge >= n:
                marks[what] = now
        stored = sum(n >= args.initial_lines for n in stored_lines(handles, cluster.uids))
        for n, what in stored_marks:
            if what not in marks and stored >= n:
                marks[what] = now
        while milestones and stored >= milestones[0]:
            n = milestones.pop(0)
            fds = len(os.listdir("/proc/self/fd"))
            print(f"  {n:>7,} pods stored at {now:6.1f} s ({n / now:5.0f} pods/s so far): "
                  f"RSS {rss_bytes() / 2**20:6.1f} MiB, {fds:,} descriptors ({fds / n:.2f} per pod)",
                  flush=True)
        if stored >= pods and gauge >= pods:
            return True
        if time.monotonic() >= next_progress:
            print(f"  ... {now:5.0f} s: podmortem_followed_pods {gauge:.0f}, pods with lines stored {stored}",
                  flush=True)
            next_progress += 15.0
        time.sleep(0.5)  # the poll holds the GIL the operator's thread needs: not too often
    return False


def _idle(args: argparse.Namespace, handles: runtime.Running, cluster: ScaleCluster) -> None:
    lines0 = sum(stored_lines(handles, cluster.uids))
    reconnects0 = _reconnects(handles, cluster.uids)
    (ccpu0, req0), cpu0, wall0 = cluster.stats(), cpu_s(), time.monotonic()
    time.sleep(args.idle)
    (ccpu1, req1), cpu1, wall1 = cluster.stats(), cpu_s(), time.monotonic()
    lines = sum(stored_lines(handles, cluster.uids)) - lines0
    reconnects = _reconnects(handles, cluster.uids) - reconnects0
    wall = wall1 - wall0
    cpu = cpu1 - cpu0
    print(f"idle {wall:.1f} s with {args.pods:,} follows: operator CPU {cpu:.2f} s = "
          f"{100 * cpu / wall:.1f} % of one core ({1e6 * cpu / wall / args.pods:.0f} µs/s per pod); "
          f"{lines} lines stored ({lines / wall:.0f}/s), {reconnects} reconnects; "
          f"emulated cluster CPU {100 * (ccpu1 - ccpu0) / wall:.1f} % of one core (its own process)")
    during = {k: n - req0.get(k, 0) for k, n in req1.items()}
    print(f"  API requests during the idle window: {_requests(during)}")


# -- --cluster real ---------------------------------------------------------------------------------


def _real_cluster(args: argparse.Namespace) -> RealCluster:
    import real_cluster

    limit = real_cluster.inotify_instances()
    cluster = RealCluster(args.pods, initial_lines=args.initial_lines, line_every=args.line_every,
                          nodes=args.nodes, creators=args.creators)
    marks = ", ".join(f"{what} {at:.1f} s" for what, at in cluster.marks.items())
    print(f"real control plane (kube-apiserver, etcd, controller-manager, scheduler, kwok; APF at its "
          f"defaults): {args.pods:,} annotated pods on {args.nodes} kwok nodes (spec.nodeName set: no "
          f"scheduler), each with its own Logs object and CRI file of {args.initial_lines} lines; "
          f"{marks}; then a line every {args.line_every:g} s per pod")
    print(f"operator: logged in as ServiceAccount {real_cluster.RELEASE_NAMESPACE}/"
          f"{real_cluster.SERVICE_ACCOUNT} (the chart's ClusterRole; APF flow schema service-accounts)")
    if limit is not None and limit < args.pods + 64:
        print(f"NOTE: fs.inotify.max_user_instances is {limit}: kwok, as a kubelet, opens one inotify "
              f"instance per followed log that reaches its end, so follows past about {limit} end at "
              f"once (raise it: sysctl fs.inotify.max_user_instances={2 * args.pods})")
    return cluster


class WarningLog(logging.Handler):
    """The operator's log records at WARNING and above: counted by logger, the first few kept."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: dict[str, int] = {}
        self.first: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.name] = self.counts.get(record.name, 0) + 1
        if len(self.first) < 5:
            self.first.append(f"{record.levelname} {record.name}: {record.getMessage()[:200]}")


class ServerSide:
    """What the API server counts (its /metrics) and each component's CPU and RSS, at one moment."""

    def __init__(self, metrics_text: str, usage: dict[str, tuple[float, int, int]]) -> None:
        import real_cluster

        self.requests = real_cluster.request_counts(metrics_text)
        self.apf = real_cluster.apf_counts(metrics_text)
        self.usage = usage

    @classmethod
    def read(cls, cluster: RealCluster) -> ServerSide:
        return cls(cluster.metrics_text(), cluster.usage())


#: The flow schema and priority level that APF gives an in-cluster ServiceAccount's requests (the operator's).
OPERATOR_FLOW = "service-accounts/workload-low"


def _print_server_side(before: ServerSide, after: ServerSide, *, pods: int, startup_cpu: float,
                       wall: float) -> None:
    import real_cluster

    requests = real_cluster.diff(after.requests, before.requests)
    dispatched = real_cluster.diff(after.apf["dispatched"], before.apf["dispatched"])
    rejected = real_cluster.diff(after.apf["rejected"], before.apf["rejected"])
    streams = sum(n for k, n in after.apf["longrunning"].items() if k.endswith(" pods/log"))
    ended = sum(n for k, n in requests.items() if k.startswith(("GET pods/log", "CONNECT pods/log")))
    operator = dispatched.get(OPERATOR_FLOW, 0.0)
    print(f"startup CPU: operator process {startup_cpu:.1f} s; API requests by the API server's count "
          f"(apiserver_request_total, completed ones, every client): {_requests(requests)}")
    print(f"  the operator's requests: {operator:.0f} through APF ({OPERATOR_FLOW}) + "
          f"{streams:.0f} log streams open + {ended} log requests ended = "
          f"{(operator + streams + ended) / pods:.2f} per pod")
    print("  APF dispatched by flow schema: "
          + ", ".join(f"{n:.0f} {k}" for k, n in sorted(dispatched.items())))
    print(f"  APF rejected (429): {', '.join(f'{n:.0f} {k}' for k, n in rejected.items()) or 'none'}; "
          f"responses with code 429: {sum(n for k, n in requests.items() if k.endswith(' 429')) or 'none'}")
    print(f"control plane over start-up ({wall:.1f} s):")
    for name, (cpu1, rss1, fds1) in after.usage.items():
        cpu0 = before.usage.get(name, (cpu1, 0, 0))[0]
        print(f"  {name:24} CPU {cpu1 - cpu0:6.1f} s ({100 * (cpu1 - cpu0) / wall:5.1f} % of a core); "
              f"RSS {rss1 / 2**20:7.1f} MiB; {fds1:,} descriptors")


def _print_operator_backoffs(handles: runtime.Running, uids: list[str], log: WarningLog) -> None:
    from podmortem.logs.metrics import RECONNECT_REASONS

    counts = {}
    for sample in _registry_samples("podmortem_logs_reconnects_total"):
        if sample.value:
            counts[sample.labels.get("reason", "?")] = sample.value
    print(f"operator: {_reconnects(handles, uids)} reconnects of its followers; "
          f"podmortem_logs_reconnects_total by reason: "
          + (", ".join(f"{counts[r]:.0f} {r}" for r in RECONNECT_REASONS if r in counts) or "none")
          + "; log records at WARNING and above: "
          + (", ".join(f"{n} {k}" for k, n in log.counts.items()) or "none"))
    for line in log.first:
        print(f"  {line}")


def _registry_samples(name: str) -> list[Any]:
    import prometheus_client

    return [s for m in prometheus_client.REGISTRY.collect() for s in m.samples if s.name == name]


def _idle_real(args: argparse.Namespace, handles: runtime.Running, cluster: RealCluster) -> None:
    lines0 = sum(stored_lines(handles, cluster.uids))
    reconnects0 = _reconnects(handles, cluster.uids)
    server0, cpu0, wall0 = ServerSide.read(cluster), cpu_s(), time.monotonic()
    time.sleep(args.idle)
    server1, cpu1, wall1 = ServerSide.read(cluster), cpu_s(), time.monotonic()
    lines = sum(stored_lines(handles, cluster.uids)) - lines0
    reconnects = _reconnects(handles, cluster.uids) - reconnects0
    wall = wall1 - wall0
    cpu = cpu1 - cpu0
    print(f"idle {wall:.1f} s with {args.pods:,} follows: operator CPU {cpu:.2f} s = "
          f"{100 * cpu / wall:.1f} % of one core ({1e6 * cpu / wall / args.pods:.0f} µs/s per pod); "
          f"{lines} lines stored ({lines / wall:.0f}/s), {reconnects} reconnects")
    print("  control plane: " + "; ".join(
        f"{name} {100 * (c1 - server0.usage.get(name, (c1, 0, 0))[0]) / wall:.1f} % of a core"
        for name, (c1, _, _) in server1.usage.items()))
    import real_cluster

    print(f"  API requests during the idle window (API server's count): "
          f"{_requests(real_cluster.diff(server1.requests, server0.requests))}")


def _requests(counts: dict[str, int]) -> str:
    shown = {k: n for k, n in counts.items() if n}
    return ", ".join(f"{n} {k}" for k, n in shown.items()) or "none"


def _reconnects(handles: runtime.Running, uids: list[str]) -> int:
    following = handles.service.following
    assert following is not None
    return sum(f.reconnects for u in uids if (f := following.facts(u)) is not None)


def _print_traced(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, pods: int) -> None:
    size0 = sum(s.size for s in before.statistics("filename"))
    size1 = sum(s.size for s in after.statistics("filename"))
    print(f"Python heap (tracemalloc) growth: {(size1 - size0) / 2**20:.1f} MiB = "
          f"{(size1 - size0) / pods / 1024:.1f} KiB per followed pod; biggest growth by file:")
    for stat in after.compare_to(before, "filename")[:12]:
        name = stat.traceback[0].filename
        short = name.split("site-packages/")[-1].split("/operator/")[-1]
        print(f"  {stat.size_diff / 2**20:7.2f} MiB  {stat.count_diff:+8d} blocks  {short}")
    print("biggest growth by line:")
    for stat in after.compare_to(before, "lineno")[:12]:
        frame = stat.traceback[0]
        short = frame.filename.split("site-packages/")[-1].split("/operator/")[-1]
        print(f"  {stat.size_diff / 2**20:7.2f} MiB  {stat.count_diff:+8d} blocks  {short}:{frame.lineno}")


def _print_profile(profiler: cProfile.Profile) -> None:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(30)
    print("cProfile of the operator thread over startup:")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip()))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=1000,
                        help="annotated Running pods to follow (default 1000)")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of the idle CPU window (0: skip)")
    parser.add_argument("--line-every", type=float, default=10.0, help="seconds between two lines of one pod")
    parser.add_argument("--initial-lines", type=int, default=20, help="lines each pod wrote before the start")
    parser.add_argument("--startup-timeout", type=float, default=300.0,
                        help="seconds to wait for every pod's first lines before reporting what is missing")
    parser.add_argument("--tracemalloc", action="store_true", help="also trace the Python heap (slower)")
    parser.add_argument("--profile", action="store_true", help="cProfile the operator thread over startup")
    parser.add_argument("--profile-out", type=Path, default=None,
                        help="also save the profile here (for pstats / snakeviz)")
    parser.add_argument("--cluster", choices=("emulated", "real"), default="emulated",
                        help="emulated (podmortem_demo.scale_cluster, the default) or real (kube-apiserver, "
                             "etcd and kwok from hack/control-plane/build.sh)")
    parser.add_argument("--nodes", type=int, default=10, help="--cluster real: kwok nodes (default 10)")
    parser.add_argument("--creators", type=int, default=8,
                        help="--cluster real: threads creating the pods and Logs objects (default 8)")
    return measure(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
