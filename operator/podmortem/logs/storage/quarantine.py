"""Damaged bytes of a log segment, set aside in ``<segment>.quarantine`` rather than deleted.

The store never serves damaged bytes as lines and never deletes them: a load (for the newest
segment) or a reader (for older ones) copies each damaged range here once, with where it was
and why (``corrupt``, or ``torn`` for a write a crash interrupted), for a person or a later tool
to look at. Retention deletes the file with its segment. Blocking file I/O: call off the loop.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from podmortem.logs.storage import retention, segments

logger = logging.getLogger(__name__)


def set_aside(seg: Path, pieces: Sequence[tuple[segments.Damage, bytes]]) -> str:
    """Copy damaged byte ranges into ``<segment>.quarantine`` (each once); its file name.

    Each range is a line ``PMQUAR1 {"offset": .., "length": .., "why": ..}`` and then its bytes
    and a newline: what was there, for a person (or a later tool) to look at.
    """
    path = seg.with_name(seg.name + retention.QUARANTINE_SUFFIX)
    done = {(r["offset"], r["length"]) for r in records(path)}
    with open(path, "ab") as f:
        for d, data in pieces:
            if (d.offset, d.length) in done:
                continue
            head = json.dumps({"offset": d.offset, "length": d.length, "why": d.why}, sort_keys=True)
            f.write(b"PMQUAR1 " + head.encode() + b"\n" + data + b"\n")
        f.flush()
        os.fsync(f.fileno())
    return path.name


def set_aside_range(seg: Path, offset: int, length: int) -> None:
    """Set aside one damaged range a reader met (blocking; a vanished segment is no error)."""
    try:
        with open(seg, "rb") as f:
            f.seek(offset)
            data = f.read(length)
    except FileNotFoundError:
        return
    try:
        set_aside(seg, [(segments.Damage(offset, len(data), "corrupt"), data)])
    except OSError as exc:
        logger.warning("log store: cannot set aside damaged bytes of %s: %s", seg, exc)


def records(path: Path) -> list[dict[str, Any]]:
    """The ranges a quarantine file holds (their headers; the bytes follow each)."""
    out: list[dict[str, Any]] = []
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return out
    pos = 0
    while data.startswith(b"PMQUAR1 ", pos):
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        try:
            record = json.loads(data[pos + 8:nl])
            pos = nl + 1 + int(record["length"]) + 1
        except (ValueError, KeyError, TypeError):
            break
        out.append(record)
    return out
