"""An operator restart over a full log store: how long the event loop stalls while cursors load.

Usage: python bench/logs_store_reopen.py [--pods N] [--segment-mib M] [--dir PATH] [--cold]

A restarted operator resumes every followed pod from the store, and loading a
pod's instances reads the last segment of each (up to ``segment_bytes``, 16 MiB
by default) to find the last intact batch. Each pod here has one full segment.
Both sides load every pod's cursor at once, as the operator's followers do, while
a ticker measures the longest the event loop went without running it:

- baseline: the loads on the event loop (how the store loaded before);
- podmortem: ``load_cursor``, which loads in worker threads.

``--cold`` drops the page cache before each side (root), as after a node reboot.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.storage.store import LogStore, StoreSettings

BASE = 1_714_564_800 * 10**9
LINE = b"x" * 200


async def fill(root: Path, pods: int, segment_bytes: int) -> None:
    settings = StoreSettings(fsync_interval_s=None, segment_bytes=segment_bytes)
    per_batch = 1000
    batches = segment_bytes // (per_batch * (len(LINE) + 30)) - 1
    async with LogStore(root, settings=settings) as st:
        for p in range(pods):
            sink = st.sink(namespace="ns", pod=f"pod-{p}")
            cursor = LogCursor(container_id=f"cid-{p}")
            for b in range(batches):
                lines = [LogLine("main", BASE + (b * per_batch + i) * 1000, LINE) for i in range(per_batch)]
                for line in lines:
                    cursor.accept(line.ts_ns)
                await sink.write("main", lines, cursor)


def drop_caches() -> None:
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as exc:
        raise SystemExit(f"--cold needs root: {exc}") from exc


async def measure(root: Path, pods: int, *, on_loop: bool, segment_bytes: int) -> tuple[float, float, int]:
    """(wall seconds, longest loop stall in seconds, cursors loaded)."""
    stall = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal stall
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            stall = max(stall, now - last)
            last = now

    async with LogStore(
        root, settings=StoreSettings(fsync_interval_s=None, segment_bytes=segment_bytes)
    ) as st:
        sinks = [st.sink(namespace="ns", pod=f"pod-{p}") for p in range(pods)]
        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        if on_loop:

            async def load(sink: object) -> LogCursor | None:
                insts = st._instances(sink._pod, "main")  # type: ignore[attr-defined]
                return insts[-1].log_cursor() if insts else None

            cursors = await asyncio.gather(*(load(s) for s in sinks))
        else:
            cursors = await asyncio.gather(*(s.load_cursor("main") for s in sinks))
        wall = time.perf_counter() - t0
        done.set()
        await tick
    return wall, stall, sum(c is not None for c in cursors)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=200, help="pods in the store (default 200)")
    parser.add_argument("--segment-mib", type=int, default=4, help="segment size and fill, MiB (default 4)")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to build the store (default: a temp dir)"
    )
    parser.add_argument("--cold", action="store_true", help="drop the page cache before each side (root)")
    args = parser.parse_args()
    segment_bytes = args.segment_mib << 20
    tmp = Path(tempfile.mkdtemp(prefix="podmortem-reopen-", dir=args.dir))
    try:
        print(f"filling {args.pods} pods x one {args.segment_mib} MiB segment ...", flush=True)
        asyncio.run(fill(tmp, args.pods, segment_bytes))
        results = {}
        for name, on_loop in (("baseline (on the loop)", True), ("podmortem (threads)", False)):
            if args.cold:
                drop_caches()
            results[name] = asyncio.run(measure(tmp, args.pods, on_loop=on_loop, segment_bytes=segment_bytes))
        for name, (wall, stall, n) in results.items():
            print(
                f"  {name:24s} {n} cursors in {wall:6.2f} s; longest event-loop stall {stall * 1000:8.1f} ms"
            )
        base, ours = results["baseline (on the loop)"], results["podmortem (threads)"]
        print(
            f"  longest stall, podmortem / baseline: {ours[1] / base[1]:.3f}; wall {ours[0] / base[0]:.2f}x"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
