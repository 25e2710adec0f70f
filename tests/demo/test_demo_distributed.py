"""``podmortem demo --distributed``, started as the README starts it: rank 2, OOM-killed, is the root cause.

The run is real where this machine allows it (memory cgroups, /dev/kmsg) and recorded
otherwise, as ``podmortem demo`` degrades; either way rank 2's death is a limit enforced on a
real process and ranks 0, 1 and 3 fail because its connection went away.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from podmortem.diagnosis import job_root_cause
from podmortem.reports import stored_report
from podmortem_demo import distributed, kubelet


def podmortem() -> list[str]:
    script = Path(sys.executable).parent / "podmortem"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from podmortem.cli.main import main; raise SystemExit(main())"]


def test_the_distributed_demo_names_rank_2_as_the_root_cause() -> None:
    done = subprocess.run(
        [*podmortem(), "demo", "--distributed", "--timeout", "40"],
        capture_output=True, text=True, timeout=90, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    head, _columns, *rows = done.stdout.strip().splitlines()
    assert "root cause rank 2, pod ddp-demo-worker-1, exit 137 OOMKilled, verdict memcg-limit" in head, head
    table = {int(r.split()[0]): r.split(None, 5) for r in rows}
    assert sorted(table) == [0, 1, 2, 3]
    # rank, pod, exit, reason, role, line
    assert [table[r][2:5] for r in range(4)] == [
        ["1", "Error", "consequence"], ["1", "Error", "consequence"],
        ["137", "OOMKilled", "root-cause"], ["143", "Error", "consequence"],
    ]
    assert "Watchdog caught collective operation timeout" in table[0][5]
    assert "DistBackendError: NCCL error" in table[1][5] and "Sending process 33051" in table[3][5]
    # rank 2 died first, the others later; the kernel record was attached (real or labelled recorded)
    assert re.search(r"pod ddp-demo-worker-1 \(rank 2\) exited 137 \(OOMKilled", done.stderr)
    assert done.stderr.index("(rank 2) exited 137") < done.stderr.index("(rank 0) exited 1")
    assert "kernel OOM kill (real, read by the agent from /dev/kmsg)" in done.stderr or (
        "kernel OOM kill (RECORDED" in done.stderr and "[RECORDED" in head
    )


def test_the_same_story_as_a_jobset_names_rank_2_through_the_jobset_labels() -> None:
    """``--kind jobset``: pods owned by child Jobs of an annotated JobSet; ranks from the job-index label."""
    done = subprocess.run(
        [*podmortem(), "demo", "--distributed", "--kind", "jobset", "--timeout", "40"],
        capture_output=True, text=True, timeout=90, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    head, _columns, *rows = done.stdout.strip().splitlines()
    oom_pod = distributed.pod_name("ddp-demo", 2, "jobset")
    assert oom_pod.startswith("ddp-demo-workers-2-0-")
    assert "(JobSet, 4 pods)" in head, head
    assert f"root cause rank 2, pod {oom_pod}, exit 137 OOMKilled" in head, head
    table = {int(r.split()[0]): r.split(None, 5) for r in rows}
    names = [distributed.pod_name("ddp-demo", r, "jobset") for r in range(4)]
    assert [table[r][1] for r in range(4)] == names
    assert [table[r][2:5] for r in range(4)] == [
        ["1", "Error", "consequence"], ["1", "Error", "consequence"],
        ["137", "OOMKilled", "root-cause"], ["143", "Error", "consequence"],
    ]
    assert done.stderr.index("(rank 2) exited 137") < done.stderr.index("(rank 0) exited 1")
    assert "job report in the JobSet's podmortem.io/failure-report annotation" in done.stderr
    assert "kernel OOM kill (real, read by the agent from /dev/kmsg)" in done.stderr or (
        "kernel OOM kill (RECORDED" in done.stderr and "[RECORDED" in head
    )


def test_a_jobset_pod_gets_its_rank_from_the_job_index_label_only() -> None:
    """No literal RANK: the operator and the demo kubelet both resolve the downward-API fieldRef."""
    s = distributed.DistributedSettings(kind="jobset", job="js")
    child = {"metadata": {"name": distributed.child_job_name("js", 2), "uid": "u2"}}
    pod = distributed.rank_pod(s, child, 2, 29500)
    container = pod["spec"]["containers"][0]
    assert not any(e["name"] == "RANK" and "value" in e for e in container["env"])
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "2"
    assert job_root_cause.rank_of(pod) == 2
    assert kubelet.container_env(container, {}, pod["metadata"])["RANK"] == "2"
    assert "RANK" not in kubelet.container_env(container, {})


def result(root_rank: int, *, oom: str = "OOMKilled", guessed: bool = False) -> distributed.DistributedResult:
    ranks = [
        distributed.RankResult(rank=r, pod=distributed.pod_name("j", r), exit_code=137 if r == 2 else 1,
                               reason=oom if r == 2 else "Error", finished_at="", lines=3)
        for r in range(4)
    ]
    report = {"job": {"rootCause": {"rank": root_rank, "pod": distributed.pod_name("j", root_rank)},
                      "guessed": guessed}}
    job = {"metadata": {"name": "j", "namespace": "default",
                        "annotations": {stored_report.ANNOTATION: __import__("json").dumps(report)}}}
    return distributed.DistributedResult(job=job, ranks=ranks, kernel="real", oom_rank=2)


def test_problems_name_a_wrong_root_cause_a_guess_and_a_rank_that_was_not_oom_killed() -> None:
    assert distributed.problems(result(2)) == []
    assert distributed.problems(result(0)) == ["the report names j-master-0 (rank 0) as the root cause"]
    assert "(guessed)" in distributed.problems(result(2, guessed=True))[0]
    assert distributed.problems(result(2, oom="Error"))[0].startswith("rank 2 was not OOM-killed")
