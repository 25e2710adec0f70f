from __future__ import annotations

from pathlib import Path

import pytest
from tests.agent import trees

from podmortem.cgroups import cgroupfs


def test_detect_v1_under_memory(tmp_path: Path) -> None:
    trees.make_v1_root(tmp_path)
    h = cgroupfs.detect(tmp_path)
    assert h == cgroupfs.MemoryHierarchy(tmp_path / "memory", 1)


def test_detect_v2_unified(tmp_path: Path) -> None:
    trees.make_v2_root(tmp_path)
    assert cgroupfs.detect(tmp_path) == cgroupfs.MemoryHierarchy(tmp_path, 2)


def test_detect_v2_without_memory_controller_falls_back_to_v1(tmp_path: Path) -> None:
    # The hybrid layout of this very machine: cgroup2 without memory, v1 memory beside it.
    trees.write(tmp_path / "cgroup.controllers", "cpu pids\n")
    trees.make_v1_root(tmp_path)
    assert cgroupfs.detect(tmp_path).version == 1


def test_detect_nothing_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(cgroupfs.HierarchyMissing, match="no memory cgroup hierarchy"):
        cgroupfs.detect(tmp_path)


def test_read_v1_pod_with_container_pids(tmp_path: Path) -> None:
    trees.make_v1_root(tmp_path)
    trees.make_v1_cgroup(tmp_path, trees.cgroupfs_pod(), pids=())
    trees.make_v1_cgroup(tmp_path, trees.cgroupfs_container(), pids=(100, 101))
    trees.make_v1_cgroup(tmp_path, trees.cgroupfs_pod() + "/pause", pids=(99,))
    h = cgroupfs.detect(tmp_path)
    r = cgroupfs.read_cgroup(h, trees.cgroupfs_pod())
    assert (r.usage_bytes, r.peak_bytes, r.limit_bytes) == (73203712, 80000000, 104857600)
    assert r.oom_kill_count == 0
    assert "total_rss 71041024" in r.stat_text
    assert r.pids == {
        100: trees.cgroupfs_container(),
        101: trees.cgroupfs_container(),
        99: trees.cgroupfs_pod() + "/pause",
    }


def test_v1_unlimited_is_none(tmp_path: Path) -> None:
    trees.make_v1_root(tmp_path)
    trees.make_v1_cgroup(tmp_path, "/x", limit=9223372036854771712)
    assert cgroupfs.read_cgroup(cgroupfs.detect(tmp_path), "/x").limit_bytes is None


def test_read_v2_systemd_pod(tmp_path: Path) -> None:
    trees.make_v2_root(tmp_path)
    trees.make_v2_cgroup(tmp_path, trees.systemd_pod(), oom_kill=1)
    trees.make_v2_cgroup(tmp_path, trees.systemd_container(), pids=(5, 6))
    r = cgroupfs.read_cgroup(cgroupfs.detect(tmp_path), trees.systemd_pod())
    assert (r.usage_bytes, r.peak_bytes, r.limit_bytes, r.oom_kill_count) == (
        323321856,
        400000000,
        536870912,
        1,
    )
    assert set(r.pids) == {5, 6}


def test_v2_max_and_no_peak_file(tmp_path: Path) -> None:
    trees.make_v2_root(tmp_path)
    trees.make_v2_cgroup(tmp_path, "/a", limit="max", peak=None)
    r = cgroupfs.read_cgroup(cgroupfs.detect(tmp_path), "/a")
    assert r.limit_bytes is None and r.peak_bytes is None


def test_v2_zero_pids_from_other_namespaces_are_dropped(tmp_path: Path) -> None:
    trees.make_v2_root(tmp_path)
    d = trees.make_v2_cgroup(tmp_path, "/a")
    (d / "cgroup.procs").write_text("0\n0\n17\n")
    assert cgroupfs.read_cgroup(cgroupfs.detect(tmp_path), "/a").pids == {17: "/a"}


def test_missing_cgroup(tmp_path: Path) -> None:
    trees.make_v2_root(tmp_path)
    with pytest.raises(cgroupfs.CgroupMissing):
        cgroupfs.read_cgroup(cgroupfs.detect(tmp_path), "/gone")
