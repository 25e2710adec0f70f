"""Finding the trainer container's processes in a shared /proc, by the documented rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.sidecar import trees

from podmortem.sidecar import container


def test_the_memory_line_is_v1s_memory_hierarchy_on_a_hybrid_host_else_the_unified_one() -> None:
    hybrid = "12:pids:/a\n4:memory:/kubepods/pod1/c1\n0::/system.slice/x.scope\n"
    assert container.memory_cgroup_line(hybrid) == container.MemoryCgroupLine(1, "/kubepods/pod1/c1")
    assert container.memory_cgroup_line("4:cpu,memory:/x\n") == container.MemoryCgroupLine(1, "/x")
    assert container.memory_cgroup_line("0::/../c2\n") == container.MemoryCgroupLine(2, "/../c2")
    assert container.memory_cgroup_line("garbage\n1:name=systemd\n") is None


def test_the_state_of_a_process_is_read_after_its_name_whatever_the_name_holds(tmp_path: Path) -> None:
    stat = tmp_path / "5" / "stat"
    stat.parent.mkdir()
    stat.write_text("5 (a) Z (b) S 1 5 5 0\n")
    assert container.parent_if_running(tmp_path, 5) == 1
    stat.write_text("5 (a) S (b) Z 1 5 5 0\n")
    assert container.parent_if_running(tmp_path, 5) is None
    assert container.parent_if_running(tmp_path, 6) is None


@pytest.fixture(params=trees.LAYOUTS, ids=lambda layout: layout.name)
def pod(request: pytest.FixtureRequest, tmp_path: Path) -> trees.FakePod:
    pod = trees.FakePod(tmp_path, request.param)
    pod.trainer()
    pod.worker(40)
    pod.worker(41)
    return pod


def _find(pod: trees.FakePod, **rule: object) -> container.Container | None:
    selection = container.Selection(own_pid=trees.SIDECAR_PID, **rule)  # type: ignore[arg-type]
    return container.find_container(pod.proc, selection)


def test_by_default_the_processes_outside_the_sidecars_cgroup_without_pause(pod: trees.FakePod) -> None:
    found = _find(pod)
    assert found is not None
    assert found.pids == (trees.TRAINER_PID, 40, 41)
    assert found.cgroup == container.MemoryCgroupLine(pod.layout.version, pod.layout.trainer_cgroup)
    assert found.parents == {12: 1, 40: 12, 41: 12}
    assert found.comms[40] == "pt_data_worker"


def test_zombies_and_exited_processes_are_not_running(pod: trees.FakePod) -> None:
    pod.zombie(41)
    pod.exit(40)
    found = _find(pod)
    assert found is not None and found.pids == (trees.TRAINER_PID,)


def test_nothing_found_before_the_trainer_starts(tmp_path: Path) -> None:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    assert _find(pod) is None


def test_another_container_is_told_apart_by_comm_or_by_cgroup(tmp_path: Path) -> None:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    pod.add(9, comm="envoy", cgroup="/../proxy", root=tmp_path / "roots" / "proxy")  # an earlier sidecar
    pod.trainer()
    pod.worker(40)
    default = _find(pod)
    assert default is not None and default.pids == (9,)  # the rule: the lowest pid outside the sidecar
    by_comm = _find(pod, comm=re.compile("python.*"))
    assert by_comm is not None and by_comm.pids == (12, 40) and by_comm.others == 1
    by_cgroup = _find(pod, container_cgroup=pod.layout.trainer_cgroup)
    assert by_cgroup is not None and by_cgroup.pids == (12, 40) and by_cgroup.others == 1
    assert _find(pod, comm=re.compile("torchrun")) is None


def test_a_found_cgroup_stays_the_watched_one(tmp_path: Path) -> None:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    pod.trainer()
    selection = container.Selection(own_pid=trees.SIDECAR_PID)
    first = container.find_container(pod.proc, selection)
    assert first is not None
    pod.exit(trees.TRAINER_PID)
    pod.add(9, comm="envoy", cgroup="/../proxy", root=tmp_path / "roots" / "proxy")
    assert container.find_container(pod.proc, selection, cgroup=first.cgroup.path) is None


def test_processes_in_sub_cgroups_of_the_container_are_its_own(tmp_path: Path) -> None:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    pod.trainer()
    pod.worker(40, cgroup=pod.layout.trainer_cgroup + "/sub")
    found = _find(pod)
    assert found is not None and found.pids == (12, 40)
