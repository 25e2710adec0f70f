"""The CLI's stdout sink: kubectl's output format, few large writes, notes after the lines they follow."""

from __future__ import annotations

import asyncio
import io

from prometheus_client import CollectorRegistry, generate_latest

from podmortem.logs import timestamps
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import GapMarker, GapReason, LogLine
from podmortem.logs.following.sinks import StdoutSink
from podmortem.logs.lines import LineBatch
from podmortem.logs.metrics import StoreCollector

BASE = 1_714_560_000 * timestamps.NS_PER_SECOND


def batch(*texts: bytes, container: str = "main") -> LineBatch:
    return LineBatch.of(container, [LogLine(container, BASE + i, t) for i, t in enumerate(texts)])


class Recorder(io.RawIOBase):
    """A binary stream that records each write; stderr notes land in the same list, in order."""

    def __init__(self, log: list[tuple[str, bytes]], name: str) -> None:
        self.log, self.name = log, name

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.log.append((self.name, bytes(data)))
        return len(data)


class TextRecorder(io.StringIO):
    def __init__(self, log: list[tuple[str, bytes]]) -> None:
        super().__init__()
        self.log = log

    def write(self, text: str) -> int:
        self.log.append(("err", text.encode()))
        return len(text)


async def test_lines_are_gathered_into_one_write_and_flushed_when_idle() -> None:
    log: list[tuple[str, bytes]] = []
    sink = StdoutSink(Recorder(log, "out"), timestamps=False, prefix=False, err=TextRecorder(log))  # type: ignore[arg-type]
    for i in range(5):
        await sink.write("main", batch(b"a%d" % i, b"b%d" % i), LogCursor())
    assert log == []  # nothing written while more lines may be ready
    await asyncio.sleep(0)  # the loop goes idle: the scheduled flush runs
    assert log == [("out", b"a0\nb0\na1\nb1\na2\nb2\na3\nb3\na4\nb4\n")]


async def test_prefix_only_at_line_starts_and_notes_after_printed_lines() -> None:
    log: list[tuple[str, bytes]] = []
    sink = StdoutSink(Recorder(log, "out"), timestamps=False, prefix=True, err=TextRecorder(log))  # type: ignore[arg-type]
    await sink.write("side", batch(b"epoch 1: 10%\r epoch 1: 20%\r", b"\x1b[31mERR\x1b[0m \xff"), LogCursor())
    await sink.gap(GapMarker("side", GapReason.ROTATION, BASE, BASE + 5, "rotated"))
    assert log[0] == ("out", b"[side] epoch 1: 10%\r epoch 1: 20%\r\n[side] \x1b[31mERR\x1b[0m \xff\n")
    assert log[1][0] == "err" and b"possible gap (rotation)" in log[1][1]


async def test_timestamps_are_kept_when_asked() -> None:
    out = io.BytesIO()
    sink = StdoutSink(out, timestamps=True, prefix=False)
    await sink.write("main", batch(b"x"), LogCursor())
    sink.flush()
    assert out.getvalue() == timestamps.format_ns(BASE).encode() + b" x\n"


class Counters:
    lines_total = 7
    bytes_total = 300
    gaps_total = 1
    corrupt_bytes_total = 4096
    full_since = 12.5


def test_store_counters_are_exported_when_scraped() -> None:
    registry = CollectorRegistry()
    store = Counters()
    registry.register(StoreCollector(store))
    store.lines_total = 9
    text = generate_latest(registry).decode()
    assert "podmortem_logs_store_lines_total 9.0" in text
    assert "podmortem_logs_store_bytes_total 300.0" in text
    assert "podmortem_logs_store_gaps_total 1.0" in text
    assert "podmortem_logs_store_corrupt_bytes_total 4096.0" in text
    assert "podmortem_logs_store_full 1.0" in text
