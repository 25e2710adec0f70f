"""Soak benchmark: the real operator through waves of pods that log, die, restart, are reported and deleted.

The question is whether the operator holds steady over a long life: that memory,
open files and asyncio tasks do not grow with the pods it has seen, and that a
report takes as long at the end as at the start. The real operator
(``run_operator``: kopf, the follower, the store, the reporter) runs on its own
thread in this process, with the production follow settings; the emulated
cluster (kmock + emulated kubelet, ``podmortem_demo.scale_cluster``) runs in a
process of its own, so its CPU and memory are not the operator's.

Each wave:

1. creates ``--wave-pods`` pods annotated ``podmortem.io/watch``, grouped in jobs of
   1 to 8 pods (bare pods sharing a ``podmortem.io/soak-job`` label: the operator
   follows and reports each pod on its own; no owner objects are emulated), and
   waits until every one is followed and its first lines are stored; every live
   pod keeps writing a line every ``--line-every`` seconds;
2. for ``--rounds`` rounds, ends every pod's container: OOMKilled (137), failed
   (exit 1) or finished (exit 0); all but the last round restart it (new
   containerID, ``restartCount`` + 1, ``lastState.terminated``), the last leaves
   the pod Failed or Succeeded. Every OOMKilled or failed end deserves a report.
   Ends go out at ``--rate`` a second (default: the goal's pace, ``--terminations``
   over ``--minutes``), held back while ``--max-awaited`` reports are outstanding,
   and after each round the bench waits for its reports before the next (a pod's
   next end never hides the previous one from the operator). So the bench is paced
   by what the operator keeps up with; the verdict says when that fell short;
3. deletes the wave's pods, waits until the operator has let them go, and (in the
   emulated cluster) forgets kmock's request log and the stored Events.

Report latency is measured by the emulated cluster, end to end: from the moment a
container's end is written into the stored pod (just before its watch event) to
the operator's PATCH that writes the ``podmortem.io/failure-report`` annotation
naming that container instance. A report not seen within ``--report-timeout``
counts as missing.

Printed per wave, after the wave's pods are gone and kopf's per-object workers
have idled out (``--settle``): pods created and terminations so far, operator
process RSS, open fds, asyncio tasks on the operator's loop, bytes in the log
store, and that wave's report latency p50/p99 and reports per second. At the end,
one verdict line per goal from the issue, MET or NOT MET with the numbers:

* RSS within 10 % of the first wave's from then on;
* open fds and asyncio tasks back to their baseline (the operator idle, before
  the first wave) after each wave;
* report latency p99 under 2 s at the end as at the start;
* the run itself: at least ``--minutes``, ``--pods`` pods and ``--terminations``
  terminations;
* and, stricter than the issue, the pace: all the terminations within ``--minutes``
  (+10 %), with the reports per second achieved;
* no event-loop pause over 100 ms (issue 40): a 10 ms sleep's longest lateness on
  the operator's loop over the run, and the longest full collection.

Usage: python bench/operator_soak.py [--minutes 10] [--pods 10000] [--terminations 100000]
       python bench/operator_soak.py --minutes 1 --pods 1000 --terminations 5000   (a quick try)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import math
import os
import random
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

from podmortem import startup_gc
from podmortem.logs.settings import FollowSettings
from podmortem.logs.storage.settings import StoreSettings
from podmortem.operator import metrics
from podmortem.operator.settings import AgentAccessSettings, OperatorSettings
from podmortem.operator.watching import run as runtime
from podmortem_demo.gc_pauses import GOAL_S, GcPauses, LoopLag
from podmortem_demo.scale_cluster import ScaleCluster
from podmortem_demo.threads import OperatorThread

#: How a container ends in a restart round: (exit code, reason, weight). Exit 0 gets no report.
ENDS = ((137, "OOMKilled", 45), (1, "Error", 45), (0, "Completed", 10))
#: Pods per command line to the emulated cluster (one reply each: keeps the pipe's round trips short).
CHUNK = 250
#: The goals from the issue.
RSS_TOLERANCE = 0.10
#: The store's cap on open segment files (`podmortem.logs.storage.settings`): a cache, not a leak.
MAX_OPEN_SEGMENTS = StoreSettings().max_open_segments
#: kubernetes_asyncio's connection limit (``Configuration.connection_pool_maxsize``): its idle
#: keep-alive sockets are a cache bounded by it, not a leak.
API_POOL = 100
P99_GOAL_S = 2.0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fd_kinds() -> dict[str, int]:
    """Open fds by kind: socket, pipe, store file (a segment of the log store), file, ..."""
    kinds: dict[str, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        kind = target.split(":")[0] if ":" in target and not target.startswith("/") else (
            "store file" if "podmortem-soak-" in target else "file")
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def store_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # the store removed it meanwhile
                total += os.stat(os.path.join(dirpath, name)).st_size
    return total


def followed_gauge() -> float:
    return float(next(iter(metrics.FOLLOWED_PODS.collect())).samples[0].value)


def loop_tasks(operator: OperatorThread) -> int:
    """asyncio tasks on the operator's loop (counted on that loop, not counting the one counting)."""

    async def count() -> int:
        return len(asyncio.all_tasks()) - 1

    return operator.call(count())


def own_latency_counts() -> tuple[float, float]:
    """The operator's own report-latency histogram (from seeing the end to the report written): how
    many reports so far, and how many took over 0.5 s (its bucket bounds; the watch delivery apart)."""
    total = within = 0.0
    for metric in metrics.REPORT_LATENCY.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                total = sample.value
            elif sample.name.endswith("_bucket") and sample.labels.get("le") == "0.5":
                within = sample.value
    return total, total - within


def idle_api_sockets(operator: OperatorThread, handles: runtime.Running) -> int:
    """Idle keep-alive connections of the operator's API session (`kube.session.ApiSession`'s one
    aiohttp connector; each closes after its keep-alive timeout, 15-30 s idle)."""

    async def count() -> int:
        # The session and aiohttp's idle connections by key are private attributes: fine for a bench.
        session = handles.service.kube.api._session
        if session is None or session.connector is None:
            return 0
        return sum(len(idle) for idle in session.connector._conns.values())

    return operator.call(count())


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class Wave:
    number: int
    pods_total: int
    terminations_total: int
    reports_total: int
    rss: int
    fds: int
    #: Of ``fds``, the log store's open segment files (a cache bounded by ``max_open_segments``).
    store_fds: int
    #: Of ``fds``, the API client's idle keep-alive sockets (a cache bounded by `API_POOL`).
    api_fds: int
    tasks: int
    store: int
    latencies: list[float]
    missing: int
    wall_s: float
    report_s: float
    #: CPU seconds over the wave's rounds: the operator's process, and the emulated cluster's.
    op_cpu_s: float = 0.0
    api_cpu_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return quantile(self.latencies, 0.50)

    @property
    def p99(self) -> float:
        return quantile(self.latencies, 0.99)


class Soak:
    def __init__(self, args: argparse.Namespace, cluster: ScaleCluster, operator: OperatorThread,
                 handles: runtime.Running, store_dir: Path) -> None:
        self.args = args
        self.cluster = cluster
        self.operator = operator
        self.handles = handles
        self.store_dir = store_dir
        self.rng = random.Random(args.seed)
        self.pods_created = 0
        self.terminations = 0
        self.reports = 0
        self.base_fds = open_fds()
        #: The garbage collector's pauses over each wave's rounds (a full pass stops the loop).
        self.pauses = GcPauses()
        #: The longest full collection over every wave's rounds, and the operator loop's longest stall.
        self.longest_full_s = 0.0
        self.lag = LoopLag()
        assert operator.loop is not None
        self.lag.start(operator.loop)

    def _check(self) -> None:
        if self.operator.error is not None:
            raise SystemExit(f"the operator failed: {self.operator.error!r}")

    def _stored_lines(self, uids: list[str]) -> int:
        following = self.handles.service.following
        assert following is not None
        least = self.args.initial_lines
        return sum(1 for u in uids if (f := following.facts(u)) is not None and f.lines >= least)

    def _jobs(self, wave: int) -> dict[str, int]:
        jobs: dict[str, int] = {}
        left = self.args.wave_pods
        while left > 0:
            n = min(left, self.rng.randint(1, 8))
            jobs[f"w{wave}-j{len(jobs)}"] = n
            left -= n
        return jobs

    def wave(self, number: int) -> Wave:
        args = self.args
        t0 = time.monotonic()
        notes: list[str] = []
        names: list[str] = []
        uids: list[str] = []
        jobs = list(self._jobs(number).items())
        for i in range(0, len(jobs), 40):
            made, made_uids = self.cluster.create(dict(jobs[i:i + 40]), initial_lines=args.initial_lines)
            names += made
            uids += made_uids
        self.pods_created += len(names)

        # 1. every pod followed, its first lines stored
        deadline = time.monotonic() + args.follow_timeout
        while (stored := self._stored_lines(uids)) < len(uids):
            self._check()
            if time.monotonic() > deadline:
                notes.append(f"only {stored} of {len(uids)} pods had their first lines stored after "
                             f"{args.follow_timeout:g} s")
                break
            time.sleep(0.25)

        # 2. rounds of ends; wait for each round's reports
        latencies: list[float] = []
        missing = 0
        report_s = 0.0
        live = list(names)
        cpu0, (api_cpu0, _) = os.times(), self.cluster.stats()
        self.pauses.reset()
        self.pauses.on = True
        own0 = own_latency_counts()
        for r in range(args.rounds):
            last = r == args.rounds - 1
            r0 = time.monotonic()
            got, awaited = self._round(live, last=last)
            report_s += time.monotonic() - r0
            latencies += got
            self.reports += len(got)
            if awaited:
                missing += awaited
                notes.append(f"round {r + 1}: {awaited} reports not written within {args.report_timeout:g} s")
            self._check()

        self.pauses.on = False
        self.longest_full_s = max(self.longest_full_s, self.pauses.longest[2])
        cpu1, (api_cpu1, _) = os.times(), self.cluster.stats()
        own1 = own_latency_counts()
        own_n, own_over = own1[0] - own0[0], own1[1] - own0[1]
        if own_n:
            notes.append(f"operator's own latency over 0.5 s: {own_over:.0f} of {own_n:.0f}")
        if self.pauses.counts[2]:
            notes.append(f"GC: {self.pauses.counts[2]} full passes over the rounds, "
                         f"longest {self.pauses.longest[2]:.3f} s")
        op_cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
        api_cpu = api_cpu1 - api_cpu0

        # 3. delete, wait until the operator has let the pods go, purge the emulated cluster's logs
        for i in range(0, len(names), CHUNK):
            self.cluster.delete(names[i:i + CHUNK])
        late, _ = self.cluster.reports()  # reports that came after the timeout, before the delete
        self.reports += len(late)
        deadline = time.monotonic() + args.follow_timeout
        while followed_gauge() > 0 or self._targets() > 0:
            self._check()
            if time.monotonic() > deadline:
                notes.append(f"after the delete the operator still followed {followed_gauge():.0f} pods "
                             f"and kept {self._targets()} pod targets for {args.follow_timeout:g} s")
                break
            time.sleep(0.25)
        self.cluster.purge()
        wall_s = time.monotonic() - t0

        # measure once kopf's per-object workers have idled out
        time.sleep(args.settle)
        self.lag.on = False  # the bench's own full collection stops every thread: not the operator's
        gc.collect()
        time.sleep(0.05)  # the probe's tick that spanned it ends before counting resumes
        self.lag.on = True
        kinds = fd_kinds()
        fds = sum(kinds.values())
        api_fds = idle_api_sockets(self.operator, self.handles)
        if fds - kinds.get("store file", 0) - api_fds > self.base_fds:
            by_kind = sorted(kinds.items(), key=lambda kv: -kv[1])
            notes.append("fds: " + ", ".join(f"{n} {k}" for k, n in by_kind))
        return Wave(
            number=number, pods_total=self.pods_created, terminations_total=self.terminations,
            reports_total=self.reports, rss=rss_bytes(), fds=fds,
            store_fds=kinds.get("store file", 0), api_fds=api_fds, tasks=loop_tasks(self.operator),
            store=store_bytes(self.store_dir), latencies=latencies, missing=missing, wall_s=wall_s,
            report_s=report_s, op_cpu_s=op_cpu, api_cpu_s=api_cpu, notes=notes,
        )

    def _round(self, pods: list[str], *, last: bool) -> tuple[list[float], int]:
        """End every pod's container once, at ``--rate`` ends a second while fewer than ``--max-awaited``
        reports are awaited; then wait for the round's reports. Latencies, and reports still awaited."""
        args = self.args
        weights = [w for _c, _r, w in ENDS]
        step_s = 0.05
        per_step = max(1, round(args.rate * step_s))
        got: list[float] = []
        next_at = time.monotonic()
        for i in range(0, len(pods), per_step):
            while True:
                latencies, awaited = self.cluster.reports()
                got += latencies
                if awaited < args.max_awaited:
                    break
                self._check()
                time.sleep(step_s)
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            next_at = max(next_at + step_s, time.monotonic() - step_s)
            groups: dict[tuple[int, str], list[str]] = {}
            for name in pods[i:i + per_step]:
                code, reason, _w = self.rng.choices(ENDS, weights=weights)[0]
                groups.setdefault((code, reason), []).append(name)
            for (code, reason), group in groups.items():
                if last:
                    done = self.cluster.terminate(group, exit_code=code, reason=reason)
                else:
                    done = self.cluster.restart(group, exit_code=code, reason=reason,
                                                new_lines=args.restart_lines)
                self.terminations += done
        rest, awaited = self._wait_reports(args.report_timeout)
        return got + rest, awaited

    def _targets(self) -> int:
        return len(self.handles.service.targets.pods)

    def _wait_reports(self, timeout: float) -> tuple[list[float], int]:
        got: list[float] = []
        deadline = time.monotonic() + timeout
        while True:
            latencies, awaited = self.cluster.reports()
            got += latencies
            if awaited == 0 or time.monotonic() > deadline:
                return got, awaited
            self._check()
            time.sleep(0.1)  # the poll holds the GIL the operator's thread needs: not too often


def run(args: argparse.Namespace) -> int:
    cluster = ScaleCluster(0, initial_lines=args.initial_lines, line_every=args.line_every)
    print(f"emulated cluster: waves of {args.wave_pods:,} pods in jobs of 1-8, each writing "
          f"{args.initial_lines} lines, then one every {args.line_every:g} s; {args.rounds} ends per pod "
          f"per wave (OOMKilled/failed/finished {'/'.join(str(w) for _c, _r, w in ENDS)} %), "
          f"{args.rounds - 1} of them restarts")
    print(f"goal: at least {args.minutes:g} min, {args.pods:,} pods, {args.terminations:,} terminations")
    try:
        with tempfile.TemporaryDirectory(prefix="podmortem-soak-") as tmp:
            store_dir = Path(tmp) / "store"
            settings = OperatorSettings(
                agent=AgentAccessSettings(enabled=False), store_dir=store_dir,
                listen_host="127.0.0.1", metrics_port=0, health_port=0, log_http_port=0, log_http_auth=False,
                foreign_kinds=(),
            )
            startup_gc.freeze()  # as `podmortem operator` does after its imports
            startup_gc.set_thresholds()
            operator = OperatorThread(url=cluster.url, settings=settings, follow=FollowSettings())
            handles = operator.start(timeout=120)
            time.sleep(args.settle)
            gc.collect()
            base_rss, base_tasks = rss_bytes(), loop_tasks(operator)
            base_api = idle_api_sockets(operator, handles)
            base_fds = open_fds() - base_api  # the API client's idle sockets are counted apart, as below
            print(f"baseline (operator idle, no pods): RSS {base_rss / 2**20:.1f} MiB, {base_fds} fds ("
                  + ", ".join(f"{n} {k}" for k, n in fd_kinds().items())
                  + f"; {base_api} idle API keep-alive sockets apart), {base_tasks} asyncio tasks")
            print(f"ends paced at {args.rate:.0f}/s while fewer than {args.max_awaited} reports are awaited; "
                  f"rep/s below: a wave's reports over its rounds' time (at most the pace)")
            print(f"{'wave':>4} {'pods':>7} {'terms':>8} {'RSS MiB':>8} {'fds':>5} {'(store)':>7} "
                  f"{'(api)':>5} {'tasks':>5} "
                  f"{'store MiB':>9} {'p50 s':>6} {'p99 s':>6} {'rep/s':>6} {'op ms':>5} {'api ms':>6} "
                  f"{'wave s':>6}  notes")
            print("  (op ms, api ms: CPU of the operator's process and of the emulated cluster per report)")
            soak = Soak(args, cluster, operator, handles, store_dir)
            traced: tracemalloc.Snapshot | None = None
            if args.tracemalloc:
                tracemalloc.start(1)
                traced = tracemalloc.take_snapshot()
            waves: list[Wave] = []
            t0 = time.monotonic()
            while (time.monotonic() - t0 < args.minutes * 60 or soak.pods_created < args.pods
                   or soak.terminations < args.terminations):
                w = soak.wave(len(waves) + 1)
                waves.append(w)
                if args.tracemalloc:
                    traced = _traced_growth(traced)
                rate = len(w.latencies) / w.report_s if w.report_s else 0.0
                print(f"{w.number:4d} {w.pods_total:7,d} {w.terminations_total:8,d} {w.rss / 2**20:8.1f} "
                      f"{w.fds:5d} {w.store_fds:7d} {w.api_fds:5d} {w.tasks:5d} {w.store / 2**20:9.1f} "
                      f"{w.p50:6.3f} {w.p99:6.3f} {rate:6.0f} "
                      f"{1000 * w.op_cpu_s / max(1, len(w.latencies)):5.1f} "
                      f"{1000 * w.api_cpu_s / max(1, len(w.latencies)):6.1f} "
                      f"{w.wall_s:6.1f}  {'; '.join(w.notes)}", flush=True)
            elapsed = time.monotonic() - t0
            soak.lag.stop()
            operator.stop(timeout=120)
            ccpu, requests = cluster.stats()
            _verdicts(args, waves, elapsed, soak, base_fds, base_tasks)
            print(f"emulated cluster CPU {ccpu:.0f} s; API requests served: "
                  + ", ".join(f"{n} {k}" for k, n in requests.items()))
            if operator.error is not None:
                print(f"operator error: {operator.error!r}")
                return 1
            return 0
    finally:
        cluster.close()


def _traced_growth(before: tracemalloc.Snapshot | None) -> tracemalloc.Snapshot:
    """Print where the Python heap grew since ``before`` (the previous wave), by line; the new snapshot."""
    after = tracemalloc.take_snapshot()
    if before is not None:
        stats = after.compare_to(before, "lineno")
        grown = sum(st.size_diff for st in stats)
        print(f"     Python heap growth over the wave: {grown / 2**20:+.2f} MiB; biggest by line:")
        for st in stats[:8]:
            frame = st.traceback[0]
            short = frame.filename.split("site-packages/")[-1].split("/operator/")[-1]
            print(f"       {st.size_diff / 2**10:+9.1f} KiB {st.count_diff:+7d} blocks"
                  f"  {short}:{frame.lineno}")
    return after


def _verdicts(args: argparse.Namespace, waves: list[Wave], elapsed: float, soak: Soak,
              base_fds: int, base_tasks: int) -> None:
    def say(met: bool, text: str) -> None:
        print(f"{'MET    ' if met else 'NOT MET'}  {text}")

    first, last = waves[0], waves[-1]
    worst = max(waves[1:], key=lambda w: abs(w.rss - first.rss), default=first)
    drift = (worst.rss - first.rss) / first.rss
    say(abs(drift) <= RSS_TOLERANCE,
        f"RSS within {100 * RSS_TOLERANCE:.0f} % of the first wave's ({first.rss / 2**20:.1f} MiB): "
        f"furthest wave {worst.number} at {worst.rss / 2**20:.1f} MiB ({100 * drift:+.1f} %), "
        f"last {last.rss / 2**20:.1f} MiB")
    # Two bounded caches are not leaks: up to MAX_OPEN_SEGMENTS store files and API_POOL idle API
    # keep-alive sockets; every other fd counts against the baseline.
    def rest(w: Wave) -> int:
        return w.fds - min(w.store_fds, MAX_OPEN_SEGMENTS) - min(w.api_fds, API_POOL)

    bad_fds = [w for w in waves if rest(w) > base_fds]
    say(not bad_fds, f"open fds back to the baseline {base_fds} after each wave, but for the log store's "
        f"cache of open segment files (at most {MAX_OPEN_SEGMENTS}) and the API client's idle keep-alive "
        f"sockets (at most {API_POOL}): "
        + ("after waves " + ", ".join(f"{w.number} ({w.fds}, {w.store_fds} store, {w.api_fds} api)"
                                     for w in bad_fds) + " not"
           if bad_fds else f"max {max(rest(w) for w in waves)} + up to "
           f"{max(w.store_fds for w in waves)} store segment files and {max(w.api_fds for w in waves)} "
           f"idle API sockets"))
    bad_tasks = [w for w in waves if w.tasks > base_tasks]
    say(not bad_tasks, f"asyncio tasks back to the baseline {base_tasks} after each wave: "
        + (f"after waves {', '.join(f'{w.number} ({w.tasks})' for w in bad_tasks)} not" if bad_tasks
           else f"max {max(w.tasks for w in waves)}"))
    say(first.p99 < P99_GOAL_S and last.p99 < P99_GOAL_S,
        f"report latency p99 under {P99_GOAL_S:g} s at the start and at the end: first wave "
        f"{first.p99:.3f} s (p50 {first.p50:.3f}), last wave {last.p99:.3f} s (p50 {last.p50:.3f}); "
        f"worst wave {max(w.p99 for w in waves):.3f} s")
    missing = sum(w.missing for w in waves)
    say(missing == 0, f"every report written: {soak.reports:,} reports, {missing} not written within "
        f"{args.report_timeout:g} s of their termination")
    report_s = sum(w.report_s for w in waves)
    rate = soak.reports / report_s if report_s else 0.0
    needed = args.terminations / (args.minutes * 60)
    reached = soak.pods_created >= args.pods and soak.terminations >= args.terminations
    say(reached and elapsed >= args.minutes * 60,
        f"the run: at least {args.minutes:g} min, {args.pods:,} pods and {args.terminations:,} terminations: "
        f"{elapsed / 60:.1f} min, {soak.pods_created:,} pods, {soak.terminations:,} terminations")
    # Stricter than the issue asks: all of it compressed into --minutes (the emulated API bounds it).
    paused = max(soak.lag.longest, soak.longest_full_s)
    say(paused <= GOAL_S, f"no event-loop pause over {1000 * GOAL_S:.0f} ms: the longest "
        f"{1000 * soak.lag.longest:.0f} ms (a {1000 * soak.lag.TICK_S:.0f} ms sleep's lateness, over the "
        f"run), "
        f"the longest full collection {1000 * soak.longest_full_s:.0f} ms (over the rounds)")
    say(elapsed <= args.minutes * 60 * 1.10,
        f"the pace: {args.terminations:,} terminations in {args.minutes:g} min need {needed:.0f}/s; "
        f"reports sustained {rate:.0f}/s while waiting for them"
        + (f"; the terminations took {elapsed / 60:.1f} min" if elapsed > args.minutes * 60 * 1.10 else ""))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="least run time (default 10)")
    parser.add_argument("--pods", type=int, default=10_000, help="least pods created in all (default 10000)")
    parser.add_argument("--terminations", type=int, default=100_000,
                        help="least container ends in all (default 100000)")
    parser.add_argument("--wave-pods", type=int, default=1000, help="pods per wave (default 1000)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="ends per pod per wave, all but the last a restart (default 10)")
    parser.add_argument("--line-every", type=float, default=5.0, help="seconds between two lines of one pod")
    parser.add_argument("--initial-lines", type=int, default=20, help="lines each pod writes when created")
    parser.add_argument("--restart-lines", type=int, default=10, help="lines a restarted container writes")
    parser.add_argument("--rate", type=float, default=None,
                        help="container ends per second to aim at (default: the goal's pace, "
                             "--terminations over --minutes)")
    parser.add_argument("--max-awaited", type=int, default=500,
                        help="ends awaiting their report before the bench holds back (default 500)")
    parser.add_argument("--report-timeout", type=float, default=30.0,
                        help="seconds a round waits for its reports before counting the rest missing")
    parser.add_argument("--follow-timeout", type=float, default=120.0,
                        help="seconds to wait for a wave's pods to be followed, and let go after deletion")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="also print where the Python heap grew over each wave (slower; RSS inflated)")
    parser.add_argument("--settle", type=float, default=20.0,
                        help="seconds after a wave before measuring (kopf's workers idle out after 5 s, "
                             "aiohttp's idle keep-alive connections after 15 s)")
    parser.add_argument("--seed", type=int, default=1, help="random seed for job sizes and ends")
    args = parser.parse_args()
    if args.wave_pods < 1 or args.rounds < 1:
        parser.error("--wave-pods and --rounds must be at least 1")
    if args.minutes <= 0 or (args.rate is not None and args.rate <= 0):
        parser.error("--minutes and --rate must be more than 0")
    if args.rate is None:
        args.rate = args.terminations / (args.minutes * 60)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
