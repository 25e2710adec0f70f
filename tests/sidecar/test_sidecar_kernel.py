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
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.sidecar import pod

from podmortem.sidecar import evidence as ev
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
    message = user_dir / "termination-log"
    log = user_dir / "sidecar.log"
    trainer, worker = pod.start_trainer(cgroup, trainer_mib=40, worker_mib=20)
    sidecar: subprocess.Popen[bytes] | None = None
    try:
        path = pod.cgroup_line(trainer.pid)
        with log.open("wb") as out:
            sidecar = subprocess.Popen(pod.sidecar_args(termination_log=message, container_cgroup=path),
                                       stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + DEADLINE_S
        while "trainer container found" not in log.read_text():  # found, and sampled once
            assert sidecar.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        pod.go(trainer)
        assert trainer.wait(timeout=DEADLINE_S) == -9  # SIGKILL: the kernel's OOM kill
        assert sidecar.wait(timeout=DEADLINE_S) == 0, log.read_text()  # by itself: the trainer is gone
    finally:
        for proc in (trainer, sidecar):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for pipe in (trainer.stdin, trainer.stdout):
            if pipe is not None:
                pipe.close()
    text = message.read_text()
    assert len(text.encode()) <= ev.MAX_MESSAGE_BYTES
    doc = ev.parse(text)
    assert doc.reason == "trainer-gone"
    assert doc.cgroup == ev.Cgroup(version=cgroup.version, path=path)
    assert doc.kill is not None, text
    assert doc.kill.victim.pid == trainer.pid and doc.kill.victim.role == "trainer", text
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
    assert {p.pid for p in doc.top} == {trainer.pid, worker}
    assert doc.samples >= 1 and doc.interval_s == 2.0
