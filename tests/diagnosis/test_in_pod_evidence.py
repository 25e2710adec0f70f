"""The pure checks of the sidecar's testimony against the kubelet's facts (diagnosis.in_pod_evidence)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from podmortem.diagnosis import in_pod_evidence as in_pod

CID = "a07d3c19" * 8
POD = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
START = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
END = datetime(2026, 12, 4, 13, 36, 27, tzinfo=UTC)
SIDECAR = in_pod.InPodContainer(name="podmortem-sidecar", image="pm:1", command=("podmortem", "sidecar"),
                                args=(), native_sidecar=True, message="{}", exit_code=0,
                                finished_at=END + timedelta(seconds=1))
FACTS = in_pod.KubeletFacts(container="trainer", container_id=f"containerd://{CID}", pod_uid=POD,
                            exit_code=137, reason="OOMKilled", started_at=START, finished_at=END,
                            limit_bytes=512 << 20,
                            sidecar=SIDECAR)
HONEST = in_pod.Testimony(
    written_at=END, reason="trainer-gone", kill=True, kill_at=END - timedelta(seconds=1), victim_pid=7,
    gone=(7, 8), oom_before=0, oom_after=1, limit_bytes=512 << 20, peak_bytes=512 << 20,
    usage_bytes=500 << 20,
    cgroup_path=f"/kubepods/burstable/pod{POD.replace('-', '_')}/cri-containerd-{CID}.scope",
)


def test_honest_testimony_contradicts_nothing() -> None:
    assert in_pod.contradictions(HONEST, FACTS) == []


@pytest.mark.parametrize(("change", "words"), [
    ({"limit_bytes": 1 << 20, "peak_bytes": 1 << 20, "usage_bytes": 1 << 20}, "spec's limit"),
    ({"oom_before": 9, "oom_after": 2}, "from 9 to 2"),
    ({"victim_pid": 99}, "not among the pids gone"),
    ({"peak_bytes": 4 << 30}, "peak"),
    ({"written_at": START - timedelta(days=1)}, "before 'trainer' started"),
    ({"written_at": END - timedelta(hours=1)}, "was gone at"),
    ({"kill_at": END + timedelta(hours=1)}, "after 'trainer' ended"),
    ({"cgroup_path": f"/kubepods/pod{POD}/{'b' * 64}"}, "names container bbbbbbbbbbbb"),
    ({"cgroup_path": "/kubepods/pod11111111-2222-3333-4444-555555555555/x"}, "names pod"),
])
def test_each_contradiction_is_named(change: dict[str, object], words: str) -> None:
    from dataclasses import replace

    found = in_pod.contradictions(replace(HONEST, **change), FACTS)  # type: ignore[arg-type]
    assert any(words in c for c in found), found


def test_a_sidecar_that_was_killed_is_a_contradiction() -> None:
    from dataclasses import replace

    facts = replace(FACTS, sidecar=replace(SIDECAR, exit_code=137, reason="Error"))
    assert any("exit 137" in c for c in in_pod.contradictions(HONEST, facts))


def test_only_the_injected_container_is_identified() -> None:
    from dataclasses import replace

    identity = in_pod.SidecarIdentity(image="pm:1", command=("podmortem", "sidecar"))
    assert in_pod.identify([SIDECAR], identity) is SIDECAR
    for other in (replace(SIDECAR, image="evil:1"), replace(SIDECAR, args=("--container-cgroup", "/x")),
                  replace(SIDECAR, native_sidecar=False), replace(SIDECAR, plain=False),
                  replace(SIDECAR, command=("podmortem", "sidecar", "--comm", "x"))):
        assert in_pod.identify([other], identity) is None
    assert in_pod.identify([SIDECAR], None) is None


@pytest.mark.parametrize(("path", "covers"), [
    ("/dev", True), ("/dev/", True), ("/", True), ("/dev/termination-log", True),
    ("/var/run/secrets/kubernetes.io/serviceaccount", False), ("/devices", False), (None, False),
])
def test_a_volume_over_the_termination_log(path: object, covers: bool) -> None:
    assert in_pod.covers_termination_log(path) is covers


def test_the_kubelets_words_for_an_oom_kill() -> None:
    assert in_pod.kubelet_reports_oom_kill(137, "Error")
    assert in_pod.kubelet_reports_oom_kill(None, "OOMKilled")
    assert not in_pod.kubelet_reports_oom_kill(1, "Error")
