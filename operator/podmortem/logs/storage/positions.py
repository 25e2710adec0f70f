"""Where a read of a stored log starts: the first batch of its last N lines, or of a time.

``tail`` walks batch trailers backwards from the end of the log and never reads what it will
not serve; ``since`` skips whole segments by their first line's time.
"""

from __future__ import annotations

import os

from podmortem.files import open_nofollow
from podmortem.logs.storage import segments
from podmortem.logs.storage.chunks import Window, intact_at, next_intact
from podmortem.logs.storage.instance import Instance


def data_start(inst: Instance, seq: int) -> int:
    """Where segment ``seq``'s first batch is (0 if its framing cannot be told: all of it is damage)."""
    framing = inst.framing(seq)
    return framing.data_start if framing is not None else 0


def first_header(inst: Instance, seq: int) -> segments.BatchHeader | None:
    framing = inst.framing(seq)
    if framing is None:
        return None
    try:
        fd = open_nofollow(inst.segment_path(seq), os.O_RDONLY)
    except OSError:
        return None
    try:
        return framing.read_first_header(fd, os.fstat(fd).st_size)
    except segments.BadBatch:
        return None  # damaged: its first time is unknown, so start earlier
    finally:
        os.close(fd)


def tail_start(inst: Instance, seqs: list[int], tail: int) -> tuple[int, int]:
    """Walk trailers backwards until ``tail`` lines are behind us: the (segment, offset) to read from."""
    need = tail
    pos = (seqs[0], data_start(inst, seqs[0])) if seqs else (0, 0)
    for seq in reversed(seqs):
        size = inst.committed_size(seq)
        framing = inst.framing(seq)
        if size is None:
            continue
        try:
            fd = open_nofollow(inst.segment_path(seq), os.O_RDONLY)
        except OSError:
            continue
        try:
            if framing is None:
                batches = []
            else:
                try:
                    batches = line_batches_backwards(fd, framing, size)
                except segments.BadBatch:
                    # damage: trailers cannot be walked past it
                    batches = line_batches_scanned(fd, framing, min(size, os.fstat(fd).st_size))
            for n_lines, end in batches:
                if need <= 0:
                    return seq, end  # this batch holds only lines before the tail
                need -= n_lines
            pos = (seq, framing.data_start if framing is not None else 0)
        finally:
            os.close(fd)
    return pos


def line_batches_backwards(fd: int, framing: segments.Framing, size: int) -> list[tuple[int, int]]:
    """(lines, end offset) of a segment's line batches, last first, by walking the trailers."""
    out = []
    end = size
    while end > framing.data_start:
        found = framing.read_last_header(fd, end)
        if found is None:
            break
        head, start = found
        if head.kind.has_lines:
            out.append((head.n_lines, end))
        end = start
    return out


def line_batches_scanned(fd: int, framing: segments.Framing, size: int) -> list[tuple[int, int]]:
    """`line_batches_backwards` for a damaged segment: a forward walk that resynchronises."""
    win = Window(fd, 0, b"")
    out = []
    pos = framing.data_start
    while pos < size:
        head = intact_at(win, framing, pos, size)
        if head is None:
            found = next_intact(win, framing, pos + 1, size)
            if found is None:
                break
            pos = found
            continue
        pos += head.total_len
        if head.kind.has_lines:
            out.append((head.n_lines, pos))
    out.reverse()
    return out


def since_segment(inst: Instance, seqs: list[int], since_ns: int) -> int:
    """The last segment whose first line is not after ``since_ns`` (lines before it are older)."""
    chosen = 0
    for i, seq in enumerate(seqs):
        head = first_header(inst, seq)
        if head is None or not head.kind.has_lines:
            continue  # starts with a marker: its first line's time is unknown; start earlier
        if head.first_ts > since_ns:
            break
        chosen = i
    return chosen
