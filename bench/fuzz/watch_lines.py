"""Fuzz target: a watch stream's bytes, cut into chunks where the input says, split into event lines.

`podmortem.operator.watching.pod_watch.event_lines` documents ValueError for a line over its
limit; the lines must be the stream's non-empty lines whatever the chunks (a finding otherwise).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness

SEEDS = ("tests/fixtures/fuzz/watch_lines/seed-*",)
#: Small, so that the fuzzer reaches the over-long line too.
LIMIT = 512


async def _chunks(data: bytes, cuts: bytes) -> AsyncIterator[bytes]:
    at = 0
    for cut in cuts:
        yield data[at : at + cut]
        at += cut
    yield data[at:]


def check(data: bytes) -> None:
    from podmortem.operator.watching import pod_watch

    cuts, stream = data[:16], data[16:]

    async def lines() -> list[bytes]:
        return [line async for line in pod_watch.event_lines(_chunks(stream, cuts), limit=LIMIT)]

    try:
        got = asyncio.run(lines())
    except ValueError as exc:
        if "over" not in str(exc):
            raise
        return
    want = [line for line in stream.split(b"\n")[:-1] if line]
    if stream.split(b"\n")[-1].strip():
        want.append(stream.split(b"\n")[-1])
    if got != want:
        raise AssertionError(f"{got!r} != {want!r}")


if __name__ == "__main__":
    _harness.main(check)
