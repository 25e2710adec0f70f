"""/dev/kmsg records: parsing one read, resuming from a sequence number, counting overwritten records."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from podmortem.kernel import kmsg


def test_parse_record_drops_dictionary_lines() -> None:
    record = kmsg.parse_record(
        b"3,417,173238453,-;Memory cgroup out of memory: Killed process 2466 (python)\n SUBSYSTEM=memory\n"
    )
    assert record is not None
    assert (record.seq, record.level, record.facility, record.usec) == (417, 3, 0, 173238453)
    assert record.message == "Memory cgroup out of memory: Killed process 2466 (python)"
    assert record.flags == "-"


@pytest.mark.parametrize("raw", [b"", b"garbage", b"a,b,c;x", b"1,2;x", b"\xff\xfe;"])
def test_parse_record_rejects_malformed(raw: bytes) -> None:
    assert kmsg.parse_record(raw) is None


def _fake_device(monkeypatch: pytest.MonkeyPatch, reads: list[bytes | OSError]) -> None:
    feed: Iterator[bytes | OSError] = iter(reads)

    def fake_read(fd: int, size: int) -> bytes:
        item = next(feed, BlockingIOError(errno.EAGAIN, "caught up"))
        if isinstance(item, OSError):
            raise item
        return item

    monkeypatch.setattr(kmsg.os, "read", fake_read)


def test_resume_skips_seen_records_and_counts_overwritten(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_device(
        monkeypatch,
        [
            b"6,5,100,-;old, already handled\n",
            b"6,10,200,-;first new\n",
            OSError(errno.EPIPE, "overwritten"),
            b"6,14,300,-;after a gap of three\n",
        ],
    )
    with kmsg.KmsgReader(path=Path("/dev/null"), from_seq=10) as reader:
        got = [r.seq for r in reader.records()]
    assert got == [10, 14]
    assert reader.lost == 3 and reader.next_seq == 15


def test_buffer_already_past_the_resume_point_counts_the_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_device(monkeypatch, [b"6,50,100,-;oldest still in the ring\n"])
    with kmsg.KmsgReader(path=Path("/dev/null"), from_seq=20) as reader:
        assert [r.seq for r in reader.records()] == [50]
    assert reader.lost == 30


def test_unreadable_device_says_why(tmp_path: Path) -> None:
    with pytest.raises(kmsg.KmsgUnavailable, match="cannot open"):
        kmsg.KmsgReader(path=tmp_path / "nope").open()


@pytest.mark.kernel
def test_real_dev_kmsg_reads_in_sequence() -> None:
    try:
        reader = kmsg.KmsgReader(from_seq=0).open()
    except kmsg.KmsgUnavailable as exc:
        pytest.skip(f"needs a readable /dev/kmsg: {exc}")
    with reader:
        records = list(reader.records())
    assert records, "the kernel log is never empty after boot"
    seqs = [r.seq for r in records]
    assert seqs == sorted(seqs) and reader.next_seq == seqs[-1] + 1
    assert reader.lost >= seqs[0]  # whatever the ring already dropped since boot
