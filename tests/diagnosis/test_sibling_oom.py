"""A trainer failing after its pod's sidecar is OOM-killed: the report and the job row name the sidecar."""

from __future__ import annotations

from typing import Any

from podmortem.diagnosis import job_root_cause, job_section, termination, verdicts

#: A trainer's last words when the data proxy beside it dies (a reset connection, then the traceback).
TRAINER_TAIL = [
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 88, in <module>',
    "    batch = client.fetch(step)",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
]


def terminated(code: int, reason: str, at: str) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason, "finishedAt": at,
                           "containerID": f"containerd://{reason}{code}{at}"}}


def pod(proxy_at: str = "2024-05-01T10:05:00Z", *, native: bool = False, trainer_reason: str = "Error",
        trainer_code: int = 1) -> dict[str, Any]:
    proxy = {"name": "proxy", "state": terminated(137, "OOMKilled", proxy_at)}
    trainer = {"name": "trainer", "state": terminated(trainer_code, trainer_reason, "2024-05-01T10:05:03Z")}
    statuses = [trainer] if native else [proxy, trainer]
    status: dict[str, Any] = {"phase": "Failed", "containerStatuses": statuses}
    spec: dict[str, Any] = {"containers": [{"name": "trainer", "env": [{"name": "RANK", "value": "2"}]}]}
    if native:
        status["initContainerStatuses"] = [proxy]
        spec["initContainers"] = [{"name": "proxy", "restartPolicy": "Always"}]
    else:
        spec["containers"].insert(0, {"name": "proxy"})
    return {"metadata": {"name": "ddp-worker-1", "namespace": "default", "uid": "u1"}, "spec": spec,
            "status": status}


def trainer_report(p: dict[str, Any]) -> Any:
    t = next(t for t in termination.find(p) if t.container == "trainer")
    return verdicts.diagnose_termination(
        termination=t, evidence=None, last_line_ns=None, stale_after_s=600, log_tail=TRAINER_TAIL
    )


def test_the_trainers_report_names_the_oom_killed_sidecar() -> None:
    report = trainer_report(pod())
    assert report.verdict == "sidecar-oom"
    first = report.findings[0]
    assert first.evidence["container"] == "proxy" and first.evidence["exit_code"] == 137
    assert first.message == (
        "The container 'proxy' of this pod was OOM-killed (exit 137) 3 s before 'trainer' ended with "
        "exit 1: 'trainer' failed because 'proxy' died."
    )
    # The trainer's own exception is kept, after the cause.
    assert [f.code for f in report.findings] == ["sidecar-oom", "python-exception"]
    assert "ConnectionResetError" in report.findings[1].message
    # The sidecar's own report stays the OOM kill's.
    proxy = next(t for t in termination.find(pod()) if t.container == "proxy")
    assert proxy.sibling_oom is None and proxy.reason == "OOMKilled"


def test_a_native_sidecar_in_init_container_statuses_counts() -> None:
    report = trainer_report(pod(native=True))
    assert report.verdict == "sidecar-oom" and "init/sidecar container 'proxy'" in report.findings[0].message


def test_a_sidecar_killed_long_before_or_after_or_an_oom_killed_trainer_is_not_it() -> None:
    assert trainer_report(pod("2024-05-01T09:00:00Z")).verdict == "python-exception"  # an hour before
    assert trainer_report(pod("2024-05-01T10:05:30Z")).verdict == "python-exception"  # after the trainer
    killed = next(t for t in termination.find(pod(trainer_reason="OOMKilled", trainer_code=137))
                  if t.container == "trainer")
    assert killed.sibling_oom is None  # the trainer's own kill is its own cause


def test_the_job_row_is_about_the_container_that_was_oom_killed() -> None:
    p = pod()
    facts = job_section.pod_facts(
        p, tails={"trainer": TRAINER_TAIL}, last_lines_ns={}, verdict="sidecar-oom",
        summary=trainer_report(p).findings[0].message, log_url=lambda c: f"log of {c}",
    )
    assert (facts.container, facts.exit_code, facts.reason, facts.rank) == ("proxy", 137, "OOMKilled", 2)
    assert facts.log_url == "log of proxy"
    peer = job_root_cause.PodFacts(
        pod="ddp-master-0", container="trainer", rank=0, exit_code=143, reason="Error",
        finished_at=None, last_line_at=None, verdict=None,
    )
    section = job_section.section(job_root_cause.root_cause([facts, peer]), max_bytes=4096).to_json()
    assert section["rootCause"]["pod"] == "ddp-worker-1" and section["rootCause"]["container"] == "proxy"
    rows = {row["pod"]: row for row in section["rows"]}
    assert rows["ddp-worker-1"]["container"] == "proxy" and "'proxy' died" in section["rootCause"]["line"]
    assert "container" not in rows["ddp-master-0"]  # a one-container pod's row needs no name
