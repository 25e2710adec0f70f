"""The job section of a multi-pod job's report: one row per pod, ranks from the pod, and the size cap."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from podmortem.diagnosis import job_root_cause as jrc
from podmortem.diagnosis import job_section

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "training-logs"
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
WATCHDOG = tuple((LOGS / "nccl-watchdog-torch25.log").read_text().splitlines())


def pod(name: str, *, kind: str, index: int, exit_code: int | None, finished: str = "2024-05-01T12:01:00Z",
        reason: str = "Error") -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": "2024-05-01T12:00:00Z"}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": reason, "containerID": "containerd://x",
                                "finishedAt": finished}}
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                     "labels": {"training.kubeflow.org/replica-type": kind,
                                "training.kubeflow.org/replica-index": str(index)}},
        "spec": {"containers": [{"name": "pytorch", "image": "x"}]},
        "status": {"phase": "Failed" if exit_code else "Running",
                   "containerStatuses": [{"name": "pytorch", "state": state}]},
    }


def test_pod_facts_from_a_pytorchjob_pod_and_its_log_tail() -> None:
    facts = job_section.pod_facts(
        pod("ddp-worker-1", kind="worker", index=1, exit_code=1),
        tails={"pytorch": WATCHDOG}, last_lines_ns={"pytorch": 1_714_564_850 * 10**9},
        verdict="python-exception", summary="the exception", log_url=lambda c: f"log of {c}",
    )
    assert (facts.rank, facts.exit_code, facts.reason, facts.container) == (2, 1, "Error", "pytorch")
    assert facts.finished_at == T0 + timedelta(minutes=1) and facts.failed
    assert facts.last_lines == WATCHDOG
    assert facts.log_url == "log of pytorch"
    running = job_section.pod_facts(
        pod("ddp-master-0", kind="master", index=0, exit_code=None), tails={"pytorch": WATCHDOG},
        last_lines_ns={"pytorch": 5}, verdict=None, summary=None, log_url=lambda c: "",
    )
    # A running pod keeps no log facts, so its facts do not change at each event.
    assert (running.rank, running.failed, running.last_lines, running.last_line_at) == (0, False, (), None)


def big_job(n: int, oom: int = 700) -> jrc.JobRootCause:
    pods = [
        jrc.PodFacts(
            pod=f"big-worker-{rank}", container="pytorch", rank=rank,
            exit_code=137 if rank == oom else (1 if rank % 3 else None), reason="Error",
            finished_at=T0 + timedelta(seconds=0 if rank == oom else 60), last_line_at=None,
            verdict="memcg-limit" if rank == oom else None,
            summary="the kernel killed python" if rank == oom else None,
            last_lines=WATCHDOG if rank != oom else (), log_url=f"http://pm/logs/ml/big-worker-{rank}",
            failed=rank == oom or rank % 3 != 0,
        )
        for rank in range(n)
    ]
    return jrc.root_cause(pods)


def test_a_thousand_pods_fit_the_annotation_and_say_what_was_left_out() -> None:
    result = big_job(1000)
    doc = job_section.section(result, max_bytes=3000).to_json()
    assert len(json.dumps(doc, separators=(",", ":")).encode()) <= 3000
    root = doc["rootCause"]
    assert root["pod"] == "big-worker-700" and root["line"] == "the kernel killed python"
    assert doc["pods"] == 1000 and sum(doc["roles"].values()) == 1000
    assert doc["roles"]["root-cause"] == 1 and doc["roles"]["not-failed"] == 334
    assert doc["rowsOmitted"] == 1000 - len(doc["rows"]) > 0
    assert "left out to fit" in doc["note"]
    # What stays: the root first of all; no not-failed row while a consequence was cut.
    roles = [r["role"] for r in doc["rows"]]
    assert "root-cause" in roles and "not-failed" not in roles
    ranks = [r["rank"] for r in doc["rows"]]
    assert ranks == sorted(ranks)


def test_a_small_job_keeps_every_row_and_the_headline_names_the_root() -> None:
    doc = job_section.section(big_job(4, oom=2), max_bytes=4096).to_json()
    assert len(doc["rows"]) == 4 and "rowsOmitted" not in doc and doc["guessed"] is False
    assert [r["role"] for r in doc["rows"]] == ["not-failed", "consequence", "root-cause", "not-failed"]
    assert "Watchdog caught" in doc["rows"][1]["line"] and doc["rootCause"]["rank"] == 2
    guess = job_section.section(big_job(4, oom=9), max_bytes=4096).to_json()
    assert guess["guessed"] is True and "a guess" in guess["note"]
    headline = job_section.headline(big_job(1000))
    assert headline is not None and headline.startswith("big-worker-700 (rank 700) failed first")
    assert "665 consequence(s)" in headline


def test_a_tiny_budget_still_names_the_root_cause() -> None:
    doc = job_section.section(big_job(1000), max_bytes=400).to_json()
    assert doc["rootCause"]["pod"] == "big-worker-700" and doc["rows"] == []
