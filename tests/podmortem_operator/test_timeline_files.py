"""Filing a report's timeline next to the job's logs: where, of which pod, and never failing the report."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from podmortem.diagnosis.termination import Termination
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.operator.reporting import timeline_files
from podmortem.reports import stored_timeline
from podmortem.reports.document import ReportDocument
from podmortem.reports.memory import MemorySample, ProcessMemory

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
MIB = 2**20
REPORT = ReportDocument.parse(
    {"pod": {"namespace": "ns", "name": "p", "uid": "u1", "finishedAt": "2026-05-01T12:01:00Z"}}
)
SAMPLES = [
    MemorySample(at=T0 + timedelta(seconds=10 * i), usage_bytes=(100 + i) * MIB, limit_bytes=200 * MIB,
                 processes=[ProcessMemory(pid=3, name="python3", pss_bytes=90 * MIB),
                            ProcessMemory(pid=8, name="python3", pss_bytes=5 * MIB)])
    for i in range(6)
]


def term(finished: datetime | None, uid: str = "u1") -> Termination:
    return Termination(namespace="ns", pod="p", pod_uid=uid, node="n", container="c", container_id=None,
                       exit_code=137, reason="OOMKilled", pod_reason=None, pod_message=None,
                       started_at=T0, finished_at=finished, deleting=False)


@pytest.fixture
async def log_store(tmp_path: Path) -> AsyncIterator[LogStore]:
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None)) as opened:
        yield opened


async def test_filed_in_the_pods_directory_naming_the_pod(tmp_path: Path, log_store: LogStore) -> None:
    job_dir = tmp_path / "ns" / "job" / "p"
    assert not await timeline_files.save(log_store, namespace="ns", job="job", pod="p", report=REPORT,
                                          samples=SAMPLES)
    assert not job_dir.exists()  # no log of the pod in the store: nothing would ever delete the files
    job_dir.mkdir(parents=True)
    restart = T0 + timedelta(seconds=25)
    assert await timeline_files.save(
        log_store, namespace="ns", job="job", pod="p", report=REPORT, samples=SAMPLES, restarts=[restart]
    )
    doc = json.loads((job_dir / stored_timeline.JSON_NAME).read_text())
    assert doc["pod"] == {"namespace": "ns", "name": "p", "uid": "u1"} and doc["samples"] == 6
    assert timeline_files.load(log_store, namespace="ns", job="job", pod="p") == doc
    assert timeline_files.load(log_store, namespace="ns", job="job", pod="other-pod") is None
    assert timeline_files.belongs_to(doc, REPORT)
    new_pod = ReportDocument.parse({"pod": {"name": "p", "uid": "u2"}})  # a new pod, same name
    assert not timeline_files.belongs_to(doc, new_pod)
    svg = (job_dir / stored_timeline.SVG_NAME).read_text()
    assert 'data-process="trainer"' in svg and 'data-process="workers"' in svg and 'class="restart"' in svg


async def test_a_failed_write_is_logged_not_raised(
    tmp_path: Path, log_store: LogStore, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "ns" / "job" / "p" / stored_timeline.JSON_NAME).mkdir(parents=True)  # in the way
    with caplog.at_level(logging.WARNING):
        assert not await timeline_files.save(
            log_store, namespace="ns", job="job", pod="p", report=REPORT, samples=SAMPLES
        )
    assert "filing the report timeline of ns/job (pod p) failed" in caplog.text
    assert not await timeline_files.save(log_store, namespace="ns", job="../x", pod="p", report=REPORT,
                                          samples=[])


def test_restarts_are_the_same_pods_earlier_ends() -> None:
    now = term(T0 + timedelta(minutes=5))
    earlier = [term(T0 + timedelta(minutes=1)), term(T0 + timedelta(minutes=2), uid="other"), term(None), now]
    assert timeline_files.restarts_of(now, earlier) == [T0 + timedelta(minutes=1)]


async def test_never_written_or_read_through_a_link_in_the_store(tmp_path: Path, log_store: LogStore) -> None:
    """A pod directory linked elsewhere (another namespace's, outside the store) is not the pod's."""
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    (tmp_path / "ns" / "job").mkdir(parents=True)
    (tmp_path / "ns" / "job" / "p").symlink_to(elsewhere)
    assert not await timeline_files.save(log_store, namespace="ns", job="job", pod="p", report=REPORT,
                                          samples=SAMPLES)
    assert list(elsewhere.iterdir()) == []
    (elsewhere / stored_timeline.JSON_NAME).write_text(json.dumps({"pod": REPORT.pod_json()}))
    assert timeline_files.load(log_store, namespace="ns", job="job", pod="p") is None
    # A planted file link inside the real directory is not read either.
    real = tmp_path / "ns" / "job2" / "p"
    real.mkdir(parents=True)
    (real / stored_timeline.SVG_NAME).symlink_to(elsewhere / stored_timeline.JSON_NAME)
    svg = stored_timeline.SVG_NAME
    assert timeline_files.read(log_store, namespace="ns", job="job2", pod="p", name=svg) is None
