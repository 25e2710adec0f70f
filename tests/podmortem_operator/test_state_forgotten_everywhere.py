"""Every pod and job the operator followed leaves nothing behind, whichever way it went.

The real operator runs against the emulated cluster. A TrainingJob's pod, a two-pod annotated Job
and a bare annotated pod print memory lines, are OOM-killed and reported; a bare pod finished long
ago is dropped past its log's retention; a running pod is deleted while the pod watch is down, so
only the relist sees it gone. Then every pod and job is deleted, and every collection of the
components that keep per-pod or per-job state is walked: each must be empty. The walk takes every
dict, set, list and deque attribute, so a collection added later that no forget reaches fails here.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

from podmortem.background import Background
from podmortem.operator.jobs import POD_SUFFIX
from podmortem.operator.watching import service as service_mod
from podmortem_demo.harness import Harness, harness, kill, run_pod

from .test_job_memory_pressure_e2e import memory_lines
from .test_operator_e2e import TJ_PATH, evidence_for, trainingjob

RECORD = "02-k8s-v1-syslog-kmem-runc-el7.log"
PODS = "/api/v1/namespaces/default/pods"
PEAKS = [20.0, 22.0, 24.0, 26.0, 28.0]

#: Attributes that are no per-pod or per-job state, and why.
NOT_STATE = {
    ("Records", "_pod_hooks"): "the components' forget hooks, registered once",
    ("Records", "_job_hooks"): "the components' forget hooks, registered once",
    ("PodIndex", "_pod_dirs"): "where pods' logs lie on disk: the logs stay after the pod (retention)",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with harness(tmp_path_factory.mktemp("forgotten")) as h:
        h.add_agent_pod()
        h.start_operator(h.settings(log_http_auth=False))
        yield h
        assert h.operator_error is None, h.operator_error


def _holders(h: Harness) -> dict[str, object]:
    """The operator's objects that keep something per pod or per job."""
    service = h.running[0].service
    holders: dict[str, object] = {
        "OperatorService": service,
        "Records": service.records,
        "Targets": service.targets,
        "Reporter": service.reporter,
        "Reports": service.reporter.reports,
        "FollowUps": service.reporter.follow_ups,
        "EarlyWarning": service.early_warning,
        "StatusWriter": service.status,
        "PodIndex": h.running[0].store._pods,
    }
    if service.following is not None:
        holders["Following"] = service.following
    return holders


def _collections(obj: object) -> Iterator[tuple[str, Any]]:
    """Each dict, set, list and deque attribute of ``obj``, and those of its task runners (a task of a
    pod or a job still running, or one that failed, is state too)."""
    for name, value in vars(obj).items():
        if isinstance(value, dict | set | frozenset | list | deque):
            yield name, value
        elif isinstance(value, Background):
            for inner, tasks in _collections(value):
                yield f"{name}.{inner}", tasks


def _left(h: Harness) -> dict[str, Any]:
    """What is still held, by ``Class.attribute``; besides, each WatchedTarget's collections."""
    def read() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kind, obj in _holders(h).items():
            assert type(obj).__name__ == kind, (kind, type(obj))
            for name, value in _collections(obj):
                if (kind, name) not in NOT_STATE and value:
                    out[f"{kind}.{name}"] = list(value)[:5]
        targets = h.running[0].service.targets
        for known in [*targets.owners.values(), *targets.pods.values()]:
            for name, value in _collections(known):
                if value:
                    out[f"WatchedTarget({known.target.name}).{name}"] = list(value)[:5]
        return out

    return h.sync(read)


def _wait_left_empty(h: Harness, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (left := _left(h)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left


def _watched_pod(name: str, *, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if owner is None:
        meta["annotations"] = {"podmortem.io/watch": "true"}
    else:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "controller": True,
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "trainer", "image": "x"}]}}


def _lines(h: Harness, name: str, uid: str, n: int) -> None:
    """``n`` lines of ``name`` (its memory lines among them), read by the operator."""
    h.sync(lambda: h.api.pods["default", name].containers["trainer"].write(n))
    following = h.running[0].service.following
    assert following is not None

    def read() -> bool | None:
        facts = following.facts(uid)
        return True if facts is not None and facts.lines >= n else None

    h.wait(read, what=f"{name}'s {n} lines in the operator")


def _report(h: Harness, name: str, uid: str) -> None:
    h.sync(lambda: h.agent.evidence.__setitem__(uid, evidence_for(uid, RECORD)))
    kill(h, name=name)
    service = h.running[0].service

    def reported() -> bool:
        record = service.records.pods.get(uid)
        return record is not None and bool(record.reported)

    h.wait(lambda: h.sync(reported) or None, what=f"{name}'s report")
    h.wait(lambda: h.sync(lambda: service.reporter.settled(uid)) or None, what=f"{name}'s report follow-ups")


def test_every_collection_is_empty_once_every_pod_and_job_went_each_way(cluster: Harness) -> None:
    h = cluster
    service = h.running[0].service
    assert _left(h) == {}, "nothing is followed yet"

    # A bare pod, reported, finished longer ago than its log's retention: dropped by the sweep.
    h.create(PODS, _watched_pod("old"))
    old = run_pod(h, name="old", text=memory_lines(PEAKS))
    _lines(h, "old", old, 3)
    _report(h, "old", old)
    gone = h.sync(lambda: service.drop_finished(now=time.time() + service.settings.log_retention_s + 1))
    assert gone == 1 and h.sync(lambda: old not in service.records.pods)

    # A TrainingJob's pod: memory lines (status, pressure, projection), a kill, a report in its status.
    h.create(TJ_PATH, trainingjob("tj", earlyWarningEpochs=3))
    tj_pod = "tj" + POD_SUFFIX
    h.wait(lambda: h.get(f"{PODS}/{tj_pod}"), what="the TrainingJob's pod")
    tj_uid = run_pod(h, name=tj_pod, text=memory_lines(PEAKS))
    _lines(h, tj_pod, tj_uid, 4)
    _report(h, tj_pod, tj_uid)

    # A Job's two pods: both reported, the job's section written.
    job = h.create("/apis/batch/v1/namespaces/default/jobs", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "two", "namespace": "default", "annotations": {"podmortem.io/watch": "true"}},
        "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}},
    })
    ranks = {}
    for name in ("two-a", "two-b"):
        h.create(PODS, _watched_pod(name, owner=job))
        ranks[name] = run_pod(h, name=name, text=memory_lines(PEAKS))
        _lines(h, name, ranks[name], 3)
    for name, uid in ranks.items():
        _report(h, name, uid)
    h.wait(lambda: h.sync(lambda: job["metadata"]["uid"] in service.reporter.jobs) or None,
           what="the Job's section")

    # A running bare pod deleted while the watch is down: only the relist sees it gone.
    h.create(PODS, _watched_pod("ghost"))
    ghost = run_pod(h, name="ghost", text=memory_lines(PEAKS))
    _lines(h, "ghost", ghost, 3)
    held = _left(h)
    for part in ("Records.pods", "Targets.pods", "Reports.by_pod", "Following._facts",
                 "EarlyWarning._epoch_times", "StatusWriter._fields", "PodIndex._by_name"):
        assert part in held, (part, held)  # the walk below sees what it must see emptied

    def delete_unseen() -> None:
        del h.api.objects["v1/pods", "default", "ghost"]  # no event: as if lost to compaction
        h.api.pods["default", "ghost"].delete()  # the kubelet stopped it: its log stream ends
        h.api.forget_history()  # every watch ends; the next one gets 410 and lists again

    h.sync(delete_unseen)
    h.wait(lambda: h.sync(lambda: ghost not in service.records.pods) or None, what="the relist's drop")

    # The rest deleted: pods first (a Job's section keeps its pods' reports), then their jobs.
    for name in (tj_pod, "two-a", "two-b", "old"):
        h.delete(f"{PODS}/{name}")
        h.sync(lambda name=name: h.api.pods["default", name].delete())  # type: ignore[misc]
    h.wait(lambda: h.sync(lambda: not service.records.pods) or None, what="every pod seen deleted")
    h.delete(f"{TJ_PATH}/tj")
    h.delete("/apis/batch/v1/namespaces/default/jobs/two")
    _wait_left_empty(h)


def test_a_job_deleted_while_its_section_waits_to_be_written_gets_no_section(
    cluster: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job controller deletes the pods, then the job, within the moment a section's changes are
    gathered: the section written after the job was forgotten would hold it (and its lock) for good."""
    h = cluster
    service = h.running[0].service
    monkeypatch.setattr(service_mod, "JOB_REPORT_COALESCE_S", 1.0)
    job = h.create("/apis/batch/v1/namespaces/default/jobs", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "brief", "namespace": "default", "annotations": {"podmortem.io/watch": "true"}},
        "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}},
    })
    uid = job["metadata"]["uid"]
    for name in ("brief-a", "brief-b"):
        h.create(PODS, _watched_pod(name, owner=job))
        _report(h, name, run_pod(h, name=name))
    h.wait(lambda: h.sync(lambda: uid in service.reporter.jobs) or None, what="the Job's section")
    h.wait(lambda: h.sync(lambda: service.targets.owners[uid].job_task.done()) or None,  # type: ignore[union-attr]
           what="the section written")

    h.delete(f"{PODS}/brief-a")  # its row says deleted: the section waits a moment to be written again
    h.wait(lambda: h.sync(lambda: not service.targets.owners[uid].job_task.done()) or None,  # type: ignore[union-attr]
           what="the section's next write pending")
    h.delete("/apis/batch/v1/namespaces/default/jobs/brief")
    h.wait(lambda: h.sync(lambda: uid not in service.targets.owners) or None, what="the Job forgotten")
    time.sleep(1.5)  # past the moment the pending write would have come
    held = h.sync(lambda: (uid in service.reporter.jobs, uid in service.reporter.reports.target_locks))
    assert held == (False, False)
    h.delete(f"{PODS}/brief-b")
    for name in ("brief-a", "brief-b"):
        h.sync(lambda name=name: h.api.pods["default", name].delete())  # type: ignore[misc]
    _wait_left_empty(h)
