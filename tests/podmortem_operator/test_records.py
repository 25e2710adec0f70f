"""The per-pod and per-job records: one forget per pod and per job, whichever way it goes, and every
hook called by it; a finished pod expires only past the retention and once nothing of it is written."""

from __future__ import annotations

from podmortem.operator.records import JobRecord, Reason, Records


def _recording(records: Records) -> tuple[list[tuple[str, Reason]], list[JobRecord]]:
    pods: list[tuple[str, Reason]] = []
    jobs: list[JobRecord] = []
    records.on_forget_pod(lambda uid, reason: pods.append((uid, reason)))
    records.on_forget_job(jobs.append)
    return pods, jobs


def test_a_deleted_pod_goes_with_its_record_and_every_hook_hears_it() -> None:
    records = Records()
    pods, _ = _recording(records)
    second: list[str] = []
    records.on_forget_pod(lambda uid, _reason: second.append(uid))
    record = records.pod("u1", namespace="ns", name="p")
    assert (record.namespace, record.name) == ("ns", "p")
    records.note_reported("u1", "u1/trainer/cid")
    assert records.reported("u1", "u1/trainer/cid") and not records.reported("u1", "other")
    records.forget_pod("u1")
    assert records.pods == {} and pods == [("u1", "deleted")] and second == ["u1"]
    assert not records.reported("u1", "u1/trainer/cid")
    records.note_reported("u1", "late")  # a report that ends after its pod was forgotten keeps nothing
    assert records.pods == {}


def test_a_pod_never_recorded_is_still_forgotten_by_every_hook() -> None:
    """A pod first seen deleted (a relist's tombstone) may have state from its own last event's report."""
    records = Records()
    pods, _ = _recording(records)
    records.forget_pod("never")
    assert pods == [("never", "deleted")]


def test_a_finished_pod_expires_past_the_retention_once_ready_and_not_when_running_again() -> None:
    records = Records()
    pods, _ = _recording(records)
    for uid in ("done", "busy", "again", "running"):
        records.pod(uid, namespace="ns", name=uid)
    records.note_phase("done", finished=True, now=100.0)
    records.note_phase("done", finished=True, now=150.0)  # the first time counts
    records.note_phase("busy", finished=True, now=100.0)
    records.note_phase("again", finished=True, now=100.0)
    records.note_phase("again", finished=False, now=120.0)  # restarted: not finished for good
    records.note_phase("unknown", finished=True, now=100.0)  # no record: nothing made

    assert records.expire_finished(now=159.0, retention_s=60.0, ready=lambda uid: True) == 0
    assert records.expire_finished(now=160.0, retention_s=60.0, ready=lambda uid: uid != "busy") == 1
    assert pods == [("done", "expired")]
    assert set(records.pods) == {"busy", "again", "running"}
    assert records.expire_finished(now=161.0, retention_s=60.0, ready=lambda uid: True) == 1
    assert pods[-1] == ("busy", "expired") and set(records.pods) == {"again", "running"}


def test_a_job_goes_with_its_record_and_its_parents() -> None:
    records = Records()
    _, jobs = _recording(records)
    record = records.job("j", namespace="ns", name="old-name")
    record.parents = ("set",)
    record.role = "foreign"
    assert records.job("j", namespace="ns", name="name") is record and record.name == "name"
    assert records.parents_of("j") == ("set",) and records.parents_of("other") == ()
    records.forget_job("j")
    assert records.jobs == {} and records.parents_of("j") == ()
    assert [(j.uid, j.name, j.role) for j in jobs] == [("j", "name", "foreign")]
    records.forget_job("unknown")  # its hooks still run: a job's state may exist without its record
    assert jobs[-1].uid == "unknown"
