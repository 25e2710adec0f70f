"""The cursor's last-line checksum is stored with every batch and comes back on reopen."""

from __future__ import annotations

from pathlib import Path

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import GapMarker, GapReason, LogLine
from podmortem.logs.storage import segments
from podmortem.logs.storage.store import LogStore, StoreSettings

BASE = 1_714_564_800 * 10**9


async def test_last_line_crc_survives_a_reopen(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None)) as store:
        sink = store.sink(namespace="ns", pod="p")
        cursor = LogCursor(container_id="cid", last_ts_ns=BASE, count_at_last=2, delivered=2,
                           last_line_crc=0xDEADBEEF)
        await sink.write("main", [LogLine("main", BASE, b"a"), LogLine("main", BASE, b"b")], cursor)
        # A gap after the lines must not lose it either (gap batches carry the stored cursor).
        await sink.gap(GapMarker("main", GapReason.ROTATION, BASE, None))
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None)) as store:
        loaded = await store.sink(namespace="ns", pod="p").load_cursor("main")
    assert loaded == LogCursor(container_id="cid", last_ts_ns=BASE, count_at_last=2, delivered=2,
                               last_line_crc=0xDEADBEEF)


def test_headers_without_the_checksum_read_as_unknown() -> None:
    fields = segments.CursorFields(BASE, 1, 1)  # a follower that did not know the line's bytes
    framing = segments.Framing.new()
    data = framing.encode_event(segments.BatchKind.GAP, {}, first_ts=segments.NO_TS, last_ts=segments.NO_TS,
                                 index=0, cursor=fields)
    assert framing.decode_header(data).cursor_line_crc is None
    data = framing.encode_event(segments.BatchKind.GAP, {}, first_ts=segments.NO_TS, last_ts=segments.NO_TS,
                                 index=0, cursor=segments.CursorFields(BASE, 1, 1, 0))
    assert framing.decode_header(data).cursor_line_crc == 0  # zero is a checksum, not "none"
    assert framing.check_batch(data, 0).cursor_line_crc == 0
