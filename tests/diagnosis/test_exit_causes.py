"""Deaths beyond the kernel OOM killer, on the real torch/NCCL/torchrun/kubelet texts of tests/fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem.diagnosis import exit_causes, termination, training_log, verdicts
from podmortem.reports.failure import FailureReport

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "training-logs"
MESSAGES = json.loads((LOGS / "pod-status-messages.json").read_text())
GIB = 2**30
MIB = 2**20


def lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def pod(
    exit_code: int | None = 1,
    *,
    reason: str | None = "Error",
    status: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    term = {
        "exitCode": exit_code,
        "reason": reason,
        "containerID": "containerd://c1",
        "finishedAt": "2024-05-01T12:00:00Z",
    }
    st: dict[str, Any] = {"containerStatuses": [{"name": "trainer", "state": {"terminated": term}}]}
    if exit_code is None:
        st = {}
    st.update(status or {})
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": spec or {"nodeName": "n1", "containers": [{"name": "trainer"}]},
        "status": st,
    }


def report(p: dict[str, Any], tail: list[str]) -> FailureReport:
    [t] = termination.find(p)
    return verdicts.diagnose_termination(
        termination=t, evidence=None, last_line_ns=None, stale_after_s=600, log_tail=tail
    )


@pytest.mark.parametrize(
    ("name", "device", "tried", "reserved_free", "fragmented"),
    [
        ("cuda-oom-expandable.log", 0, 30.29 * GIB, 396.58 * MIB, False),
        ("cuda-oom-fragmented.log", 0, 22.78 * GIB, 9.35 * GIB, False),
        ("cuda-oom-capacty-other-process.log", 0, 132 * MIB, 353.02 * MIB, True),
        ("cuda-oom-torch1-gpu1.log", 1, 130 * MIB, (6.09 - 5.91) * GIB, True),
        ("cuda-oom-torch1-cached.log", 0, 12.5 * MIB, None, False),
    ],
)
def test_cuda_oom_reads_the_allocators_numbers(
    name: str, device: int, tried: float, reserved_free: float | None, fragmented: bool
) -> None:
    oom = training_log.cuda_oom(lines(name))
    assert oom is not None and oom.device == device
    assert oom.tried == pytest.approx(tried, rel=1e-3)
    if reserved_free is None:
        assert oom.reserved_unallocated is None
    else:
        assert oom.reserved_unallocated == pytest.approx(reserved_free, rel=2e-3)
    assert oom.fragmented is fragmented
    r = report(pod(1), lines(name))
    assert r.verdict == "cuda-oom"
    assert f"GPU {device}" in r.findings[0].message
    assert (r.finding("cuda-fragmentation") is not None) is fragmented
    if fragmented:
        assert "expandable_segments:True" in r.findings[1].action


def test_cuda_oom_numbers_in_the_finding() -> None:
    r = report(pod(1), lines("cuda-oom-capacty-other-process.log"))
    f = r.findings[0]
    assert f.evidence["other_pids"] == [250345]
    assert "132.0 MiB" in f.message or "132 MiB" in f.message, f.message
    assert f.evidence["total_bytes"] == int(23.64 * GIB)


def test_a_cuda_oom_inside_a_chain_is_the_cause_not_the_last_exception() -> None:
    tail = lines("cuda-oom-fragmented.log")
    exc = training_log.python_exception(tail)
    assert exc is not None
    assert exc.line == "RuntimeError: DataLoader worker (pid(s) 3216) exited unexpectedly"
    assert exc.origin.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB")
    assert report(pod(1), tail).verdict == "cuda-oom"


def test_python_exception_with_a_traceback_inside_a_traceback() -> None:
    tail = [line for line in lines("cuda-oom-fragmented.log") if "CUDA" not in line] + []
    tail.insert(
        3, "ValueError: bad shape (3, 4)"
    )  # the first traceback's own exception, as CPython prints it
    r = report(pod(1), tail)
    assert r.verdict == "python-exception"
    assert r.findings[0].evidence["exception"] == "RuntimeError"
    chain = r.finding("exception-chain")
    assert chain is not None and "ValueError: bad shape" in chain.message


def test_an_exception_only_counts_when_the_container_failed() -> None:
    tail = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "KeyError: 'a'"]
    assert report(pod(1), tail).findings[0].message.endswith("KeyError: 'a'")
    assert termination.find(pod(0)) == []


@pytest.mark.parametrize("name", ["dataloader-bus-error.log", "dataloader-shm-worker.log"])
def test_shm_full_from_torchs_own_words_with_exit_1(name: str) -> None:
    r = report(pod(1), lines(name))
    assert r.verdict == "shm-full"
    assert "64.0 MiB" in r.findings[0].message and "runtime's default" in r.findings[0].message


def test_shm_full_names_the_emptydir_size_limit() -> None:
    spec = {
        "containers": [{"name": "trainer", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}],
    }
    r = report(pod(135, spec=spec), ["Bus error (core dumped)"])
    assert r.verdict == "shm-full"
    assert r.findings[0].evidence["shm_bytes"] == 2 * GIB
    assert "sizeLimit 2Gi" in r.findings[0].message


def test_a_bus_error_printed_by_user_code_is_not_shm_full() -> None:
    tail = [
        "CAN adapter: Bus error on channel 2, retrying",
        "Traceback (most recent call last):",
        '  File "can.py", line 9, in <module>',
        "can.CanError: Bus error",
    ]
    r = report(pod(1), tail)
    assert r.verdict == "python-exception"
    assert r.finding("shm-full") is None


def test_segfault_from_exit_139_and_from_torchruns_minus_11() -> None:
    assert report(pod(139), ["Segmentation fault (core dumped)"]).verdict == "segfault"
    child = [
        "Root Cause (first observed failure): [0]: time : 2024-12-23_05:18:02 host : h rank : 0 "
        "(local_rank: 0) exitcode : -11 (pid: 3304209) error_file: <N/A>"
    ]
    assert report(pod(1), child).verdict == "segfault"


@pytest.mark.parametrize(
    ("key", "verdict"),
    [
        ("memory-eviction", "eviction"),
        ("ephemeral-eviction-new", "ephemeral-storage-eviction"),
        ("ephemeral-eviction-old", "ephemeral-storage-eviction"),
        ("ephemeral-eviction-threshold-only", "ephemeral-storage-eviction"),
    ],
)
def test_evictions_by_resource(key: str, verdict: str) -> None:
    msg = MESSAGES[key]
    r = report(pod(None, status={"phase": "Failed", **msg}), [])
    assert r.verdict == verdict


def test_node_pressure_eviction_for_other_resources() -> None:
    status = {"reason": "Evicted", "message": "The node was low on resource: pids. "}
    assert report(pod(None, status=status), []).verdict == "node-pressure-eviction"


# The kubelet's eviction messages, built as pkg/kubelet/eviction/helpers.go builds them (and as
# kubelets before 1.8 wrote them), with any container, quantity and volume in them.
_names = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)
_units = st.sampled_from(["Ki", "Mi", "Gi", "M"])
_quantities = st.one_of(st.integers(0, 10**12).map(str),
                        st.builds("{}{}".format, st.integers(1, 10**6), _units))


def _node_low(resource: str) -> st.SearchStrategy[str]:
    """``nodeLowMessageFmt``, then the threshold and the containers using most (either form)."""
    threshold = st.builds("Threshold quantity: {}, available: {}. ".format, _quantities, _quantities)
    usage = st.one_of(
        st.builds("Container {} was using {}, which exceeds its request of {}. ".format, _names, _quantities,
                  _quantities),
        st.builds(("Container {} was using {}, request is {}, has larger consumption of " + resource + ". ")
                  .format, _names, _quantities, _quantities),
    )
    return st.builds(lambda t, u: f"The node was low on resource: {resource}. {t}{''.join(u)}",
                     st.one_of(st.just(""), threshold), st.lists(usage, max_size=3))


_EVICTIONS = {
    "ephemeral-storage-eviction": st.one_of(
        _node_low("ephemeral-storage"),
        st.sampled_from(["nodefs", "imagefs", "nodefsInodes", "[DiskPressure]"]).map(
            "The node was low on resource: {}.".format),
        st.builds('Container {} exceeded its local ephemeral storage limit "{}". '.format, _names,
                  _quantities),
        st.builds("Pod ephemeral local storage usage exceeds the total limit of containers {}. ".format,
                  _quantities),
        st.builds('Usage of EmptyDir volume "{}" exceeds the limit "{}". '.format, _names, _quantities),
        st.just("Pod The node had condition: [DiskPressure]. "),
    ),
    "eviction": st.one_of(_node_low("memory"), st.just("The node was low on resource: [MemoryPressure]."),
                          st.just("The node was low on resource: memory.")),
    "node-pressure-eviction": st.one_of(_node_low("pids"),
                                        st.just("Pod The node had condition: [PIDPressure]. ")),
}


@settings(max_examples=300, deadline=None)
@given(data=st.data(), want=st.sampled_from(sorted(_EVICTIONS)), crlf=st.booleans())
def test_every_form_of_the_kubelets_eviction_messages(data: st.DataObject, want: str, crlf: bool) -> None:
    message = data.draw(_EVICTIONS[want])
    text = message.replace(". ", ".\r\n") if crlf else message  # a message pasted over lines
    status = {"phase": "Failed", "reason": "Evicted", "message": text}
    assert report(pod(None, status=status), []).verdict == want, message


@pytest.mark.parametrize("reason", sorted(exit_causes.DISRUPTIONS))
def test_disruption_target_is_preempted(reason: str) -> None:
    cond = {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": "m"}
    r = report(pod(143, status={"conditions": [cond]}), [])
    assert r.verdict == "preempted"
    assert r.findings[0].evidence["disruption_reason"] == reason


def test_kubelet_oomkilled_still_wins_over_the_log() -> None:
    r = report(pod(137, reason="OOMKilled"), lines("cuda-oom-expandable.log"))
    assert r.verdict == "memcg-limit"


def test_nothing_in_the_tail_gives_no_verdict_for_exit_1() -> None:
    assert report(pod(1), ["epoch 3 loss 0.12"]).verdict is None


def test_rank_prefixes_are_read_through() -> None:
    tail = ["[rank2]: " + line for line in lines("cuda-oom-torch1-gpu1.log")]
    oom = training_log.cuda_oom(tail)
    assert oom is not None and oom.device == 1
    assert training_log.python_exception(tail) is not None


def test_peer_signals_and_child_failures_on_real_texts() -> None:
    kinds = {s.kind for s in training_log.peer_signals(lines("nccl-watchdog-old.log"))}
    assert kinds == {"nccl-timeout", "nccl-abort"}
    assert [s.kind for s in training_log.peer_signals(lines("nccl-watchdog-torch25.log"))] == ["nccl-timeout"]
    assert [s.kind for s in training_log.peer_signals(lines("nccl-remote-error.log"))] == ["peer-lost"]
    for name in ("torchrun-sigterm.log", "torchrun-sigterm-old.log"):
        assert [s.kind for s in training_log.peer_signals(lines(name))] == ["agent-sigterm"]
    child = training_log.child_failure(lines("childfailed-summary.log"))
    assert child is not None and (child.rank, child.local_rank, child.exit_code, child.pid) == (
        0,
        0,
        1,
        15724,
    )
    quoted = training_log.child_failure(lines("childfailed-sigkill-quoted.log"))
    assert quoted is not None and (quoted.exit_code, quoted.pid) == (-9, 6774)


def test_the_agents_own_failed_line_names_the_first_failed_worker() -> None:
    """Where torchrun's summary block is cut off, its agent's "failed (exitcode: -11)" line still tells."""
    from pathlib import Path

    from podmortem.diagnosis import exit_causes, training_log

    corpus = Path(__file__).parents[1] / "fixtures" / "corpus-new"
    for name in ("182-topologic-15-dist-train-sh-xtrace-omp-banner-failed-11.log",
                 "184-anchor3dlane-8-mmseg-log-failed-11-launch-py37.log"):
        facts = training_log.read((corpus / name).read_text().splitlines()[-50:])
        assert facts.child is not None and facts.child.exit_code == -11 and facts.child.pid is not None
        found = exit_causes.segfault(exit_code=1, facts=facts)
        assert found is not None and found.code == "segfault"
