"""The sidecar's own bounds against a trainer that chooses its process count and breaks the sidecar's reads.

On recorded pods (tests/sidecar/trees.py): a sample reads the PSS of a bounded number of processes,
the largest by resident size; "every process of the trainer has exited" is concluded from a /proc
listing that was read, never from one that failed; and whatever fails, a document is written.
The real kernel's versions (tmpfs, FIFO, sparse file, RLIMIT_NOFILE) are in test_sidecar_hostile.py.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from tests.sidecar import trees

from podmortem.reports import sidecar_evidence as ev
from podmortem.sidecar import untrusted_files
from podmortem.sidecar.main import run_sidecar
from podmortem.sidecar.settings import SidecarSettings
from podmortem.sidecar.watch import ContainerWatch


def _settings(pod: trees.FakePod, tmp_path: Path) -> SidecarSettings:
    return SidecarSettings(proc_root=pod.proc, own_pid=trees.SIDECAR_PID,
                           termination_log=tmp_path / "termination-log")


def test_a_failed_listing_of_proc_concludes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    pod.trainer()
    watch = ContainerWatch(_settings(pod, tmp_path))
    try:
        assert watch.look(now=0.0, sample=True) and watch.seen
        listdir = os.listdir

        def emfile(path: object) -> list[str]:
            if Path(str(path)) == pod.proc:
                raise OSError(errno.EMFILE, "Too many open files")
            return listdir(path)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "listdir", emfile)
        assert watch.look(now=0.5, sample=False)  # still watching: an error is not evidence
        monkeypatch.setattr(os, "listdir", listdir)
        pod.exit(trees.TRAINER_PID)
        assert not watch.look(now=1.0, sample=False)  # a listing read, without the trainer: gone
    finally:
        watch.close()


def test_a_sample_reads_the_trainer_and_the_largest_few(tmp_path: Path) -> None:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    pod.trainer()
    workers = range(100, 400)
    for pid in workers:
        pod.worker(pid)
        (pod.proc / str(pid) / "statm").write_text(f"9000 {pid} 10 1 0 100 0\n")  # resident pages = pid
    (pod.proc / str(trees.TRAINER_PID) / "statm").write_text("9000 5 10 1 0 100 0\n")
    watch = ContainerWatch(_settings(pod, tmp_path))
    try:
        assert watch.look(now=0.0, sample=True)
        sample = watch.ring.last()
        doc = watch.evidence(reason="sigterm", now=0.1)
    finally:
        watch.close()
    assert sample is not None
    assert len(sample.processes) <= 16
    picked = {p.pid for p in sample.processes}
    assert trees.TRAINER_PID in picked
    assert max(workers) in picked and min(workers) not in picked
    assert doc.procs == 1 + len(workers)


def test_whatever_fails_a_document_says_what_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    pod.trainer()

    def broken(self: ContainerWatch, *, now: float, sample: bool) -> bool:
        raise RuntimeError("a read the trainer broke")

    monkeypatch.setattr(ContainerWatch, "look", broken)
    settings = _settings(pod, tmp_path)
    assert run_sidecar(settings) == 0
    doc = ev.parse(settings.termination_log.read_text())
    assert doc.reason == "failed"
    assert any("RuntimeError: a read the trainer broke" in note for note in doc.notes), doc.notes


def test_a_fifo_and_an_oversized_file_are_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "memory.stat")
    with (tmp_path / "memory.max").open("wb") as sparse:
        sparse.truncate(2 << 30)
    (tmp_path / "memory.current").write_text("123\n")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(untrusted_files.FileRefused, match="not a regular file"):
            untrusted_files.read_bounded(fd, "memory.stat", max_bytes=16384, cgroupfs=False)
        with pytest.raises(untrusted_files.FileRefused, match="over 16384 bytes"):
            untrusted_files.read_bounded(fd, "memory.max", max_bytes=16384, cgroupfs=False)
        with pytest.raises(untrusted_files.FileRefused, match="not a cgroup filesystem"):
            untrusted_files.read_bounded(fd, "memory.current", max_bytes=16384, cgroupfs=True)
        assert untrusted_files.read_bounded(fd, "memory.current", max_bytes=16384, cgroupfs=False) == "123\n"
    finally:
        os.close(fd)


def test_a_real_cgroup_filesystem_is_recognised() -> None:
    for candidate in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
        try:
            fd = os.open(candidate, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            kind = untrusted_files.filesystem_type(fd)
        finally:
            os.close(fd)
        if kind in untrusted_files.CGROUP_MAGICS:
            return
    pytest.skip("no cgroup filesystem mounted at /sys/fs/cgroup here")
