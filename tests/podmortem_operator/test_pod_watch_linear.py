"""The watch stream's line splitting does work linear in the stream, however finely it is chunked.

Issue 36: every chunk searched the whole event held so far for its newline, so a 16 MiB event in
4 KiB chunks searched 32 GiB. Counted here by a ``bytearray`` that adds up what ``find`` looks at
(no clock: the count is the work).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import SupportsIndex

import pytest

from podmortem.operator.watching import pod_watch


class _CountingBuffer(bytearray):
    searched = 0

    def find(self, sub: object, start: SupportsIndex | None = None, *args: object) -> int:  # type: ignore[override]
        _CountingBuffer.searched += len(self) - (0 if start is None else int(start))
        return super().find(sub, start, *args)  # type: ignore[arg-type]


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at : at + size]


async def test_a_long_event_in_small_chunks_is_searched_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pod_watch, "bytearray", _CountingBuffer, raising=False)
    _CountingBuffer.searched = 0
    event = b'{"type": "MODIFIED", "object": {"a": "' + b"x" * (1 << 20) + b'"}}\n'
    lines = [line async for line in pod_watch.event_lines(_chunks(event, 4096))]
    assert lines == [event[:-1]]
    assert _CountingBuffer.searched <= 2 * len(event), f"{_CountingBuffer.searched} bytes searched"
