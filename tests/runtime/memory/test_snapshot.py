"""memory_line on this process, and the sampler thread on a cgroup whose usage we control."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from podmortem import memory_line as parser
from podmortem_runtime import memory, own_cgroup, procfs


def test_line_for_this_process_parses_and_matches_proc() -> None:
    text = memory.memory_line(12)
    line = parser.parse(text)
    assert line is not None and line.epoch == 12
    status = procfs.read_status()
    assert abs(line.rss_bytes - status.rss_bytes) <= max(0.01 * status.rss_bytes, 1 << 20)
    assert line.rss_peak_bytes >= line.rss_bytes * 0.99
    assert line.cuda is None, "no CUDA was initialised in this process, so the field must be absent"
    if own_cgroup.find_own_cgroup() is None:
        assert line.pod is None
    else:
        assert line.pod is not None and line.pod.usage_bytes > 0


def test_workers_field_counts_live_children() -> None:
    children = [
        subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        for _ in range(2)
    ]
    try:
        line = parser.parse(memory.memory_line(1))
        assert line is not None and line.workers is not None
        assert line.workers.count >= 2
        assert line.workers.pss_bytes > 0
    finally:
        for child in children:
            assert child.stdin is not None
            child.stdin.close()
            child.wait()


@pytest.fixture
def fake_v2(tmp_path: Path) -> own_cgroup.OwnCgroup:
    (tmp_path / "memory.current").write_text("1024\n")
    (tmp_path / "memory.max").write_text("max\n")
    return own_cgroup.OwnCgroup(tmp_path, version=2, mount_point=tmp_path)


def _wait_for(sampler: memory.PeakSampler, value: int) -> None:
    deadline = time.monotonic() + 10
    while sampler.running_max < value:
        assert time.monotonic() < deadline, "sampler never saw the value"
        time.sleep(0.005)


def test_sampler_attributes_a_passing_peak_to_its_epoch(fake_v2: own_cgroup.OwnCgroup) -> None:
    sampler = memory.PeakSampler(fake_v2, interval_s=0.005).start()
    try:
        (fake_v2.path / "memory.current").write_text("9216\n")  # an evaluation's peak...
        _wait_for(sampler, 9216)
        (fake_v2.path / "memory.current").write_text("2048\n")  # ...gone by the end of the epoch
        first = parser.parse(memory.memory_line(1, sampler=sampler))
        second = parser.parse(memory.memory_line(2, sampler=sampler))
    finally:
        sampler.stop()
    assert first is not None and first.pod is not None
    assert first.pod.usage_bytes == 2048
    assert first.pod.epoch_peak_bytes == 9216
    # No kernel peak on this "old v2 kernel": the line says so and keeps the running maximum.
    assert first.pod.peak_is_sampled and first.pod.peak_bytes >= 9216
    assert second is not None and second.pod is not None
    assert second.pod.epoch_peak_bytes == 2048


def test_kernel_peak_wins_when_there_is_one(fake_v2: own_cgroup.OwnCgroup) -> None:
    (fake_v2.path / "memory.peak").write_text("7168\n")
    line = parser.parse(memory.memory_line(1, sampler=memory.PeakSampler(fake_v2)))
    assert line is not None and line.pod is not None
    assert (line.pod.peak_bytes, line.pod.peak_is_sampled) == (7168, False)
