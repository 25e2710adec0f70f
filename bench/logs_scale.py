"""Many idle follows in one process: memory per stream and idle CPU.

An operator follows every container of every training pod, most of them quiet
most of the time. This opens N concurrent follows (default 1,000) against
emulated running pods served from another process, waits until every stream
has delivered its container's first lines and sits idle, then measures:

* memory per stream: the RSS growth of this process divided by N, and the
  Python heap growth (tracemalloc, in a second pass: tracing inflates RSS);
* idle CPU: this process's CPU seconds over an idle window, as a share of one
  core (the emulated server's own polling runs in its process, not counted).

Through ``SessionTransport`` (plain aiohttp on the operator's ``ApiSession``, as the
CLI and the operator both follow logs). Target: < 64 KiB per stream.

Usage: python bench/logs_scale.py [--quick] [--streams N] [--idle S]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from podmortem.kube import config as kubeconfig
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import GapMarker, LogEnd, LogLine
from podmortem.logs.following import follower
from podmortem.logs.following.pod_log_api import PodLogApi, SessionTransport
from podmortem.logs.metrics import LogMetrics
from podmortem.logs.settings import FollowSettings

LINES_PER_POD = 20


class CountingSink:
    """Counts lines; keeps nothing (the store's memory is not the follower's)."""

    def __init__(self) -> None:
        self.lines = 0

    async def load_cursor(self, container: str) -> LogCursor | None:
        return None

    async def write(self, container: str, lines: Sequence[LogLine], cursor: LogCursor) -> None:
        self.lines += len(lines)

    async def gap(self, marker: GapMarker) -> None:
        pass

    async def end(self, end: LogEnd) -> None:
        pass


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@contextlib.asynccontextmanager
async def pod_api(kind: str, access: kubeconfig.ClusterAccess,
                  settings: FollowSettings) -> AsyncIterator[PodLogApi]:
    async with SessionTransport(access) as transport:
        yield PodLogApi(transport, settings=settings)


async def open_follows(api: PodLogApi, n: int, settings: FollowSettings,
                       metrics: LogMetrics) -> tuple[list[asyncio.Task[Any]], list[CountingSink]]:
    sinks = [CountingSink() for _ in range(n)]
    tasks = [
        asyncio.create_task(follower.follow_pod(api=api, namespace="default", pod=f"bench-{i}", sink=sink,
                                                settings=settings, metrics=metrics, rng=random.Random(i)))
        for i, sink in enumerate(sinks)
    ]
    deadline = time.monotonic() + 300
    while sum(s.lines for s in sinks) < n * LINES_PER_POD:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {sum(s.lines > 0 for s in sinks)} of {n} streams delivered in 300 s")
        failed = [t for t in tasks if t.done()]
        if failed:
            failed[0].result()
            raise SystemExit("a follow ended early")
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # let the last responses settle into their idle wait
    return tasks, sinks


async def close(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def measure(kind: str, access: kubeconfig.ClusterAccess, n: int, idle_s: float,
                  read_timeout_s: float) -> dict[str, Any]:
    settings = FollowSettings(read_timeout_s=read_timeout_s)
    metrics = LogMetrics(CollectorRegistry())
    async with pod_api(kind, access, settings) as api:
        # Warm up: imports, the connector, code paths and the loop's internal structures.
        warm, _ = await open_follows(api, min(n, 20), settings, metrics)
        await close(warm)
        gc.collect()
        rss0 = rss_bytes()
        tasks, _ = await open_follows(api, n, settings, metrics)
        gc.collect()
        rss1 = rss_bytes()
        requests0 = sum(metrics.reconnects.labels(r)._value.get() for r in follower_reasons())
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(idle_s)
        cpu1, wall1 = time.process_time(), time.monotonic()
        reconnects = sum(metrics.reconnects.labels(r)._value.get() for r in follower_reasons()) - requests0
        active = metrics.streams_active._value.get()
        await close(tasks)
        gc.collect()
        # Second pass, traced: the Python heap each stream holds.
        tracemalloc.start()
        base = tracemalloc.take_snapshot()
        base_size = sum(stat.size for stat in base.statistics("filename"))
        tasks, _ = await open_follows(api, n, settings, metrics)
        gc.collect()
        traced = tracemalloc.take_snapshot()
        traced_size = sum(stat.size for stat in traced.statistics("filename"))
        top = traced.compare_to(base, "filename")[:5]
        tracemalloc.stop()
        await close(tasks)
    return {
        "rss_per_stream": (rss1 - rss0) / n,
        "traced_per_stream": (traced_size - base_size) / n,
        "idle_cpu_s": cpu1 - cpu0,
        "idle_wall_s": wall1 - wall0,
        "reconnects": reconnects,
        "active": active,
        "top": top,
    }


def follower_reasons() -> tuple[str, ...]:
    from podmortem.logs.metrics import RECONNECT_REASONS

    return RECONNECT_REASONS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 streams, 5 s idle window")
    parser.add_argument("--streams", type=int, default=None, help="concurrent follows (default 1,000)")
    parser.add_argument("--idle", type=float, default=None, help="idle window in seconds (default 30)")
    parser.add_argument("--read-timeout", type=float, default=FollowSettings.read_timeout_s,
                        help="follower read timeout in seconds (default: the production default)")
    ns = parser.parse_args()
    n = ns.streams or (200 if ns.quick else 1000)
    idle = ns.idle or (5.0 if ns.quick else 30.0)
    kinds = ["session"]
    with tempfile.TemporaryDirectory(prefix="podmortem-scale-") as tmp:
        kubeconfig_path = Path(tmp) / "kubeconfig"
        server = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("logs_server.py")), "--pods", str(n), "--running",
             "--lines", str(LINES_PER_POD), "--kubeconfig", str(kubeconfig_path)],
            stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            if not server.stdout.readline().strip():
                raise SystemExit("the emulated server did not start")
            access = kubeconfig.load(kubeconfig_path)
            print(f"{n:,} concurrent idle follows, one process; idle window {idle:g} s; "
                  f"read timeout {ns.read_timeout:g} s")
            for kind in kinds:
                r = asyncio.run(measure(kind, access, n, idle, ns.read_timeout))
                cpu_share = r["idle_cpu_s"] / r["idle_wall_s"]
                per_stream_us = r["idle_cpu_s"] / n * 1e6 / r["idle_wall_s"]
                print(f"  {kind:10s} memory per stream: RSS {r['rss_per_stream'] / 1024:5.1f} KiB, "
                      f"Python heap (tracemalloc) {r['traced_per_stream'] / 1024:5.1f} KiB"
                      "  (target < 64 KiB)")
                print(f"  {'':10s} idle CPU: {r['idle_cpu_s']:.3f} CPU s over {r['idle_wall_s']:.1f} s "
                      f"= {cpu_share * 100:.2f}% of one core, {per_stream_us:.1f} CPU us per stream per"
                      f" second; {r['reconnects']:.0f} reconnects in the window; "
                      f"{r['active']:.0f} streams active")
                for stat in r["top"]:
                    where = stat.traceback[0].filename.split("site-packages/")[-1]
                    print(f"  {'':10s}   {stat.size_diff / n:7.0f} B/stream  {where}")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
