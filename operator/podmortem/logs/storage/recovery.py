"""Opening a stored instance after a crash: cut a torn tail, set damaged bytes aside, mark where.

On open the last segment is scanned and cut at the first torn batch, and the cursor is read from
the last intact one (it is written *in* the data: each batch header carries the cursor handed
over with it, plus a CRC). So after a kill at any point, the reopened cursor covers exactly the
lines on disk. Damage never deletes what can be read: damaged bytes are copied into a quarantine
file next to their segment, and a damage marker is appended where bytes were cut.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from podmortem import files
from podmortem.files import open_nofollow, read_nofollow
from podmortem.logs.events import EndReason, LogEnd
from podmortem.logs.storage import quarantine, retention, segments, writing
from podmortem.logs.storage.instance import DamageSink, Instance

logger = logging.getLogger(__name__)


def load_instances(cdir: Path, *, container: str, writable: bool,
                    on_damage: DamageSink | None = None) -> list[Instance]:
    """Every stored instance of a container directory, oldest first (blocking file I/O)."""
    insts: list[Instance] = []
    if files.is_real_dir(cdir):
        for d in sorted(cdir.iterdir()):
            if not d.name.isdigit() or not files.is_real_dir(d):
                continue  # a symbolic link is never followed out of the store
            if not (d / retention.INSTANCE_META).exists():
                continue  # a creation interrupted before its meta landed: never written to
            insts.append(load_instance(d, container=container, writable=writable, on_damage=on_damage))
        for older in insts[:-1]:
            older.superseded = True
    return insts


def load_instance(
    path: Path, *, container: str, writable: bool, on_damage: DamageSink | None = None
) -> Instance:
    """Open an instance directory; repair the end of its last segment (crash recovery).

    Damage never deletes what can be read: damaged bytes are copied into a quarantine file
    next to their segment; damage inside a segment stays where it is (readers resynchronise
    past it and mark it); damage at the end (a torn write, or corruption there) is cut, and a
    damage marker is appended where it was, so readers see where bytes went missing.
    """
    meta = retention.read_instance_meta(path)
    inst = Instance(path=path, container=container, seq=int(path.name), container_id=meta.get("container_id"),
                    sync=retention.meta_sync(meta), on_damage=on_damage)
    if writable and inst.sync is None:
        # Made before format 2: its next segments get a marker, kept in the meta like a new instance's.
        inst.sync = os.urandom(segments.SYNC_SIZE)
        files.write_json_atomic(path / retention.INSTANCE_META, {**meta, "sync": inst.sync.hex()})
    seqs = inst.segment_seqs()
    result: segments.ScanResult | None = None
    removed_seq = 0
    cut: list[segments.Damage] = []
    quarantined: list[str] = []
    linked = False  # a newer "segment" was a link: writes go after it, never before it
    while seqs:
        seg = inst.segment_path(seqs[-1])
        try:
            data = read_nofollow(seg)
        except FileNotFoundError:
            seqs.pop()
            continue
        except OSError as exc:  # a link planted in the store (ELOOP): never read, never repaired
            logger.warning("log store: %s is not a file of the store (%s); skipped", seg, exc)
            seqs.pop()
            linked = True
            continue
        found = segments.scan(data, inst.sync)
        if found.framing is not None:
            inst.known_framing(seqs[-1], found.framing)
        for damage in found.damage:
            inst.damage_found.append((seg, damage))
            logger.warning("log store: %s: %d bytes at offset %d are no intact batch (%s)%s",
                           seg, damage.length, damage.offset, damage.why,
                           "; set aside in the quarantine file" if writable else "")
        if writable and found.damage:
            pieces = [(d, data[d.offset:d.offset + d.length]) for d in found.damage]
            quarantined.append(quarantine.set_aside(seg, pieces))
        tail = found.tail
        if tail is not None and writable:
            cut.append(tail)
            if found.last is None:
                seg.unlink(missing_ok=True)  # missing: a second load of the same instance got there first
            else:
                os.truncate(seg, found.valid_len)
        if found.last is None and (writable or not found.damage):
            removed_seq = seqs.pop()
            continue
        result = found
        inst.active_seq = seqs[-1]
        # A read-only store repairs nothing: its readers read up to the file's end and mark the damage.
        inst.active_size = found.valid_len if writable else len(data)
        break
    last = result.last if result is not None else None
    if last is not None and result is not None:
        inst.index = last.index_after
        inst.cursor = segments.CursorFields(last.cursor_last_ts, last.cursor_count, last.cursor_delivered,
                                            last.cursor_line_crc)
        content = result.last_content
        if content is not None and content.kind is segments.BatchKind.END:
            inst.ended = end_from_event(container, segments.decode_event(
                read_at(inst.segment_path(inst.active_seq or 0), result.last_content_at, content)
            ))
        if result.framing is not None and result.framing.version == 2 and result.framing.sync == inst.sync:
            inst.writing = None if linked else result.framing  # appends go on in this segment
    else:
        with contextlib.suppress(FileNotFoundError):
            tomb = json.loads((path / retention.TOMBSTONE).read_text())
            inst.index = int(tomb["index"])
            crc = tomb.get("line_crc")
            inst.cursor = segments.CursorFields(
                int(tomb["last_ts"]), int(tomb["count"]), int(tomb["delivered"]),
                None if crc is None else int(crc),
            )
            if tomb.get("ended"):
                inst.ended = LogEnd(container, inst.container_id, EndReason.STOPPED)
    if cut and writable:
        append_damage_marker(inst, cut, quarantined, removed_seq)
    return inst


def append_damage_marker(
    inst: Instance, cut: list[segments.Damage], quarantined: list[str], removed_seq: int
) -> None:
    """Record, where the cut bytes were, that they were cut: a marker batch with the last cursor."""
    seq = inst.active_seq if inst.active_seq is not None else removed_seq
    seg = inst.segment_path(seq)
    why = "corrupt" if any(d.why == "corrupt" for d in cut) else "torn"
    data = {"bytes": sum(d.length for d in cut), "why": why, "quarantine": sorted(set(quarantined))}
    fd = open_nofollow(seg, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        empty = os.fstat(fd).st_size == 0
        framing = inst.instance_framing() if empty else inst.framing(seq)
        if framing is None:  # the segment's framing cannot be told: mark in a new segment
            os.close(fd)
            seq += 1
            seg = inst.segment_path(seq)
            fd = open_nofollow(seg, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            empty, framing = True, inst.instance_framing()
        batch = framing.encode_event(segments.BatchKind.DAMAGE, data, first_ts=segments.NO_TS,
                                     last_ts=segments.NO_TS, index=inst.index, cursor=inst.cursor)
        writing.write_all(fd, framing.file_header() + batch if empty else batch)
        os.fsync(fd)
        inst.known_framing(seq, framing)
        inst.active_seq = seq
        inst.active_size = os.fstat(fd).st_size
        if framing.version == 2 and framing.sync == inst.sync:
            inst.writing = framing
    finally:
        os.close(fd)


def read_at(seg: Path, offset: int, head: segments.BatchHeader) -> bytes:
    fd = open_nofollow(seg, os.O_RDONLY)
    try:
        return os.pread(fd, head.payload_len, offset + head.header_size)
    finally:
        os.close(fd)


def end_from_event(container: str, data: dict[str, Any]) -> LogEnd:
    """The ``LogEnd`` an end batch's JSON payload stands for."""
    try:
        reason = EndReason(str(data.get("reason")))
    except ValueError:
        reason = EndReason.STOPPED
    return LogEnd(container, data.get("container_id"), reason)
