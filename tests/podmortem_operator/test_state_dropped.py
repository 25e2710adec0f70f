"""What the operator keeps of a pod or a job goes when it is deleted: nothing grows with uptime.

The real operator runs against the emulated cluster: an annotated bare pod and a watched Job's pod
are OOM-killed and reported, then deleted. The bare pod's reports, reported keys, follower, early
warning and index entries go with it; a Job's pod's report stays while its Job's page and section
show it, and goes with the Job.
"""

from __future__ import annotations

import time
from typing import Any

from podmortem_demo.harness import Harness, kill, run_pod

from .test_operator_e2e import evidence_for

RECORD = "02-k8s-v1-syslog-kmem-runc-el7.log"


def _held(h: Harness, uid: str) -> dict[str, Any]:
    running = h.running[0]
    service, reporter = running.service, running.service.reporter

    def read() -> dict[str, Any]:
        return {
            "reported": uid in service.records.pods and bool(service.records.pods[uid].reported),
            "report": uid in reporter.by_pod,
            "index": uid in service.targets.pods,
            "early_warning": uid in service.early_warning.projections
            or any(key[0] == uid for key in service.early_warning._epoch_times),
            "kept": reporter.kept(),
            "facts": service.following is not None and service.following.facts(uid) is not None,
        }

    return h.sync(read)


def _report_of(h: Harness, uid: str) -> bool:
    return bool(h.sync(lambda: uid in h.running[0].service.reporter.by_pod))


def test_a_deleted_pod_and_job_take_their_state_with_them(agent_cluster: Harness) -> None:
    h = agent_cluster
    h.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bare", "namespace": "default", "annotations": {"podmortem.io/watch": "true"}},
        "spec": {"containers": [{"name": "trainer", "image": "x"}]},
    })
    bare = run_pod(h, name="bare")
    job = h.create("/apis/batch/v1/namespaces/default/jobs", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "gone", "namespace": "default", "annotations": {"podmortem.io/watch": "true"}},
        "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}},
    })
    h.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "gone-abcde", "namespace": "default", "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": "gone", "uid": job["metadata"]["uid"],
            "controller": True}]},
        "spec": {"containers": [{"name": "trainer", "image": "x"}]},
    })
    owned = run_pod(h, name="gone-abcde")
    for uid in (bare, owned):
        h.sync(lambda uid=uid: h.agent.evidence.__setitem__(uid, evidence_for(uid, RECORD)))  # type: ignore[misc]
    kill(h, name="bare")
    kill(h, name="gone-abcde")
    h.wait(lambda: (_held(h, bare)["reported"] and _held(h, owned)["reported"]) or None, what="both reports")
    assert _report_of(h, bare) and _report_of(h, owned)
    before = _held(h, bare)["kept"]
    assert before["pods"] >= 2 and before["latest"] >= 2

    locks = h.sync(lambda: dict(h.running[0].service.reporter.reports.target_locks))
    assert bare in locks  # a bare pod is its own target: its annotation writes take its lock
    h.delete("/api/v1/namespaces/default/pods/bare")
    h.wait(lambda: not _report_of(h, bare) or None, what="the bare pod's report dropped")
    assert h.sync(lambda: bare not in h.running[0].service.reporter.reports.target_locks)
    # Its follower ends a moment after the deletion is seen: what it learned goes then.
    h.wait(lambda: not _held(h, bare)["facts"] or None, what="the bare pod's log facts dropped")
    held = _held(h, bare)
    assert not any((held["reported"], held["report"], held["index"], held["early_warning"])), held

    h.delete("/api/v1/namespaces/default/pods/gone-abcde")
    h.wait(lambda: not _held(h, owned)["reported"] or None, what="the Job's pod seen deleted")
    assert _report_of(h, owned), "the Job's section and page still show its pod's report"
    status, _ = h.http_get(f"{h.running[0].log_url}/reports/default/gone")
    assert status == 200

    h.delete("/apis/batch/v1/namespaces/default/jobs/gone")
    h.wait(lambda: not _report_of(h, owned) or None, what="the Job's reports dropped with it")
    after = _held(h, owned)["kept"]
    assert after["pods"] == before["pods"] - 2 and after["latest"] == before["latest"] - 2, (before, after)
    assert after["jobs"] <= before["jobs"] and after["locks"] <= before["locks"]


def test_a_finished_pod_nobody_deletes_takes_its_state_with_it_after_its_retention(
    agent_cluster: Harness,
) -> None:
    """A Job kept forever keeps its pods forever: their state goes once their log's retention passed.

    The report stays where it was written: a later event of the pod finds it stored and writes no
    second report or Event."""
    h = agent_cluster
    h.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "kept", "namespace": "default", "annotations": {"podmortem.io/watch": "true"}},
        "spec": {"containers": [{"name": "trainer", "image": "x"}]},
    })
    uid = run_pod(h, name="kept")
    h.sync(lambda: h.agent.evidence.__setitem__(uid, evidence_for(uid, RECORD)))
    kill(h, name="kept")
    h.wait(lambda: _held(h, uid)["reported"] or None, what="the report")
    service = h.running[0].service
    retention = service.settings.log_retention_s
    assert h.sync(lambda: service.drop_finished()) == 0  # finished just now: kept
    assert _held(h, uid)["reported"] and _report_of(h, uid)

    h.wait(lambda: h.sync(lambda: service.reporter.settled(uid)) or None, what="the report's follow-ups")
    gone = h.sync(lambda: service.drop_finished(now=time.time() + retention + 1))
    assert gone >= 1
    held = _held(h, uid)
    assert not any((held["reported"], held["report"], held["index"], held["early_warning"])), held
    assert h.sync(lambda: uid not in service.records.pods)

    events = len(_report_events(h, "kept"))
    report = _annotation(h, "kept")
    h.patch("/api/v1/namespaces/default/pods/kept", {"metadata": {"labels": {"touched": "yes"}}})
    h.wait(lambda: _held(h, uid)["reported"] or None, what="the stored report found again")
    after = _report_events(h, "kept")
    assert len(after) == events, [(e.get("reason"), e.get("message", "")[:120]) for e in after]
    assert _annotation(h, "kept") == report


def _annotation(h: Harness, pod: str) -> str | None:
    body = h.get(f"/api/v1/namespaces/default/pods/{pod}") or {}
    value = (body.get("metadata", {}).get("annotations") or {}).get("podmortem.io/failure-report")
    return value if isinstance(value, str) else None


def _report_events(h: Harness, pod: str) -> list[dict[str, Any]]:
    events = (h.get("/api/v1/namespaces/default/events") or {}).get("items", [])
    return [e for e in events if e.get("involvedObject", {}).get("name") == pod
            and e.get("type") == "Warning"]


def test_a_pod_deleted_while_followed_takes_its_log_facts_with_it(agent_cluster: Harness) -> None:
    """Deleted while running: its follower is still reading when the deletion is seen, and ends a
    moment later. What it learned must go then, not stay for the operator's life."""
    h = agent_cluster
    h.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "running", "namespace": "default",
                     "annotations": {"podmortem.io/watch": "true"}},
        "spec": {"containers": [{"name": "trainer", "image": "x"}]},
    })
    uid = run_pod(h, name="running")
    h.wait(lambda: _held(h, uid)["facts"] or None, what="the pod followed")
    h.delete("/api/v1/namespaces/default/pods/running")
    h.sync(lambda: h.api.pods["default", "running"].delete())  # the kubelet stops it: its stream ends
    h.wait(lambda: not _held(h, uid)["facts"] or None, what="its log facts dropped after its follower ended")
    assert not _held(h, uid)["index"]
