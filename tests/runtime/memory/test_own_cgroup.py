"""Finding and reading the process's own memory cgroup: recorded layouts, fake files, this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from podmortem_runtime import own_cgroup

HOST_V1_CGROUP = "12:pids:/kubepods/pod1/abc\n4:memory:/kubepods/burstable/pod1/abc\n0::/\n"
HOST_V1_MOUNTS = (
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)
# A container without a cgroup namespace: its own cgroup is mounted at /sys/fs/cgroup/memory.
CONTAINER_V1_MOUNTS = (
    "1092 1090 0:32 /kubepods/burstable/pod1/abc /sys/fs/cgroup/memory ro,nosuid "
    "master:15 - cgroup cgroup rw,memory\n"
)
# A cgroup2 container with a cgroup namespace: everything shows as "/".
NS_V2_CGROUP = "0::/\n"
NS_V2_MOUNTS = "1100 1090 0:27 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_host_v1_preferred_over_empty_cgroup2() -> None:
    dirs = own_cgroup.candidate_dirs(HOST_V1_CGROUP, HOST_V1_MOUNTS)
    assert dirs[0] == (
        Path("/sys/fs/cgroup/memory/kubepods/burstable/pod1/abc"),
        Path("/sys/fs/cgroup/memory"),
        1,
    )
    assert dirs[1] == (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/unified"), 2)


def test_container_v1_mount_root_is_its_own_cgroup() -> None:
    dirs = own_cgroup.candidate_dirs(HOST_V1_CGROUP, CONTAINER_V1_MOUNTS)
    assert dirs == [(Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/memory"), 1)]


def test_namespaced_v2() -> None:
    assert own_cgroup.candidate_dirs(NS_V2_CGROUP, NS_V2_MOUNTS) == [
        (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup"), 2)
    ]


def _files(directory: Path, **files: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name.replace("_", ".", 1)).write_text(text)


def test_v1_reads_and_hierarchical_limit(tmp_path: Path) -> None:
    _files(
        tmp_path,
        memory_usage_in_bytes="1000\n",
        memory_max_usage_in_bytes="5000\n",
        memory_limit_in_bytes="9223372036854771712\n",
        memory_stat="cache 10\nrss 900\nhierarchical_memory_limit 8000\n",
    )
    cg = own_cgroup.OwnCgroup(tmp_path, version=1, mount_point=tmp_path)
    assert (cg.usage(), cg.peak(), cg.limit()) == (1000, 5000, 8000)


def test_v1_unlimited(tmp_path: Path) -> None:
    _files(
        tmp_path,
        memory_usage_in_bytes="1000\n",
        memory_limit_in_bytes="9223372036854771712\n",
        memory_stat="hierarchical_memory_limit 9223372036854771712\n",
    )
    assert own_cgroup.OwnCgroup(tmp_path, version=1, mount_point=tmp_path).limit() is None


def test_v2_limit_from_a_parent_and_no_peak_file(tmp_path: Path) -> None:
    _files(tmp_path, memory_max="max\n")
    _files(tmp_path / "pod", memory_max="6000\n")
    _files(tmp_path / "pod" / "ctr", memory_current="2000\n", memory_max="max\n")
    cg = own_cgroup.OwnCgroup(tmp_path / "pod" / "ctr", version=2, mount_point=tmp_path)
    assert (cg.usage(), cg.peak(), cg.limit()) == (2000, None, 6000)


def test_v2_max_everywhere_is_unlimited(tmp_path: Path) -> None:
    _files(tmp_path / "ctr", memory_current="2000\n", memory_max="max\n", memory_peak="4000\n")
    cg = own_cgroup.OwnCgroup(tmp_path / "ctr", version=2, mount_point=tmp_path)
    assert (cg.peak(), cg.limit()) == (4000, None)


def test_nothing_to_read_is_none(tmp_path: Path) -> None:
    _files(tmp_path, cgroup="0::/\n", mountinfo="")
    assert own_cgroup.find_own_cgroup(proc_self=tmp_path) is None


def test_this_machine() -> None:
    cg = own_cgroup.find_own_cgroup()
    if cg is None:
        pytest.skip("no readable memory cgroup for this process on this machine")
    assert cg.usage() > 0
    peak = cg.peak()
    assert peak is None or peak > 0
