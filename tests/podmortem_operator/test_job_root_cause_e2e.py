"""End to end on kmock: a 4-pod PyTorchJob where rank 2 is OOM-killed and the other ranks fail after it.

Ranks 0, 1 and 3 print real NCCL and torchrun failure texts (tests/fixtures/training-logs) and
exit 1 or 143 a minute later; the kills reach the operator in shuffled order. The job's
``podmortem.io/failure-report`` annotation must name rank 2 as the root cause every time, and
once it has, no later failure may take its place. The same story runs as an indexed batch Job and
as a JobSet (pod -> child Job -> annotated JobSet; ranks from the ``jobset.sigs.k8s.io/job-index`` label).

A job whose pods vanish: a job controller's cleanup (the training operator's ``cleanPodPolicy``,
``kubectl delete``) removes the pods right after they fail, often before the operator has handled
the failure (its watch then sees only the DELETED event, with the final status). The report must
still name rank 2 from the facts kept of each pod (status, log tail), each row saying the pod is gone.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from podmortem.kernel import oom_parser
from podmortem.kube.owners import DEFAULT_FOREIGN_KINDS, ForeignKind
from podmortem_demo import harness as harness_mod
from podmortem_demo.emulated.kubelet import LineText
from podmortem_demo.harness import Harness, harness, kill, run_pod

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "training-logs"
RECORD = FIXTURES / "oom-records" / "01-k3s-v1-dmesgT-stress-4.15.log"
PTJ_PATH = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"
JOBSET_PATH = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
JOBSETS = ForeignKind("jobset.x-k8s.io", "jobsets", "v1alpha2")
LOG_BASE = "http://podmortem.podmortem.svc:8080"
TRAINING_LINES = 20

#: (replica type, index, rank, log fixture or None, exit code, reason, finishedAt)
RANKS = [
    ("master", 0, 0, "nccl-watchdog-torch25.log", 1, "Error", "2024-05-01T10:06:00Z"),
    ("worker", 0, 1, "nccl-remote-error.log", 1, "Error", "2024-05-01T10:06:01Z"),
    ("worker", 1, 2, None, 137, "OOMKilled", "2024-05-01T10:05:00Z"),
    ("worker", 2, 3, "torchrun-sigterm.log", 143, "Error", "2024-05-01T10:06:05Z"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with harness(tmp_path_factory.mktemp("jobs")) as h:
        h.add_agent_pod()
        assert JOBSETS in DEFAULT_FOREIGN_KINDS  # JobSets are followed by default (the chart's too)
        settings = h.settings(log_http_auth=False, log_base_url=LOG_BASE, foreign_kinds=DEFAULT_FOREIGN_KINDS)
        h.start_operator(settings)
        yield h
        assert h.operator_error is None, h.operator_error


def text_then(fixture: str | None) -> Callable[[str, int], LineText]:
    """Training steps, then the fixture's lines (a rank's last words)."""
    tail = (LOGS / fixture).read_bytes().splitlines() if fixture else []

    def factory(container: str, instance: int) -> LineText:
        def text(seq: int) -> bytes:
            if seq < TRAINING_LINES:
                return b"step %d loss=0.%04d" % (seq, seq * 37 % 9973)
            return tail[seq - TRAINING_LINES]

        return text

    return factory


def indexed(job: str) -> bool:
    return job.startswith("indexed")


def jobset(job: str) -> bool:
    return job.startswith("jobset")


def pod_name(job: str, kind: str, index: int) -> str:
    """A PyTorchJob's ``<job>-master-0``/``<job>-worker-i``; an indexed Job's ``<job>-<rank>-<suffix>``;
    a JobSet's ``<jobset>-workers-<job index>-0-<suffix>`` (one pod per child Job)."""
    rank = next(r[2] for r in RANKS if (r[0], r[1]) == (kind, index))
    if indexed(job):
        return f"{job}-{rank}-x7k2{rank}"
    if jobset(job):
        return f"{job}-workers-{rank}-0-x7k2{rank}"
    return f"{job}-{kind}-{index}"


def start_job(h: Harness, job: str) -> dict[str, str]:
    """The PyTorchJob (or indexed batch Job) and its 4 running pods, as their controllers make them.

    The PyTorchJob's pods carry the training operator's replica labels; the indexed Job's pods
    the completion-index label and ``JOB_COMPLETION_INDEX`` as a fieldRef to it. Pod name -> uid.
    """
    api, kind_, path = (
        ("batch/v1", "Job", "/apis/batch/v1/namespaces/default/jobs") if indexed(job)
        else ("jobset.x-k8s.io/v1alpha2", "JobSet", JOBSET_PATH) if jobset(job)
        else ("kubeflow.org/v1", "PyTorchJob", PTJ_PATH)
    )
    owner = h.create(
        path,
        {
            "apiVersion": api,
            "kind": kind_,
            "metadata": {"name": job, "namespace": "default", "annotations": {"podmortem.io/watch": "true"}},
            "spec": {"completionMode": "Indexed", "completions": 4} if indexed(job) else {},
        },
    )
    ref = {"apiVersion": api, "kind": kind_, "name": job, "uid": owner["metadata"]["uid"], "controller": True}
    uids: dict[str, str] = {}
    for kind, index, rank, fixture, *_ in RANKS:
        name = pod_name(job, kind, index)
        container: dict[str, Any] = {"name": "trainer", "image": "x"}
        pod_ref = ref
        if jobset(job):  # the JobSet controller's child Job (not annotated) owns the pod
            child = h.create("/apis/batch/v1/namespaces/default/jobs", {
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {
                    "name": f"{job}-workers-{rank}", "namespace": "default", "ownerReferences": [ref]
                },
                "spec": {},
            })
            pod_ref = {"apiVersion": "batch/v1", "kind": "Job", "name": child["metadata"]["name"],
                       "uid": child["metadata"]["uid"], "controller": True}
            labels = {
                "jobset.sigs.k8s.io/jobset-name": job, "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                "jobset.sigs.k8s.io/job-index": str(rank), "batch.kubernetes.io/job-completion-index": "0",
            }
        elif indexed(job):
            labels = {"batch.kubernetes.io/job-completion-index": str(rank)}
            container["env"] = [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}}]
        else:
            labels = {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": kind,
                      "training.kubeflow.org/replica-index": str(index)}
        h.create(
            "/api/v1/namespaces/default/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name, "namespace": "default", "labels": labels, "ownerReferences": [pod_ref]
                },
                "spec": {"containers": [container]},
            },
        )
        uids[name] = run_pod(h, name=name, text=text_then(fixture))
    return uids


def write_last_words(h: Harness, job: str, uids: dict[str, str]) -> None:
    """Each rank writes its steps and its fixture; waits until the operator has read them all."""
    service = h.running[0].service
    for kind, index, _rank, fixture, *_ in RANKS:
        name = pod_name(job, kind, index)
        n = TRAINING_LINES + (len((LOGS / fixture).read_bytes().splitlines()) if fixture else 0)
        h.sync(lambda name=name, n=n: h.api.pods["default", name].containers["trainer"].write(n))

        def read_all(uid: str = uids[name], n: int = n) -> bool | None:
            facts = service.following.facts(uid) if service.following is not None else None
            return True if facts is not None and facts.lines >= n else None

        h.wait(read_all, what=f"{name}'s lines in the operator", timeout=60.0)


def job_report(h: Harness, job: str) -> dict[str, Any] | None:
    path = (
        f"/apis/batch/v1/namespaces/default/jobs/{job}" if indexed(job)
        else f"{JOBSET_PATH}/{job}" if jobset(job) else f"{PTJ_PATH}/{job}"
    )
    raw = ((h.get(path) or {}).get("metadata", {}).get("annotations") or {}).get(
        "podmortem.io/failure-report"
    )
    return json.loads(raw) if raw else None


def failed_rows(report: dict[str, Any] | None) -> int:
    return (report or {}).get("job", {}).get("roles", {}).get("root-cause", 0) + sum(
        (report or {}).get("job", {}).get("roles", {}).get(role, 0) for role in ("consequence", "unrelated")
    )


@pytest.mark.parametrize(
    ("job", "seed"),
    # rank 2 delivered 1st, 3rd, 2nd, last; in the indexed Job 3rd; in the JobSet 2nd
    [("ddp-0", 0), ("ddp-1", 1), ("ddp-2", 2), ("ddp-5", 5), ("indexed-3", 3), ("jobset-2", 2)],
)
def test_rank_2_oom_is_the_root_cause_whatever_the_event_order(cluster: Harness, job: str, seed: int) -> None:
    h = cluster
    uids = start_job(h, job)
    oom_pod = pod_name(job, "worker", 1)
    record = oom_parser.parse_text(RECORD.read_text())[0]
    evidence = harness_mod.evidence_for(uids[oom_pod], record)
    h.sync(lambda: h.agent.evidence.__setitem__(uids[oom_pod], evidence))
    write_last_words(h, job, uids)

    order = list(RANKS)
    random.Random(seed).shuffle(order)
    root_seen = False
    for delivered, (kind, index, rank, _fixture, code, reason, finished) in enumerate(order, start=1):
        kill(h, name=pod_name(job, kind, index), exit_code=code, reason=reason, finished_at=finished)

        def after(n: int = delivered, pod: str = pod_name(job, kind, index)) -> dict[str, Any] | None:
            r = job_report(h, job)
            if n == 1:  # one failed pod: its own report, no job section yet
                return r if r is not None and r["pod"]["name"] == pod else None
            return r if failed_rows(r) >= n else None

        report = h.wait(after, what=f"the job report after {delivered} failure(s)")
        if "job" not in report:  # one failed pod so far: the pod's own report, no job section yet
            continue
        root = report["job"]["rootCause"]
        root_seen = root_seen or rank == 2
        if root_seen:  # rank 2's failure is known: it is the root cause, and stays so
            assert (root["pod"], root["rank"], report["job"]["guessed"]) == (oom_pod, 2, False), report

    final = report["job"]
    assert final["rootCause"]["exitCode"] == 137 and final["rootCause"]["verdict"] == "memcg-limit"
    assert final["rootCause"]["logUrl"] == f"{LOG_BASE}/logs/default/{oom_pod}?container=trainer"
    assert report["pod"]["name"] == oom_pod and report["verdict"] == "memcg-limit"
    rows = {row["rank"]: row for row in final["rows"]}
    assert [rows[r]["role"] for r in range(4)] == ["consequence", "consequence", "root-cause", "consequence"]
    assert "Watchdog caught collective operation timeout" in rows[0]["line"]
    assert "remote process exited" in rows[1]["line"] or "Connection reset by peer" in rows[1]["line"]
    assert "closing signal SIGTERM" in rows[3]["line"] and rows[3]["exitCode"] == 143
    assert final["roles"] == {"consequence": 3, "root-cause": 1}
    assert len(json.dumps(report, separators=(",", ":")).encode()) <= 4096
    # The Event is posted after the annotation is written: wait for it, it may not be there at once.

    def root_event() -> str | None:
        events = [e["message"] for e in h.events_for(job) if e["reason"] == "JobRootCause"]
        return events[-1] if events and oom_pod in events[-1] else None

    latest = h.wait(root_event, what="the JobRootCause Event naming the OOM-killed rank")
    assert "(rank 2) failed first" in latest, latest


def _delete(h: Harness, name: str) -> None:
    h.delete(f"/api/v1/namespaces/default/pods/{name}")


def _prepare(h: Harness, job: str) -> dict[str, str]:
    uids = start_job(h, job)
    oom_pod = pod_name(job, "worker", 1)
    record = oom_parser.parse_text(RECORD.read_text())[0]
    evidence = harness_mod.evidence_for(uids[oom_pod], record)
    h.sync(lambda: h.agent.evidence.__setitem__(uids[oom_pod], evidence))
    write_last_words(h, job, uids)
    return uids


@pytest.mark.parametrize("seed", [0, 2])
def test_each_pod_deleted_right_after_it_fails(cluster: Harness, seed: int) -> None:
    """Kill then delete at once, in shuffled order: the operator may see only the DELETED events."""
    h, job = cluster, f"gone-{seed}"
    _prepare(h, job)
    order = list(RANKS)
    random.Random(seed).shuffle(order)
    for kind, index, _rank, _fixture, code, reason, finished in order:
        name = pod_name(job, kind, index)
        kill(h, name=name, exit_code=code, reason=reason, finished_at=finished)
        _delete(h, name)

    def complete() -> dict[str, Any] | None:
        r = job_report(h, job)
        rows = (r or {}).get("job", {}).get("rows") or []
        return r if failed_rows(r) == 4 and all(row.get("deleted") for row in rows) else None

    report = h.wait(complete, what="the job report with 4 failed rows, all marked deleted")
    oom_pod = pod_name(job, "worker", 1)
    section = report["job"]
    root = section["rootCause"]
    assert (root["pod"], root["rank"], section["guessed"]) == (oom_pod, 2, False), report
    assert root["verdict"] == "memcg-limit" and root.get("deleted") is True
    assert report["pod"]["name"] == oom_pod and report["verdict"] == "memcg-limit"
    rows = {row["rank"]: row for row in section["rows"]}
    assert [rows[r]["role"] for r in range(4)] == ["consequence", "consequence", "root-cause", "consequence"]
    # the consequences' lines come from the log tails kept after the pods were deleted
    assert "Watchdog caught collective operation timeout" in rows[0]["line"]
    assert "closing signal SIGTERM" in rows[3]["line"] and rows[3]["exitCode"] == 143
    assert "deleted" in section.get("note", ""), section


def test_running_ranks_deleted_after_the_oom_kill(cluster: Harness) -> None:
    """``cleanPodPolicy: All``: rank 2 is OOM-killed, then every pod is deleted, the others still running."""
    h, job = cluster, "cleanup"
    _prepare(h, job)
    oom_pod = pod_name(job, "worker", 1)
    kill(h, name=oom_pod, exit_code=137, reason="OOMKilled", finished_at="2024-05-01T10:05:00Z")
    for kind, index, *_ in RANKS:
        _delete(h, pod_name(job, kind, index))

    def complete() -> dict[str, Any] | None:
        r = job_report(h, job)
        rows = (r or {}).get("job", {}).get("rows") or []
        return r if len(rows) == 4 and all(row.get("deleted") for row in rows) else None

    report = h.wait(complete, what="the job report with 4 rows, all marked deleted")
    section = report["job"]
    root = section["rootCause"]
    assert (root["pod"], root["rank"], section["guessed"]) == (oom_pod, 2, False), section
    assert section["roles"] == {"not-failed": 3, "root-cause": 1}, section
    assert report["pod"]["name"] == oom_pod and report["verdict"] == "memcg-limit"


def deleted_only(h: Harness, name: str, code: int, reason: str, finished: str) -> None:
    """The container ends and the pod is deleted, and the operator's watch sees only the DELETED event
    (the terminated status in it), as when the pod goes before its MODIFIED event is handled."""
    container = h.sync(lambda: h.api.pods["default", name]).containers["trainer"]
    h.sync(lambda: container.terminate(code))
    body = copy.deepcopy(next(p for p in h.objects("v1/pods") if p["metadata"]["name"] == name))
    status = body["status"]["containerStatuses"][0]
    status["state"] = {"terminated": {
        "exitCode": code, "reason": reason, "containerID": status["containerID"],
        "startedAt": "2024-05-01T10:00:00Z", "finishedAt": finished,
    }}
    body["status"]["phase"] = "Failed"
    body["metadata"]["deletionTimestamp"] = finished
    assert h.operator is not None
    service = h.running[0].service
    asyncio.run_coroutine_threadsafe(service.on_pod(body, deleted=True), h.operator.loop).result(20)
    _delete(h, name)  # the API's own DELETED event then shows the pod still running: the failure seen stays


def test_only_the_deleted_events_are_seen(cluster: Harness) -> None:
    h, job = cluster, "unseen"
    _prepare(h, job)
    order = list(RANKS)
    random.Random(1).shuffle(order)
    for kind, index, _rank, _fixture, code, reason, finished in order:
        deleted_only(h, pod_name(job, kind, index), code, reason, finished)

    def complete() -> dict[str, Any] | None:
        r = job_report(h, job)
        rows = (r or {}).get("job", {}).get("rows") or []
        return r if failed_rows(r) == 4 and all(row.get("deleted") for row in rows) else None

    try:
        report = h.wait(complete, what="the job report with 4 failed rows, all marked deleted")
    except TimeoutError:
        raise AssertionError(json.dumps(job_report(h, job), indent=1)) from None
    section, oom_pod = report["job"], pod_name(job, "worker", 1)
    root = section["rootCause"]
    assert (root["pod"], root["rank"], section["guessed"]) == (oom_pod, 2, False), section
    assert report["verdict"] == "memcg-limit"
    rows = {row["rank"]: row for row in section["rows"]}
    assert [rows[r]["role"] for r in range(4)] == ["consequence", "consequence", "root-cause", "consequence"]
    assert "Watchdog caught collective operation timeout" in rows[0]["line"]
    assert "closing signal SIGTERM" in rows[3]["line"]
