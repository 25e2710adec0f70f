"""The sidecar against the real kernel: a trainer OOM-killed in its capped memory cgroup, for real.

As in a pod, the trainer (with a forked worker) and ``podmortem sidecar`` are separate processes of
the same unprivileged user (``setpriv``, no capability, no supplementary group); the sidecar reaches
the trainer's cgroup only through ``/proc/<pid>/root`` and ``/proc/<pid>/mountinfo``. What this
machine cannot give: a private PID namespace shared by the two (so the sidecar is told the
trainer's cgroup with ``--container-cgroup``, as ``/proc/<pid>/cgroup`` shows it, instead of
finding it as the lowest pid outside its own), and a cgroup v2 memory controller (cgroup2 here has
none; v1 is used, the layout ``tests/sidecar/trees.py`` covers for v2). The numbers in the
termination message are checked against the cgroup's own files, read by the test as root.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.sidecar import pod

from podmortem.reports import sidecar_evidence as ev
from podmortem_demo import sandbox

pytestmark = pytest.mark.kernel

LIMIT = 160 * pod.MIB
DEADLINE_S = 60.0


@pytest.fixture
def cgroup() -> Iterator[sandbox.MemoryCgroup]:
    reason = pod.why_not()
    if reason is not None:
        pytest.skip(reason)
    with sandbox.MemoryCgroup(limit_bytes=LIMIT, prefix="podmortem-sidecar") as made:
        yield made


@pytest.fixture
def user_dir() -> Iterator[Path]:
    path = pod.user_dir("podmortem-sidecar-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _within_1_percent(ours: int | None, theirs: int) -> bool:
    return ours is not None and abs(ours - theirs) <= 0.01 * theirs


def test_the_termination_message_names_the_victim_and_the_cgroups_own_numbers(
    cgroup: sandbox.MemoryCgroup, user_dir: Path
) -> None:
    kill = pod.kill_watched(cgroup, user_dir, trainer_mib=40, worker_mib=20, deadline_s=DEADLINE_S)
    trainer_pid, worker, path = kill.trainer_pid, kill.worker_pid, kill.cgroup_path
    text = kill.message
    assert len(text.encode()) <= ev.MAX_MESSAGE_BYTES
    doc = ev.parse(text)
    assert doc.reason == "trainer-gone"
    assert doc.cgroup == ev.Cgroup(version=cgroup.version, path=path)
    assert doc.kill is not None, text
    assert doc.kill.victim.pid == trainer_pid and doc.kill.victim.role == "trainer", text
    assert worker in doc.kill.gone
    own_kills = cgroup.oom_kills()
    assert own_kills >= 1
    assert doc.oom == ev.OomCounter(before=0, after=own_kills)
    assert doc.mem is not None
    assert doc.mem.limit == LIMIT == cgroup.limit()
    peak = cgroup.peak_bytes()
    assert peak is not None and _within_1_percent(doc.mem.peak, peak), (doc.mem, peak)
    if cgroup.version == 1:
        hits = int(cgroup._read("memory.failcnt"))
    else:
        hits = int(dict(line.split() for line in cgroup._read("memory.events").splitlines())["max"])
    assert _within_1_percent(doc.mem.limit_hits, hits), (doc.mem, hits)
    assert doc.mem.usage is not None and 0 < doc.mem.usage <= LIMIT
    assert {p.pid for p in doc.top} == {trainer_pid, worker}
    assert doc.samples >= 1 and doc.interval_s == 2.0
