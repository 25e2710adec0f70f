"""The first pod to fail of its own, and the consequences, on real NCCL/torchrun texts; order-independent."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from podmortem.diagnosis import job_root_cause as jrc

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "training-logs"
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def tail(*names: str) -> tuple[str, ...]:
    return tuple(line for name in names for line in (LOGS / name).read_text().splitlines())


def facts(
    rank: int,
    *,
    exit_code: int | None,
    at_s: float,
    verdict: str | None = None,
    logs: tuple[str, ...] = (),
    last_s: float | None = None,
    failed: bool = True,
) -> jrc.PodFacts:
    return jrc.PodFacts(
        pod=f"job-worker-{rank}",
        container="pytorch",
        rank=rank,
        exit_code=exit_code,
        reason="Error" if exit_code not in (None, 137) else "OOMKilled",
        finished_at=T0 + timedelta(seconds=at_s),
        last_line_at=T0 + timedelta(seconds=at_s if last_s is None else last_s),
        verdict=verdict,
        summary=f"verdict {verdict}" if verdict else None,
        last_lines=logs,
        failed=failed,
    )


def four_ranks_rank2_oom() -> list[jrc.PodFacts]:
    return [
        facts(0, exit_code=1, at_s=62, logs=tail("nccl-watchdog-torch25.log", "childfailed-summary.log")),
        facts(1, exit_code=1, at_s=61, logs=tail("nccl-remote-error.log")),
        facts(2, exit_code=137, at_s=0, verdict="memcg-limit"),
        facts(3, exit_code=143, at_s=63, logs=tail("torchrun-sigterm.log")),
    ]


@pytest.mark.parametrize("seed", range(20))
def test_shuffled_the_root_cause_is_rank_2(seed: int) -> None:
    pods = four_ranks_rank2_oom()
    random.Random(seed).shuffle(pods)
    result = jrc.root_cause(pods)
    assert result.root is not None and result.root.rank == 2
    assert not result.guessed
    roles = {row.facts.rank: row.role for row in result.rows}
    assert roles == {0: "consequence", 1: "consequence", 2: "root-cause", 3: "consequence"}
    lines = {row.facts.rank: row.line for row in result.rows}
    assert "Watchdog caught collective operation timeout" in lines[0]
    assert "remote process exited" in lines[1]
    assert "closing signal SIGTERM" in lines[3]
    assert [row.facts.rank for row in result.rows] == [0, 1, 2, 3]


def test_two_independent_failures() -> None:
    pods = four_ranks_rank2_oom()
    pods[0] = facts(0, exit_code=1, at_s=5, verdict="cuda-oom")
    result = jrc.root_cause(pods)
    assert result.root is not None and result.root.rank == 2
    assert [p.rank for p in result.unrelated] == [0]


def test_the_first_failure_is_a_cuda_oom() -> None:
    pods = four_ranks_rank2_oom()
    pods[2] = facts(
        2,
        exit_code=1,
        at_s=0,
        verdict="cuda-oom",
        logs=tail("cuda-oom-expandable.log", "nccl-watchdog-old.log"),
    )
    result = jrc.root_cause(pods)
    assert result.root is not None and result.root.rank == 2 and result.root.verdict == "cuda-oom"


def test_a_rank_whose_log_ends_first_wins_a_tie_in_termination_time() -> None:
    # All four end in the same second (finishedAt has 1 s resolution); rank 3's log stopped 40 s earlier.
    pods = [facts(r, exit_code=1, at_s=60, last_s=59.5, verdict="python-exception") for r in range(3)]
    pods.append(facts(3, exit_code=1, at_s=60, last_s=20, verdict="python-exception"))
    for seed in range(5):
        random.Random(seed).shuffle(pods)
        result = jrc.root_cause(pods)
        assert result.root is not None and result.root.rank == 3


def test_only_consequences_gives_a_guess_named_as_such() -> None:
    pods = [facts(r, exit_code=1, at_s=60 + r, logs=tail("nccl-watchdog-old.log")) for r in range(4)]
    result = jrc.root_cause(pods)
    assert result.guessed and result.root is not None and result.root.rank == 0


def test_running_pods_are_not_failed_and_vanished_pods_are_simply_absent() -> None:
    pods = [*four_ranks_rank2_oom()[1:3], facts(3, exit_code=None, at_s=0, failed=False)]
    result = jrc.root_cause(pods)
    assert result.root is not None and result.root.rank == 2
    assert {r.facts.rank: r.role for r in result.rows}[3] == "not-failed"
    assert jrc.root_cause([]).root is None


def test_ranks_from_env_labels_and_fieldrefs() -> None:
    def pod(
        labels: dict[str, str],
        env: list[dict[str, object]] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> dict[str, object]:
        return {
            "metadata": {"labels": labels, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "env": env or []}]},
        }

    assert jrc.rank_of(pod({}, [{"name": "RANK", "value": "3"}])) == 3
    assert (
        jrc.rank_of(
            pod({"training.kubeflow.org/replica-type": "master", "training.kubeflow.org/replica-index": "0"})
        )
        == 0
    )
    assert (
        jrc.rank_of(
            pod({"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "1"})
        )
        == 2
    )
    fieldref = [
        {
            "name": "PET_NODE_RANK",
            "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
            },
        }
    ]
    assert jrc.rank_of(pod({}, fieldref, {"batch.kubernetes.io/job-completion-index": "5"})) == 5
    assert (
        jrc.rank_of(
            pod({"jobset.sigs.k8s.io/job-index": "2", "batch.kubernetes.io/job-completion-index": "0"})
        )
        == 2
    )
    assert jrc.rank_of(pod({})) is None
