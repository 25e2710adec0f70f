"""Reaching the trainer's memory cgroup through /proc/<pid>/root, for every way runtimes mount it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.sidecar import trees

from podmortem.sidecar import cgroup
from podmortem.sidecar.container import MemoryCgroupLine


def test_mountinfo_gives_cgroup_mounts_with_their_roots_unescaped() -> None:
    text = (
        "25 1 0:23 / / rw - ext4 /dev/sda1 rw\n"
        "30 25 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
        r"31 25 0:27 /kube\040pods/c1 /mnt/my\040cg rw master:3 - cgroup cgroup rw,memory" "\n"
        "32 25 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"
        "broken line\n"
    )
    assert cgroup.parse_mountinfo(text) == [
        cgroup.CgroupMount("/", "/sys/fs/cgroup", 2),
        cgroup.CgroupMount("/kube pods/c1", "/mnt/my cg", 1),
    ]


@pytest.mark.parametrize(
    ("path", "root", "below"),
    [
        ("/", "/", ""),
        ("/../c1", "/../c1", ""),
        ("/../c1/sub", "/../c1", "sub"),
        ("/kubepods/pod1/c1", "/", "kubepods/pod1/c1"),
        ("/kubepods/pod1/c1", "/kubepods/pod1/c1", ""),
        ("/kubepods/pod1/c10", "/kubepods/pod1/c1", None),
        ("/../c1", "/", None),  # another namespace's cgroup is not below this one's root
    ],
)
def test_where_a_cgroup_sits_below_its_mount(path: str, root: str, below: str | None) -> None:
    assert cgroup.relative_to_mount(path, root) == below


@pytest.fixture(params=trees.LAYOUTS, ids=lambda layout: layout.name)
def pod(request: pytest.FixtureRequest, tmp_path: Path) -> trees.FakePod:
    pod = trees.FakePod(tmp_path, request.param, oom_kill=3)
    pod.trainer()
    return pod


def _line(pod: trees.FakePod) -> MemoryCgroupLine:
    return MemoryCgroupLine(pod.layout.version, pod.layout.trainer_cgroup)  # type: ignore[arg-type]


def test_the_cgroup_is_found_for_every_layout(pod: trees.FakePod) -> None:
    where = cgroup.locate(pod.proc, trees.TRAINER_PID, _line(pod))
    assert where.resolve() == pod.cgroup_dir.resolve()


def test_the_open_cgroup_reads_its_numbers_even_after_the_trainer_is_gone(pod: trees.FakePod) -> None:
    opened = cgroup.OpenCgroup.open(pod.proc, trees.TRAINER_PID, _line(pod))
    try:
        shutil.rmtree(pod.proc / str(trees.TRAINER_PID))  # /proc/<pid>/root goes with the process
        reading = opened.read()
        assert reading.oom_kill_count == 3
        assert reading.limit_bytes == 536870912
        numbers = (reading.usage_bytes, reading.peak_bytes, opened.limit_hits())
        if pod.layout.version == 1:
            assert numbers == (73203712, 80000000, 17)
        else:
            assert numbers == (323321856, 400000000, 12)
    finally:
        opened.close()


def test_a_cgroup_that_cannot_be_reached_says_where_it_looked(tmp_path: Path) -> None:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    pod.trainer()
    shutil.rmtree(pod.cgroup_dir)
    with pytest.raises(cgroup.CgroupUnreachable, match=r"sys/fs/cgroup"):
        cgroup.OpenCgroup.open(pod.proc, trees.TRAINER_PID, _line(pod))
    pod.cgroup_dir.mkdir()
    with pytest.raises(cgroup.CgroupUnreachable, match=r"no memory\.stat"):
        cgroup.OpenCgroup.open(pod.proc, trees.TRAINER_PID, _line(pod))
