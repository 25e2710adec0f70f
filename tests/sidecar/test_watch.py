"""The sidecar stepped look by look on recorded pods: samples, the kill, the end, and the evidence."""

from __future__ import annotations

import dataclasses
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.sidecar import trees

from podmortem.reports import sidecar_document as sd
from podmortem.reports import sidecar_evidence as ev
from podmortem.sidecar.settings import SidecarSettings
from podmortem.sidecar.watch import ContainerWatch

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=trees.LAYOUTS, ids=lambda layout: layout.name)
def pod(request: pytest.FixtureRequest, tmp_path: Path) -> trees.FakePod:
    return trees.FakePod(tmp_path, request.param, oom_kill=0)


def _watch(pod: trees.FakePod, **settings: object) -> ContainerWatch:
    return ContainerWatch(SidecarSettings(proc_root=pod.proc, own_pid=trees.SIDECAR_PID, **settings))  # type: ignore[arg-type]


def test_a_kill_of_the_trainer_with_its_workers_gone_too(pod: trees.FakePod) -> None:
    watch = _watch(pod, trend=3)
    try:
        assert watch.look(now=0.0, sample=True)  # before the trainer starts: waiting
        assert not watch.seen
        pod.trainer(pss_kb=3_000_000)
        pod.worker(40, pss_kb=3_500_000)
        pod.worker(41, pss_kb=100_000)
        for step in range(1, 6):
            assert watch.look(now=2.0 * step, sample=True)
        assert watch.seen and watch.pids == (12, 40, 41)
        assert watch.look(now=11.0, sample=False)  # an exit-time look: no sample
        # the kernel counts the kill, the victim and its workers go
        pod.oom_kill(1)
        for pid in (12, 40, 41):
            pod.exit(pid)
        assert not watch.look(now=11.3, sample=False)
        doc = watch.evidence(reason="trainer-gone", now=11.4, at=AT)
    finally:
        watch.close()
    assert doc.kill is not None
    assert doc.kill.victim == sd.Process(pid=12, comm="python", pss=3_000_000 * 1024, role="trainer")
    assert doc.kill.gone == [12, 40, 41]
    assert doc.oom == sd.OomCounter(before=0, after=1)
    assert doc.cgroup == sd.Cgroup(version=pod.layout.version, path=pod.layout.trainer_cgroup)
    assert doc.samples == 5 and doc.interval_s == 2.0 and doc.procs == 3
    assert [p.pid for p in doc.top] == [40, 12, 41] and [p.role for p in doc.top] == [
        "worker",
        "trainer",
        "worker",
    ]
    assert doc.mem is not None and doc.mem.age_s == pytest.approx(1.3)
    if pod.layout.version == 1:
        assert (doc.mem.usage, doc.mem.limit, doc.mem.peak, doc.mem.limit_hits) == (
            73203712,
            536870912,
            80000000,
            17,
        )
        assert (doc.mem.anon, doc.mem.file) == (71041024, 2162688)
    else:
        assert (doc.mem.usage, doc.mem.peak, doc.mem.limit_hits) == (323321856, 400000000, 12)
        assert (doc.mem.anon, doc.mem.kernel) == (314535936, 8785920)
    assert len(doc.trend) == 3
    assert ev.parse(sd.render(doc)).model_dump() == dataclasses.asdict(doc)


def test_a_kill_read_when_the_exit_woke_survives_the_runtime_removing_the_cgroup(pod: trees.FakePod) -> None:
    # CI saw it under podman: the look after the exit found the container's cgroup already removed,
    # and the kill went unreported. The counter read at the wake-up (`glance`) has the rise.
    pod.trainer(pss_kb=3_000_000)
    pod.worker(40, pss_kb=100_000)
    watch = _watch(pod)
    try:
        assert watch.look(now=0.0, sample=True)
        pod.oom_kill(1)
        pod.exit(12)
        watch.glance()
        pod.exit(40)
        shutil.rmtree(pod.cgroup_dir)
        assert not watch.look(now=0.1, sample=False)
        doc = watch.evidence(reason="trainer-gone", now=0.2, at=AT)
    finally:
        watch.close()
    assert doc.kill is not None and doc.kill.victim.pid == 12 and doc.kill.gone == [12, 40]
    assert doc.oom == sd.OomCounter(before=0, after=1)


def test_a_worker_killed_alone_is_the_victim_and_the_trainer_goes_on(tmp_path: Path) -> None:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    pod.trainer(pss_kb=1000)
    pod.worker(40, pss_kb=9000)
    watch = _watch(pod)
    try:
        assert watch.look(now=0.0, sample=True)
        pod.oom_kill(1)
        pod.zombie(40)  # killed; its parent has not reaped it yet
        assert watch.look(now=0.5, sample=False)
        pod.set("memory.max_usage_in_bytes", "536870912\n")  # the peak as read after the kill counts
        assert watch.look(now=2.0, sample=True)
        doc = watch.evidence(reason="sigterm", now=3.0, at=AT)
    finally:
        watch.close()
    assert doc.kill is not None and doc.kill.victim.pid == 40 and doc.kill.victim.role == "worker"
    assert doc.reason == "sigterm" and doc.procs == 2  # the sample that still had the victim
    assert doc.mem is not None and doc.mem.age_s == pytest.approx(0.5)


def test_sigterm_before_any_trainer_says_so(tmp_path: Path) -> None:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    watch = _watch(pod)
    assert watch.look(now=0.0, sample=True)
    doc = watch.evidence(reason="sigterm", now=0.1, at=AT)
    assert doc.cgroup is None and doc.mem is None and doc.kill is None and doc.samples == 0
    assert doc.notes == ["no process of the trainer container seen"]


def test_an_unreachable_cgroup_still_samples_processes_and_says_why(tmp_path: Path) -> None:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    pod.trainer()
    (pod.cgroup_dir / "memory.stat").unlink()
    watch = _watch(pod, comm=re.compile("py.*"))
    assert watch.look(now=0.0, sample=True)
    doc = watch.evidence(reason="sigterm", now=0.1, at=AT)
    assert [p.pid for p in doc.top] == [12]
    assert doc.mem is not None and doc.mem.usage is None
    assert doc.oom == sd.OomCounter()
    assert any("cgroup unreadable" in note for note in doc.notes)
