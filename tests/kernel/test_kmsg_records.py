"""The node agent hands the OOM parser each ``/dev/kmsg`` record as its reader parsed it: the record's
sequence number and time are used as they are, never printed into text and read back."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from podmortem.kernel import kmsg, oom_parser
from podmortem.kernel.kmsg import KmsgRecord

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"
KMSG_FILES = sorted(RECORDS.glob("*kmsg*.log"))


def _records(path: Path) -> list[KmsgRecord]:
    out = []
    for line in path.read_bytes().splitlines():
        record = kmsg.parse_record(line)
        assert record is not None, line
        out.append(record)
    return out


@pytest.mark.parametrize("path", KMSG_FILES, ids=lambda p: p.name)
def test_records_read_as_their_text_reads(path: Path) -> None:
    """The real kmsg captures give the same OOM records whether fed as records or as their text."""
    assert KMSG_FILES
    text = oom_parser.OomParser()
    for line in path.read_text().splitlines():
        text.feed(line)
    expected = [r.model_dump() for r in text.finish()]
    got = oom_parser.parse_records(_records(path))
    assert expected and [r.model_dump() for r in got] == expected
    assert got[0].kmsg_seq == _records(path)[0].seq


def _record(seq: int, message: str) -> KmsgRecord:
    return KmsgRecord(seq=seq, level=4, facility=0, usec=1_000_000 + seq, flags="-", message=message)


def test_a_record_s_escaped_newlines_continue_it_and_a_gap_in_the_numbers_is_told() -> None:
    path = next(p for p in KMSG_FILES if "fork-cow" in p.name)
    records = _records(path)
    # The memory.stat lines in one record, escaped newlines between them (as some kernels print it).
    first = next(i for i, r in enumerate(records) if r.message.startswith("Memory cgroup stats for"))
    end = next(i for i, r in enumerate(records) if r.message.startswith("Tasks state"))
    stats = records[first + 1:end]
    joined = _record(stats[0].seq, "\\x0a".join(r.message for r in stats))
    # One record takes one sequence number: the records after it are numbered on without a gap.
    after = [dataclasses.replace(r, seq=r.seq - len(stats) + 1) for r in records[end:]]
    [whole] = oom_parser.parse_records([*records[:first + 1], joined, *after])
    [original] = oom_parser.parse_records(records)
    assert original.cgroup_stats and whole.cgroup_stats == original.cgroup_stats
    assert whole.missing == original.missing
    # Two records the ring buffer overwrote before the kill line: the record says what it lacks.
    [cut] = oom_parser.parse_records(records[:first + 3] + records[first + 5:])
    assert "kmsg-gap" in cut.missing and "kmsg-gap" not in original.missing
