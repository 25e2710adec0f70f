"""Placed kernel records on disk: round trip, and a bad file is a fresh start, never an error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podmortem.agent import record_store
from podmortem.kernel.oom_parser import parse_text

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"


def _records() -> tuple[record_store.OomKillRecord, ...]:
    return tuple(parse_text((RECORDS / "01-k3s-v1-dmesgT-stress-4.15.log").read_text()))


def test_records_round_trip_exactly(tmp_path: Path) -> None:
    path = tmp_path / "state" / "kernel-records.json"
    records = _records()
    assert records
    pods = [
        record_store.PodRecords(uid="u1", namespace="ml", name="train-0", records=records),
        record_store.PodRecords(uid="u2", namespace="ml", name="empty", records=()),  # not written
    ]
    record_store.save(path, pods)
    assert record_store.load(path) == pods[:1]
    assert [p.name for p in path.parent.iterdir()] == ["kernel-records.json"]  # no temporary left


@pytest.mark.parametrize(
    "content",
    ["", "not json", "[]", json.dumps({"version": 99, "pods": []}), json.dumps({"version": 1, "pods": {}})],
)
def test_an_unusable_file_is_a_fresh_start(tmp_path: Path, content: str) -> None:
    path = tmp_path / "kernel-records.json"
    path.write_text(content)
    assert record_store.load(path) == []
    assert record_store.load(tmp_path / "missing.json") == []


def test_an_unreadable_entry_is_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    path = tmp_path / "kernel-records.json"
    good = record_store.PodRecords(uid="u1", namespace="ml", name="a", records=_records())
    record_store.save(path, [good])
    data = json.loads(path.read_text())
    data["pods"].insert(0, {"uid": "bad", "records": [{"kmsg_seq": "not a number"}]})
    data["pods"].insert(0, {"namespace": "no uid"})
    path.write_text(json.dumps(data))
    assert record_store.load(path) == [good]
