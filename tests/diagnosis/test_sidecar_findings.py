"""Findings from the sidecar's termination message: found in the pod status, and made only on their figures.

The message is the one `podmortem sidecar` writes (its shape from a real-kernel run, docs/sidecar.md):
a trainer OOM-killed at its container's limit with a forked worker beside it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from podmortem.diagnosis import sidecar_findings
from podmortem.diagnosis import termination as term_mod
from podmortem.diagnosis.termination import Termination
from podmortem.reports.sidecar_evidence import SidecarEvidence, render

MIB = 1 << 20
UID = "pod-uid-1"
SIDECAR_IMAGE = "registry.example.com/podmortem:0.1.0"


def evidence(**over: Any) -> SidecarEvidence:
    doc: dict[str, Any] = {
        "v": 1, "podmortem": "0.1.0", "reason": "trainer-gone", "at": "2026-12-04T13:36:26.464258Z",
        "cgroup": {"version": 1, "path": "/kubepods/burstable/podu/abc"},
        "mem": {"usage": 1900 * MIB, "limit": 2048 * MIB, "peak": 2048 * MIB, "limit_hits": 206,
                "anon": 1850 * MIB, "file": 30 * MIB, "shmem": 0, "swap": 0, "age_s": 0.08},
        "oom": {"before": 0, "after": 1},
        "kill": {"victim": {"pid": 26707, "comm": "python", "pss": 1100 * MIB, "role": "trainer"},
                 "gone": [26707, 26708], "at": "2026-12-04T13:36:26.457Z"},
        "top": [{"pid": 26707, "comm": "python", "pss": 1100 * MIB, "role": "trainer"},
                {"pid": 26708, "comm": "pt_data_worker", "pss": 700 * MIB, "role": "worker"}],
        "procs": 2, "samples": 40, "interval_s": 2.0,
        "trend": [900 * MIB, 1300 * MIB, 1700 * MIB, 1900 * MIB], "notes": [],
    }
    doc.update(over)
    return SidecarEvidence.model_validate_json(json.dumps(doc))


def pod(message: str | None, *, sidecar: bool = True) -> dict[str, Any]:
    init = [{"name": term_mod.SIDECAR_CONTAINER, "restartPolicy": "Always", "image": SIDECAR_IMAGE,
             "command": ["podmortem", "sidecar"]}] if sidecar else []
    side_state: dict[str, Any] = (
        {"terminated": {"exitCode": 0, "reason": "Completed", "message": message}}
        if message is not None else {"running": {}}
    )
    return {
        "metadata": {"name": "trainer", "namespace": "default", "uid": UID},
        "spec": {"nodeName": "node-a", "initContainers": init, "containers": [{"name": "trainer"}]},
        "status": {
            "initContainerStatuses": (
                [{"name": term_mod.SIDECAR_CONTAINER, "state": side_state}] if sidecar else []
            ),
            "containerStatuses": [{"name": "trainer", "containerID": "containerd://abc", "state": {
                "terminated": {"exitCode": 137, "reason": "OOMKilled", "containerID": "containerd://abc",
                               "finishedAt": "2026-12-04T13:36:27Z"}}}],
        },
    }


def trainer() -> Termination:
    """The trainer's termination in a pod with the sidecar, its message still to come."""
    [t] = term_mod.find(pod(None))
    return t


def test_the_sidecar_and_its_message_are_found_in_the_pod_status() -> None:
    message = render(evidence())
    [t] = term_mod.find(pod(message))
    assert t.sidecar and t.sidecar_message == message
    [t] = term_mod.find(pod(None))
    assert t.sidecar and t.sidecar_message is None
    [t] = term_mod.find(pod(None, sidecar=False))
    assert not t.sidecar and t.sidecar_message is None
    [t] = term_mod.find(pod("x" * 100_000))
    assert t.sidecar_message is not None and len(t.sidecar_message) == term_mod.SIDECAR_MESSAGE_MAX


def test_findings_name_the_containers_limit_what_filled_it_the_workers_and_the_trend() -> None:
    t = trainer()
    found = {f.code: f for f in sidecar_findings.findings(t, evidence())}
    assert list(found) == [
        "memcg-limit", "anon-dominant", "fork-copies", "memory-growing", "sidecar-evidence"]
    cause = found["memcg-limit"]
    assert "python (pid 26707)" in cause.message and "its own memory limit of 2.0 GiB" in cause.message
    assert cause.evidence["oom_kills_after"] == 1 and cause.evidence["source"] == "sidecar"
    assert found["fork-copies"].evidence["workers_pss_bytes"] == 700 * MIB
    assert "PSS does not tell which" in found["fork-copies"].message
    assert "memcg-limit, anon-dominant, fork-copies, memory-growing" in found["sidecar-evidence"].message


@pytest.mark.parametrize(
    ("over", "absent"),
    [
        ({"kill": None, "oom": {"before": 1, "after": 1}}, "memcg-limit"),  # no kill seen: no cause
        ({"top": [{"pid": 1, "comm": "python", "pss": 1800 * MIB, "role": "trainer"},
                  {"pid": 2, "comm": "w", "pss": 10 * MIB, "role": "worker"}]}, "fork-copies"),
        ({"trend": [1900 * MIB, 1900 * MIB, 1910 * MIB]}, "memory-growing"),
        ({"mem": {"usage": 100, "anon": 40, "file": 30, "shmem": 30, "age_s": 0}}, "anon-dominant"),
    ],
)
def test_a_finding_is_made_only_on_its_figures(over: dict[str, Any], absent: str) -> None:
    t = trainer()
    codes = [f.code for f in sidecar_findings.findings(t, evidence(**over))]
    assert absent not in codes
