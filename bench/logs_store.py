"""Write and read throughput of the durable log store, against a plain-file baseline.

Usage: python bench/logs_store.py [--lines N] [--batch N] [--dir PATH]

Both sides get the very same pre-built ``LogLine`` batches (the follower builds
those anyway). The baseline writes each batch's texts newline-joined to a plain
file with one ``write()`` per batch: the least any store can do. The store runs
with its default fsync policy (every 1 s, in a worker thread) and with fsync off.

The follower's budget: ``kubectl logs -f`` did ~1.4M short lines/s here, the
target with the store is >= 0.7x of that (~1M lines/s end to end), so the store's
share per line must stay a small fraction of a microsecond.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from podmortem.logs import timestamps
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.lines import LineBatch
from podmortem.logs.storage import reading
from podmortem.logs.storage.store import LogStore, StoreSettings


def make_batches(n_lines: int, batch: int) -> list[tuple[list[LogLine], LogCursor]]:
    base = 1_714_564_800 * 10**9
    cursor = LogCursor(container_id="containerd://bench")
    out: list[tuple[list[LogLine], LogCursor]] = []
    lines: list[LogLine] = []
    for i in range(n_lines):
        ts = base + (i // 7) * 1000  # several lines share one timestamp
        cursor.accept(ts)
        lines.append(LogLine("main", ts, b"epoch 3 iter %7d loss 0.%04d lr 1e-3" % (i, i % 10000)))
        if len(lines) == batch:
            out.append((lines, LogCursor.from_json(cursor.to_json())))
            lines = []
    if lines:
        out.append((lines, LogCursor.from_json(cursor.to_json())))
    return out


def as_line_batches(batches: list[tuple[list[LogLine], LogCursor]]) -> list[tuple[LineBatch, LogCursor]]:
    """The same lines as the follower hands them over: raw ``<RFC3339> <text>\\n`` blocks."""
    out = []
    for lines, cursor in batches:
        raw = b"".join(timestamps.format_ns(line.ts_ns).encode() + b" " + line.text + b"\n" for line in lines)
        out.append((LineBatch(container="main", raw=raw, count=len(lines), first_ts_ns=lines[0].ts_ns,
                              last_ts_ns=lines[-1].ts_ns), cursor))
    return out


def plain_raw_baseline(path: Path, batches: list[tuple[LineBatch, LogCursor]]) -> float:
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        for block, _ in batches:
            os.write(fd, block.raw)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def plain_baseline(path: Path, batches: list[tuple[list[LogLine], LogCursor]]) -> float:
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        for lines, _ in batches:
            texts = [line.text for line in lines]
            texts.append(b"")
            os.write(fd, b"\n".join(texts))
    finally:
        os.close(fd)
    return time.perf_counter() - t0


async def store_run(
    root: Path, batches: Sequence[tuple[Sequence[LogLine], LogCursor]], settings: StoreSettings
) -> float:
    async with LogStore(root, settings=settings) as store:
        sink = store.sink(namespace="bench", pod="p-0", job="bench")
        t0 = time.perf_counter()
        for lines, cursor in batches:
            await sink.write("main", lines, cursor)
        return time.perf_counter() - t0


async def read_run(root: Path) -> tuple[float, int, float]:
    async with LogStore(root, read_only=True) as store:
        inst = store.find(namespace="bench", pod="p-0")
        t0 = time.perf_counter()
        n = 0
        async for item in reading.read(inst):
            if isinstance(item, reading.LinesBlock):
                item.text_bytes()
                n += len(item)
        full = time.perf_counter() - t0
        t0 = time.perf_counter()
        async for _ in reading.read(inst, tail=100):
            pass
        tail = time.perf_counter() - t0
    return full, n, tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000, help="lines per run (default 2,000,000)")
    parser.add_argument("--batch", type=int, default=1500, help="lines per write (default 1500 ~ 64 KiB)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; best of each is shown")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()

    batches = make_batches(args.lines, args.batch)
    nbytes = sum(len(line.text) + 1 for lines, _ in batches for line in lines)
    work = Path(tempfile.mkdtemp(prefix="podmortem-bench-", dir=args.dir))
    raw_batches = as_line_batches(batches)
    best: dict[str, float] = {}

    def keep(name: str, secs: float) -> None:
        best[name] = min(best.get(name, 1e9), secs)

    try:
        for r in range(args.rounds):
            keep("plain raw", plain_raw_baseline(work / f"plain-{r}.log", raw_batches))
            os.unlink(work / f"plain-{r}.log")
            keep("plain text", plain_baseline(work / f"plain-{r}.log", batches))
            os.unlink(work / f"plain-{r}.log")
            runs: list[tuple[str, Sequence[tuple[Sequence[LogLine], LogCursor]], StoreSettings]] = [
                ("store raw fsync 1s", raw_batches, StoreSettings()),
                ("store raw no fsync", raw_batches, StoreSettings(fsync_interval_s=None)),
                ("store LogLine 1s", batches, StoreSettings()),
            ]
            for name, data, settings in runs:
                root = work / f"store-{r}"
                keep(name, asyncio.run(store_run(root, data, settings)))
                if name == "store raw no fsync" and r == args.rounds - 1:
                    full, n, tail = asyncio.run(read_run(root))
                shutil.rmtree(root)
        print(f"{args.lines:,} lines, {nbytes / 2**20:.1f} MiB of text, {len(batches):,} batches "
              f"of {args.batch}, best of {args.rounds} interleaved rounds")
        for name, secs in best.items():
            rate = args.lines / secs
            base = best["plain text"] if "LogLine" in name or name == "plain text" else best["plain raw"]
            print(f"  {name:20s} {rate / 1e6:6.2f} M lines/s  {secs / args.lines * 1e9:6.0f} ns/line  "
                  f"{base / secs:5.2f}x its plain-file baseline")
        print(f"  read all         {n / full / 1e6:6.2f} M lines/s ({n:,} lines)")
        print(f"  read tail=100    {tail * 1e3:6.2f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
