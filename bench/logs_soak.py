"""Fault soak: a million lines through a thousand injected faults, counted line by line.

Pods of the emulated cluster write lines (bursts sharing timestamps, a live
writer while they are followed) while the emulated kubelet works through a
random, seeded schedule of every fault kind in :mod:`podmortem_demo.emulated.faults`
(clean EOFs, cuts inside a line, EOF after T seconds, stalls until the read
timeout, 500/503/429 with and without Retry-After, resets, container restarts,
rotations while the follower is away, pod deletion, writes while away) plus
5xx/429 answers to pod reads. Each pod is followed with ``follow_pod`` over the
CLI's transport, into a sink that keeps every delivered line.

Then every produced line is looked up. Printed, and all three must be 0:

* **lost**: produced lines never delivered, except those behind a gap marker
  (rotated away while the follower was disconnected, or of instances that were
  gone), those still unread when their pod was deleted (its log went with it),
  and those rotated away before the follower had read anything of their instance
  (with no cursor there, no reader can tell; each is counted and printed);
* **duplicated**: lines delivered more than once;
* **out of order**: lines delivered before a line produced earlier (within a container).

Usage: python bench/logs_soak.py [--quick] [--seed N] [--lines N] [--faults N]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from podmortem.kube import config as kubeconfig
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import EndReason, GapMarker, GapReason, LogEnd, LogLine
from podmortem.logs.following import follower
from podmortem.logs.following.pod_log_api import PodLogApi, SessionTransport
from podmortem.logs.lines import LineBatch
from podmortem.logs.metrics import LogMetrics
from podmortem.logs.settings import FollowSettings
from podmortem_demo.emulated import Container, Pod, faults, running_cluster

SETTINGS = FollowSettings(read_timeout_s=0.2, connect_timeout_s=10, pod_read_timeout_s=10,
                          backoff_min_s=0.002, backoff_max_s=0.02)
#: Pods followed at once; most of a fault's cost is waiting, so they overlap well.
CONCURRENT_PODS = 10


class KeepingSink:
    """Keeps each delivered line's text (unique per produced line), gap markers and ends."""

    def __init__(self) -> None:
        self.texts: list[bytes] = []
        self.gaps: list[GapMarker] = []
        self.ends: list[LogEnd] = []
        #: containerID -> how many lines had been delivered before its first one.
        self.first_write: dict[str, int] = {}

    async def load_cursor(self, container: str) -> LogCursor | None:
        return None

    async def write(self, container: str, lines: Sequence[LogLine], cursor: LogCursor) -> None:
        if cursor.container_id is not None:
            self.first_write.setdefault(cursor.container_id, len(self.texts))
        if isinstance(lines, LineBatch):
            self.texts.extend(lines.columns()[1])
        else:
            self.texts.extend(line.text for line in lines)

    async def gap(self, marker: GapMarker) -> None:
        self.gaps.append(marker)

    async def end(self, end: LogEnd) -> None:
        self.ends.append(end)


def random_fault(rng: random.Random) -> faults.LogFault:
    """One fault of any kind but Delete (which ends a pod: only ever the last of a schedule)."""
    kind = rng.randrange(11)
    if kind == 0:
        return faults.EofAfter(rng.randint(0, 3000))
    if kind == 1:
        return faults.EofAfter(rng.randint(0, 3000), extra_bytes=rng.randint(1, 40))
    if kind == 2:
        return faults.EofAfterSeconds(rng.choice([0.0, 0.002, 0.02]))
    if kind == 3:
        return faults.Stall(rng.randint(0, 2000), extra_bytes=rng.randint(0, 40))
    if kind == 4:
        return faults.Reset(rng.randint(0, 2000), extra_bytes=rng.randint(0, 40))
    if kind == 5:
        return faults.HttpError(rng.choice([500, 503]))
    if kind == 6:
        return faults.HttpError(429, retry_after=rng.choice([None, 0.0, 0.01]))
    if kind == 7:
        return faults.Restart(after_lines=rng.randint(0, 2000), new_lines=rng.randint(0, 500))
    if kind == 8:
        return faults.Rotate(write_before=rng.randint(0, 1500), keep=0)
    return faults.Write(rng.randint(1, 2000))


@dataclass(frozen=True)
class Rotation:
    """A rotation as it happened: which instance, from which line on the file starts, and how many
    lines the follower had delivered at that moment (to tell whether it had read that instance yet)."""

    instance: int
    first_line: int
    delivered: int


@dataclass
class PodRun:
    pod: Pod
    target_lines: int
    schedule: list[faults.LogFault]
    pod_read_faults: list[faults.HttpError | None]
    sink: KeepingSink = field(default_factory=KeepingSink)
    ends: dict[str, LogEnd] = field(default_factory=dict)
    rotations: list[Rotation] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def main(self) -> Container:
        return self.pod.containers["main"]


def produced_count(container: Container) -> int:
    return sum(len(inst.log) for inst in container.instances)


async def live_writer(run: PodRun, rng: random.Random) -> None:
    """Bursts while followed, with pauses longer than the read timeout (so streams also time out)."""
    main = run.main
    while not run.pod.deleted:
        if produced_count(main) < run.target_lines and main.current.exit_code is None:
            main.write(min(rng.randint(200, 3000), run.target_lines - produced_count(main)))
        elif not main.faults:
            main.terminate(0)  # enough lines and every fault served: the container finishes
            return
        await asyncio.sleep(rng.choice([0.001, 0.01, 0.3]))


async def follow_one(run: PodRun, api: PodLogApi, metrics: LogMetrics, rng: random.Random) -> None:
    main = run.main
    rotate = main.rotate

    def recorded_rotate(*, keep: int = 0) -> None:
        rotate(keep=keep)
        run.rotations.append(Rotation(main.current.number, main.current.log.first_line, len(run.sink.texts)))

    main.rotate = recorded_rotate  # type: ignore[method-assign]
    main.write(min(5000, run.target_lines))
    main.faults.extend(run.schedule)
    run.pod.pod_faults.extend(run.pod_read_faults)
    writer = asyncio.create_task(live_writer(run, rng))
    started = time.monotonic()
    try:
        async with asyncio.timeout(600):
            run.ends = await follower.follow_pod(api=api, namespace="default", pod=run.pod.name,
                                                 sink=run.sink, settings=SETTINGS, metrics=metrics,
                                                 rng=random.Random(rng.random()))
    finally:
        run.seconds = time.monotonic() - started
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)


@dataclass
class Tally:
    produced: int = 0
    delivered: int = 0
    lost: int = 0
    marked: int = 0
    before_first_read: int = 0
    deleted: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    gaps: collections.Counter[str] = field(default_factory=collections.Counter)
    examples: list[str] = field(default_factory=list)


def _in_gap(ts: int, gaps: list[GapMarker]) -> bool:
    for gap in gaps:
        lo = gap.after_ts_ns if gap.after_ts_ns is not None else -1
        hi = gap.before_ts_ns if gap.before_ts_ns is not None else 1 << 80
        if lo <= ts <= hi:
            return True
    return False


def tally(run: PodRun, out: Tally) -> None:
    """Compare what one pod's container produced with what its follower delivered."""
    main = run.main
    order: dict[bytes, tuple[int, int]] = {}  # text -> (instance, line index): the production order
    rotated_below: list[int] = []
    produced: list[list[tuple[int, bytes]]] = []
    for inst in main.instances:
        lines = inst.log.lines()
        produced.append(lines)
        rotated_below.append(max(inst.log.rotations, default=0))
        for i, (_, text) in enumerate(lines):
            order[text] = (inst.number, i)
    out.produced += len(order)
    seen: set[bytes] = set()
    last: tuple[int, int] = (-1, -1)
    for text in run.sink.texts:
        out.delivered += 1
        if text in seen:
            out.duplicated += 1
            if len(out.examples) < 5:
                out.examples.append(f"{run.pod.name}: duplicate {text[:60]!r}")
            continue
        seen.add(text)
        where = order.get(text)
        if where is None:
            out.lost += 0  # not produced: a corrupted line
            out.examples.append(f"{run.pod.name}: delivered a line never produced: {text[:60]!r}")
            continue
        if where < last:
            out.out_of_order += 1
            if len(out.examples) < 5:
                out.examples.append(f"{run.pod.name}: {text[:60]!r} came after {last}")
        last = max(last, where)
    gaps = run.sink.gaps
    for gap in gaps:
        out.gaps[gap.reason.value] += 1
    deleted = any(end.reason is EndReason.POD_DELETED for end in run.ends.values())
    final = len(main.instances) - 1
    # After a deletion, what the last instance wrote beyond the last delivered line is gone with it.
    last_delivered_final = max((i for i, (_, t) in enumerate(produced[final]) if t in seen), default=-1)
    # Rotations before the follower had read anything of an instance: it has no cursor there, so
    # nothing can tell it that the file it reads first is not the instance's first file.
    unread_rotated = [0] * len(produced)
    for rot in run.rotations:
        first = run.sink.first_write.get(main.instances[rot.instance].container_id)
        if first is None or first >= rot.delivered:
            unread_rotated[rot.instance] = max(unread_rotated[rot.instance], rot.first_line)
    restarts = [g for g in gaps if g.reason is GapReason.RESTARTS]
    rotations = [g for g in gaps if g.reason is not GapReason.RESTARTS]
    for k, lines in enumerate(produced):
        for i, (ts, text) in enumerate(lines):
            if text in seen:
                continue
            if deleted and k == final and i > last_delivered_final:
                out.deleted += 1
            elif i < unread_rotated[k]:
                out.before_first_read += 1
            elif (i < rotated_below[k] and _in_gap(ts, rotations)) or (k < final and _in_gap(ts, restarts)):
                out.marked += 1
            else:
                out.lost += 1
                if len(out.examples) < 5:
                    out.examples.append(f"{run.pod.name}: lost instance {k} line {i} {text[:50]!r}")


async def soak(*, seed: int, total_lines: int, total_faults: int, pods: int) -> int:
    rng = random.Random(seed)
    started = time.monotonic()
    metrics = LogMetrics(CollectorRegistry())
    fault_counts: collections.Counter[str] = collections.Counter()
    out = Tally()
    async with running_cluster() as (api, url):
        access = kubeconfig.ClusterAccess(server=url, authorization="Bearer soak")
        runs: list[PodRun] = []
        per_pod_faults = max(1, total_faults // pods)
        for p in range(pods):
            pod = api.add_pod(f"soak-{p}", seed=rng.randrange(1 << 30), max_burst=rng.choice([1, 8, 40]),
                              max_step_ns=rng.choice([200_000, 2_000_000, 300_000_000]))
            schedule = [random_fault(rng) for _ in range(per_pod_faults)]
            if p % 5 == 4:
                schedule.append(faults.Delete(after_lines=rng.randint(0, 500)))
            reads: list[faults.HttpError | None] = [
                rng.choice([None, None, faults.HttpError(500), faults.HttpError(503),
                            faults.HttpError(429, retry_after=0.005)])
                for _ in range(per_pod_faults // 5)]
            runs.append(PodRun(pod=pod, target_lines=total_lines // pods, schedule=schedule,
                               pod_read_faults=reads))
        async with SessionTransport(access) as transport:
            pod_api = PodLogApi(transport, settings=SETTINGS)
            gate = asyncio.Semaphore(CONCURRENT_PODS)

            async def one(run: PodRun) -> None:
                async with gate:
                    await follow_one(run, pod_api, metrics, random.Random(rng.random()))
                    served = len(run.schedule) - len(run.main.faults)
                    for fault in run.schedule[:served]:
                        name = type(fault).__name__
                        if isinstance(fault, faults.HttpError):
                            name += f" {fault.status}"
                        elif isinstance(fault, faults.EofAfter) and fault.extra_bytes:
                            name += " (mid-line)"
                        fault_counts[name] += 1
                    reads = len(run.pod_read_faults) - len(run.pod.pod_faults)
                    for read_fault in run.pod_read_faults[:reads]:
                        if read_fault is not None:
                            fault_counts[f"pod read HttpError {read_fault.status}"] += 1
                    tally(run, out)
                    run.sink.texts.clear()
                    print(f"  pod {run.pod.name}: {sum(len(i.log) for i in run.main.instances):,} lines, "
                          f"{served} log faults, {len(run.main.instances)} instances, "
                          f"{run.seconds:.1f} s, end: {', '.join(e.reason for e in run.ends.values())}",
                          file=sys.stderr, flush=True)

            async with asyncio.TaskGroup() as group:
                for run in runs:
                    group.create_task(one(run))
    elapsed = time.monotonic() - started
    injected = sum(fault_counts.values())
    print(f"seed={seed} pods={pods} run time {elapsed:.1f} s")
    print(f"produced {out.produced:,} lines, delivered {out.delivered:,}")
    print(f"faults injected (served): {injected:,}")
    for name, count in sorted(fault_counts.items()):
        print(f"  {name:28s} {count:6,}")
    print(f"gap markers: {dict(out.gaps) or 'none'}; lines behind them (rotated away / instances gone): "
          f"{out.marked:,}")
    print(f"not counted as lost: rotated away before the follower first read that instance (no cursor: "
          f"undetectable): {out.before_first_read:,}; unread when the pod was deleted: {out.deleted:,}")
    print(f"reconnects: {int(sum(metrics.reconnects.labels(r)._value.get() for r in _reasons())):,}, "
          f"duplicate lines dropped by the cursor: {int(metrics.duplicates._value.get()):,}")
    print(f"LOST (outside marked gaps): {out.lost}")
    print(f"DUPLICATED: {out.duplicated}")
    print(f"OUT OF ORDER: {out.out_of_order}")
    for example in out.examples:
        print(f"  e.g. {example}")
    ok = out.lost == out.duplicated == out.out_of_order == 0 and injected >= 1 and out.produced > 0
    return 0 if ok else 1


def _reasons() -> tuple[str, ...]:
    from podmortem.logs.metrics import RECONNECT_REASONS

    return RECONNECT_REASONS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k lines, 100 faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lines", type=int, default=None, help="lines in all (default 1,000,000)")
    parser.add_argument("--faults", type=int, default=None, help="log faults in all (default 1,200)")
    parser.add_argument("--pods", type=int, default=None, help="pods the lines are spread over (default 20)")
    ns = parser.parse_args()
    lines = ns.lines or (100_000 if ns.quick else 1_000_000)
    n_faults = ns.faults or (100 if ns.quick else 1200)
    pods = ns.pods or (5 if ns.quick else 20)
    sys.exit(asyncio.run(soak(seed=ns.seed, total_lines=lines, total_faults=n_faults, pods=pods)))


if __name__ == "__main__":
    main()
