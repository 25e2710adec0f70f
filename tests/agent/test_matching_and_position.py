from __future__ import annotations

from pathlib import Path

from podmortem.agent import matching
from podmortem.kernel import position
from podmortem.kernel.oom_parser import parse_text

KMSG = """\
6,416,173237437,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,\
oom_memcg=/podmortem-test-ab,task_memcg=/podmortem-test-ab,task=python,pid=2466,uid=0
3,417,173238453,-;Memory cgroup out of memory: Killed process 2466 (python) total-vm:221380kB, \
anon-rss:65280kB, file-rss:6616kB, shmem-rss:0kB, UID:0 pgtables:188kB oom_score_adj:0
"""


def test_paths_match_by_whole_components() -> None:
    assert matching.path_belongs("/podmortem-test-ab", "/podmortem-test-ab")
    assert matching.path_belongs("/kubepods/pod-x/ctr", "/kubepods/pod-x")
    assert matching.path_belongs("/docker/n/kubelet/kubepods/pod-x/ctr", "/kubelet/kubepods/pod-x")
    assert not matching.path_belongs("/podmortem-test-abc", "/podmortem-test-ab")
    assert not matching.path_belongs("/kubepods", "/kubepods/pod-x")


def test_a_real_kmsg_record_maps_to_its_cgroup_only() -> None:
    [record] = parse_text(KMSG)
    assert matching.match_record(record, pod_paths={"mine": "/podmortem-test-ab"}) == "mine"
    assert matching.match_record(record, pod_paths={"other": "/podmortem-test-a"}) is None
    assert matching.match_record(record, pod_paths={"outer": "/", "inner": "/podmortem-test-ab"}) == "inner"


def test_position_rules(tmp_path: Path) -> None:
    path = tmp_path / "d" / "pos.json"
    assert position.load(path) is None
    assert position.start_after(None, boot_id="b1") is None
    position.save(path, position.KmsgPosition("b1", 417))
    saved = position.load(path)
    assert saved == position.KmsgPosition("b1", 417)
    assert position.start_after(saved, boot_id="b1") == 417
    assert position.start_after(saved, boot_id="b2") == -1
    path.write_text("{torn")
    assert position.load(path) is None
    assert [p.name for p in path.parent.iterdir()] == ["pos.json"]  # no temporary files left behind
