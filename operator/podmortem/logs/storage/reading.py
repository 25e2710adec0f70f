"""Reading a stored container log back: from the start, from a time, the last N lines, and live.

A reader yields whole decoded batches (``blocks``); where it starts is ``positions``'s, how it
reads a segment ``chunks``'s, how lines are rendered ``rendering``'s. Following waits on the
store's in-process notification (no polling) and stops when the instance's log ends, when a
newer instance of the container replaces it, or when the store closes.

File reads happen in the read pool's threads (`read_pool`), in chunks of whole batches.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from podmortem.logs import wakeup
from podmortem.logs.events import GapMarker, GapReason, LogEnd, LogLine
from podmortem.logs.storage import read_pool, segments
from podmortem.logs.storage.blocks import (
    IDLE,
    Damaged,
    Idle,
    LargeLinesBlock,
    LinesBlock,
    LogItem,
    RetentionCut,
)
from podmortem.logs.storage.chunks import READ_CHUNK, Batches, DamageAt, LargeAt, read_chunk
from podmortem.logs.storage.instance import Instance
from podmortem.logs.storage.positions import data_start, since_segment, tail_start
from podmortem.logs.storage.recovery import end_from_event
from podmortem.logs.storage.rendering import PIECE, Render, read_large_lines, render_block, serve_large
from podmortem.logs.wakeup import Wakeup

#: Names callers import from here, wherever they are defined now.
__all__ = [
    "FOLLOW_COALESCE_S",
    "IDLE",
    "PIECE",
    "READ_CHUNK",
    "Damaged",
    "Idle",
    "LargeLinesBlock",
    "LinesBlock",
    "LogItem",
    "Render",
    "RetentionCut",
    "read",
    "read_large_lines",
    "read_lines",
    "render_block",
    "serve_large",
]

logger = logging.getLogger(__name__)

#: A following reader waits this long after a wake-up before reading, to gather the batches that
#: came meanwhile (followers see lines at most this much later).
FOLLOW_COALESCE_S = 0.25


async def read(
    inst: Instance,
    *,
    since_ns: int | None = None,
    tail: int | None = None,
    follow: bool = False,
    stop: Wakeup | None = None,
    idle_marks: bool = False,
) -> AsyncIterator[LogItem | Idle]:
    """Yield a container instance's stored log in order, optionally waiting for more.

    ``tail``: only the last N lines (as of the call); ``since_ns``: only lines at or after
    this time. Gap markers within the range come in place; the end marker comes last.
    ``stop``: when set, a follow ends at the next wait (the server is shutting down).
    ``idle_marks``: yield `IDLE` before each wait, so a server can send what it gathered.
    """
    if tail is not None and tail < 0:
        raise ValueError("tail must be >= 0")
    container = inst.container
    seqs = inst.segment_seqs()
    if inst.active_seq is not None and inst.active_seq not in seqs:
        seqs.append(inst.active_seq)  # (cannot happen on a healthy disk; be robust)
    start_index = 0
    if tail is not None:
        start_index = max(0, inst.index - tail)
        seq, offset = await read_pool.run(tail_start, inst, seqs, tail)
    elif since_ns is not None and seqs:
        chosen = await read_pool.run(since_segment, inst, seqs, since_ns)
        seq = seqs[chosen]
        offset = await read_pool.run(data_start, inst, seq)
    else:
        seq = seqs[0] if seqs else 0
        offset = await read_pool.run(data_start, inst, seq) if seqs else 0
    # Under ``since``, skipping earlier segments is intended, not a retention cut.
    first = since_ns is None
    # The running index after the last intact batch served (None before the first).
    seen: int | None = None
    # Damage met but not yet told: held until the next intact batch says how many lines it hid.
    pending: Damaged | None = None
    while True:
        # One chunk read, rendered and sent is a reader's step: a few per turn of the loop
        # (`wakeup.Turns`), however many readers were woken at once.
        await wakeup.take_turn()
        changed = inst.changed
        size = inst.committed_size(seq)
        if size is not None and offset < size:
            path = inst.segment_path(seq)
            try:
                batches, offset = await _shared_chunk(inst, seq, path, offset, size)
            except FileNotFoundError:
                batches, offset = [], size  # deleted by retention under us: go on with the next
            except OSError as exc:  # a link planted in the store (ELOOP), a bad disk: not served
                batches, offset = [DamageAt(offset, size - offset, "unreadable")], size
                logger.warning("log store: cannot read %s: %s", path, exc)
            for batch in batches:
                if isinstance(batch, DamageAt):
                    if batch.why == "corrupt":
                        inst.on_damage(path, batch.offset, batch.length)
                    # One marker for adjacent pieces; a file that got shorter explains the whole of it.
                    why = batch.why if pending is None or batch.why == "truncated" else pending.why
                    pending = Damaged(container, (pending.length if pending else 0) + batch.length, why)
                    continue
                head = batch[0] if isinstance(batch, tuple) else batch.head
                if seen is not None and head.index_before < seen:
                    # Lines this log already had (a segment copied over another): never served twice.
                    pending = Damaged(container, (pending.length if pending else 0) + head.total_len,
                                      pending.why if pending else "out-of-order")
                    continue
                if pending is not None:
                    behind = seen if seen is not None else start_index
                    yield Damaged(container, pending.length, pending.why, max(0, head.index_before - behind))
                    pending = None
                    first = False  # lines before the damage were lost to it, not to retention
                if first:
                    first = False
                    if head.index_before > start_index:
                        yield RetentionCut(container, head.index_before - start_index)
                seen = head.index_after
                if isinstance(batch, LargeAt):
                    large = _large_item(container, str(path), batch, start_index=start_index,
                                        since_ns=since_ns)
                    if large is not None:
                        yield large
                    continue
                item = _item(container, head, batch[1], start_index=start_index, since_ns=since_ns)
                if item is not None:
                    yield item
            continue
        # The writer's own segment is the newest: no directory listing per wake-up while on it.
        on_active = inst.active_seq == seq and not inst.finished
        later = [] if on_active else [s for s in inst.segment_seqs() if s > seq]
        if later:
            seq = later[0]
            offset = await read_pool.run(data_start, inst, seq)
            continue
        if pending is not None:
            yield pending
            pending = None
        if inst.ended is not None:
            if first and inst.index > start_index:
                yield RetentionCut(container, inst.index - start_index)
            if inst.active_seq is None or inst.committed_size(inst.active_seq) is None:
                yield inst.ended  # its segments are gone, but the end is known
            return
        if not follow or inst.superseded or (stop is not None and stop.is_set()):
            return
        if idle_marks:
            yield IDLE
        if stop is None:
            await changed.wait()
        else:
            await changed.wait(stop)
        # A busy log wakes its followers at every batch: gather a few batches per read, so that a
        # hundred followers cost the loop tens of wake-ups a second each, not thousands.
        if stop is None or not stop.is_set():
            await asyncio.sleep(FOLLOW_COALESCE_S)


#: Chunk reads in flight, by (loop, path, offset, limit), with the readers waiting for each:
#: readers woken by the same batch ask for the same bytes at once, and one read, check and decode
#: serves them all.
_IN_FLIGHT: dict[tuple[object, str, int, int], list[asyncio.Future[tuple[Batches, int] | None]]] = {}


async def _shared_chunk(inst: Instance, seq: int, path: Path, offset: int, limit: int) -> tuple[Batches, int]:
    """`_framed_chunk` in the read pool, shared with the readers that ask for the same bytes meanwhile.

    Only reads in flight are shared, never a finished one, so a reader never gets bytes older
    than its own request. The first asker's task does the read (and is charged for it); if it
    is cancelled, the others read for themselves.
    """
    loop = asyncio.get_running_loop()
    key = (loop, str(path), offset, limit)
    while (waiting := _IN_FLIGHT.get(key)) is not None:
        mine: asyncio.Future[tuple[Batches, int] | None] = loop.create_future()
        waiting.append(mine)
        result = await mine
        if result is not None:
            return result
    waiting = _IN_FLIGHT[key] = []
    try:
        result = await read_pool.run(_framed_chunk, inst, seq, path, offset, limit)
    except asyncio.CancelledError:
        del _IN_FLIGHT[key]
        _settle_all(waiting, None)  # the others read for themselves
        raise
    except BaseException as exc:
        del _IN_FLIGHT[key]
        _settle_all(waiting, exc)
        raise
    del _IN_FLIGHT[key]
    _settle_all(waiting, result)
    return result


def _settle_all(waiting: list[asyncio.Future[tuple[Batches, int] | None]],
                outcome: tuple[Batches, int] | BaseException | None) -> None:
    for w in waiting:
        if w.done():
            continue  # its reader went away
        if isinstance(outcome, BaseException):
            w.set_exception(outcome)
        else:
            w.set_result(outcome)


def _framed_chunk(inst: Instance, seq: int, path: Path, offset: int, limit: int) -> tuple[Batches, int]:
    """`read_chunk` with the segment's framing, lines decoded, in one worker-thread hop."""
    batches, end = read_chunk(path, inst.framing(seq), offset, limit)
    return [_decoded(b) for b in batches], end


def _decoded(batch: DamageAt | LargeAt | tuple[segments.BatchHeader, bytes | segments.AnyLinesPayload]
             ) -> DamageAt | LargeAt | tuple[segments.BatchHeader, bytes | segments.AnyLinesPayload]:
    if isinstance(batch, tuple) and batch[0].kind.has_lines and isinstance(batch[1], bytes):
        return batch[0], segments.decode_lines(batch[0], batch[1])
    return batch


def _large_item(container: str, path: str, at: LargeAt, *, start_index: int,
                since_ns: int | None) -> LargeLinesBlock | None:
    head = at.head
    if head.index_after <= start_index:
        return None
    if since_ns is not None and head.last_ts < since_ns:
        return None
    start = max(0, start_index - head.index_before)
    return LargeLinesBlock(container, head.index_before + start, start, path, at.offset, head,
                           since_ns if since_ns is not None and head.first_ts < since_ns else None)


def _item(
    container: str,
    head: segments.BatchHeader,
    payload: bytes | segments.AnyLinesPayload,
    *,
    start_index: int,
    since_ns: int | None,
) -> LogItem | None:
    if head.kind.has_lines:
        if head.index_after <= start_index:
            return None
        if since_ns is not None and head.last_ts < since_ns:
            return None
        lines = segments.decode_lines(head, payload) if isinstance(payload, bytes) else payload
        start = max(0, start_index - head.index_before)
        if since_ns is not None and head.first_ts < since_ns:
            start = max(start, bisect.bisect_left(lines.stamps(), since_ns))
        return LinesBlock(container, head.index_before + start, start, lines)
    if head.index_after < start_index:
        return None
    if not isinstance(payload, bytes):
        return None  # (a lines payload is decoded only for a lines batch)
    data = segments.decode_event(payload)
    if head.kind is segments.BatchKind.DAMAGE:
        return Damaged(container, int(data.get("bytes", 0)), str(data.get("why", "corrupt")))
    if head.kind is segments.BatchKind.GAP:
        if since_ns is not None and head.last_ts != segments.NO_TS and head.last_ts < since_ns:
            return None
        try:
            reason = GapReason(str(data.get("reason")))
        except ValueError:
            reason = GapReason.ROTATION
        return GapMarker(
            container, reason, data.get("after_ts_ns"), data.get("before_ts_ns"), str(data.get("detail", ""))
        )
    return end_from_event(container, data)


async def read_lines(
    inst: Instance, *, since_ns: int | None = None, tail: int | None = None
) -> list[LogLine | GapMarker | LogEnd]:
    """Everything stored, one item per line, without following (for tests and small logs)."""
    out: list[LogLine | GapMarker | LogEnd] = []
    async for item in read(inst, since_ns=since_ns, tail=tail):
        if isinstance(item, LinesBlock):
            out.extend(item.lines())
        elif isinstance(item, LargeLinesBlock):
            out.extend(await read_large_lines(item, None))
        elif isinstance(item, RetentionCut | Damaged | Idle):
            continue
        else:
            out.append(item)
    return out
