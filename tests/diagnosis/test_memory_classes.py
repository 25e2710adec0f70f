"""Which class of memory filled the cgroup, from every key memory.stat prints (issue 22 item 4).

Each class with a cure of its own gets its own finding; the dominant class is the finest one
holding at least half of the cgroup's memory, else the coarse category (anon, shmem, file,
kernel, sock, hugetlb). The stat dicts are shaped like the kernel's own memory.stat: v2 keys
from ``memory_stats[]`` in mm/memcontrol.c, v1 keys from ``memcg1_stat_names[]``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.kernel import synthetic
from tests.kernel.synthetic import SyntheticKill, SyntheticTask

from podmortem import diagnosis
from podmortem.diagnosis import categories
from podmortem.diagnosis.facts import RecordFacts, record_facts
from podmortem.kernel import oom_parser
from podmortem.reports.memory import CgroupMemoryStat

MIB = 1024 * 1024
RECORDS = Path(__file__).parent.parent / "fixtures" / "oom-records"


def _v2(**keys: int) -> dict[str, int]:
    """A v2 memory.stat with every size key the kernel prints; ``keys`` (in MiB) override."""
    stat = {
        "anon": 20,
        "file": 6,
        "kernel": 5,
        "kernel_stack": 1,
        "pagetables": 1,
        "sec_pagetables": 0,
        "percpu": 0,
        "sock": 0,
        "vmalloc": 0,
        "shmem": 1,
        "zswap": 0,
        "zswapped": 0,
        "file_mapped": 2,
        "file_dirty": 1,
        "file_writeback": 0,
        "swapcached": 0,
        "anon_thp": 0,
        "file_thp": 0,
        "shmem_thp": 0,
        "inactive_anon": 20,
        "active_anon": 0,
        "inactive_file": 3,
        "active_file": 2,
        "unevictable": 0,
        "slab_reclaimable": 1,
        "slab_unreclaimable": 1,
        "slab": 2,
    }
    stat.update(keys)
    return {k: v * MIB for k, v in stat.items()} | {"pgfault": 12345, "workingset_refault_anon": 7}


def _facts(stat: dict[str, int], *, version: int = 2, kmem: int | None = None) -> RecordFacts:
    block = CgroupMemoryStat(version=2 if version == 2 else 1, path="/c", stat=stat)
    return RecordFacts(
        limit_bytes=512 * MIB,
        usage_bytes=512 * MIB,
        failcnt=1,
        kmem_bytes=kmem,
        page_size=4096,
        stat_block=block,
        breakdown=block.breakdown(kmem_bytes=kmem),
    )


def test_socket_buffers_are_not_called_a_growing_heap() -> None:
    """The defect: sock 86% of usage, kernel small, and the report said the heap grew."""
    stat = _v2(anon=40, file=10, shmem=0, kernel=20, sock=440, file_dirty=0, slab=8)
    b = _facts(stat).breakdown
    assert b is not None
    assert b.sock_bytes == 440 * MIB and b.kernel_bytes == 20 * MIB  # v2's kernel leaves sock out
    assert b.total_bytes() == (40 + 10 + 20 + 440) * MIB
    assert b.dominant() == "sock" and b.dominant_class() == "sock"
    finding = categories.dominant_category(_facts(stat))
    assert finding is not None and finding.code == "sock-dominant"
    assert finding.evidence["sock_bytes"] == 440 * MIB and finding.evidence["anon_bytes"] == 40 * MIB
    assert finding.evidence["share"] == round(440 / 510, 3)
    assert "socket" in finding.message and "tcp_rmem" in finding.action


def test_without_a_kernel_key_its_parts_are_summed_but_not_sock() -> None:
    """Kernels before 5.18 print no ``kernel``: its parts are summed, and ``sock`` is not one."""
    stat = _v2(anon=40, sock=440)
    del stat["kernel"]
    b = _facts(stat).breakdown
    assert b is not None
    # kernel_stack + pagetables + sec_pagetables + percpu + vmalloc + slab (+ zswap): not sock
    assert b.kernel_bytes == (1 + 1 + 0 + 0 + 0 + 2) * MIB
    assert b.sock_bytes == 440 * MIB
    assert b.dominant_class() == "sock"


@pytest.mark.parametrize(
    ("keys", "code", "class_bytes", "words"),
    [
        (
            {"kernel": 300, "slab": 280, "slab_reclaimable": 250, "slab_unreclaimable": 30},
            "slab-dominant",
            280,
            "slabtop",
        ),
        ({"kernel": 300, "pagetables": 290}, "pagetables-dominant", 290, "huge pages"),
        ({"kernel": 300, "percpu": 290}, "percpu-dominant", 290, "per-CPU"),
        ({"kernel": 300, "kernel_stack": 290}, "kernel-stack-dominant", 290, "threads"),
        ({"kernel": 300, "zswap": 290, "zswapped": 900}, "zswap-dominant", 290, "memory.zswap.max"),
        ({"file": 300, "file_dirty": 200, "file_writeback": 90}, "file-dirty-dominant", 290, "vm.dirty"),
        # kernel fills the cgroup but no single part of it holds half: the coarse category
        (
            {"kernel": 300, "slab": 100, "pagetables": 100, "kernel_stack": 90},
            "kernel-dominant",
            None,
            "threads",
        ),
        # page cache that is clean: file, not dirty
        ({"file": 300, "file_dirty": 10}, "file-dominant", None, "page cache"),
        ({"anon": 300, "anon_thp": 290}, "anon-dominant", None, "heap"),
        ({"file": 300, "shmem": 280}, "shmem-dominant", None, "/dev/shm"),
        ({"hugetlb": 300}, "hugetlb-dominant", None, "hugetlbfs"),
    ],
)
def test_each_class_with_a_cure_of_its_own(
    keys: dict[str, int], code: str, class_bytes: int | None, words: str
) -> None:
    finding = categories.dominant_category(_facts(_v2(**keys)))
    assert finding is not None and finding.code == code
    assert finding.evidence["share"] >= 0.5  # type: ignore[operator]
    assert words in finding.message + " " + finding.action
    if class_bytes is not None:
        assert finding.evidence["class_bytes"] == class_bytes * MIB
    for key, value in keys.items():  # the figures the finding rests on are all in its evidence
        if key in ("file", "shmem"):
            continue  # file is printed net of shmem; both are there as file_bytes/shmem_bytes
        assert finding.evidence[f"{key}_bytes"] == value * MIB, key


def test_no_finding_when_no_category_holds_half() -> None:
    stat = _v2(anon=100, kernel=100, sock=100, file=100, shmem=0)
    assert categories.dominant_category(_facts(stat)) is None
    assert _facts(stat).breakdown.dominant_class() is None  # type: ignore[union-attr]


def test_every_v2_size_key_is_counted_exactly_once() -> None:
    """The coarse categories partition the charged memory; every other size key is part of one."""
    stat = _v2(anon=100, anon_thp=50, file=60, shmem=10, file_mapped=20, file_dirty=5, file_writeback=5,
               kernel=40, kernel_stack=4, pagetables=6, sec_pagetables=1, percpu=2, vmalloc=3, zswap=4,
               slab=15, slab_reclaimable=10, slab_unreclaimable=5, sock=30, hugetlb=20, swapcached=7,
               zswapped=12)
    b = _facts(stat).breakdown
    assert b is not None
    assert b.categories() == {
        "anon": 100 * MIB, "shmem": 10 * MIB, "kernel": 40 * MIB, "sock": 30 * MIB, "file": 50 * MIB,
        "hugetlb": 20 * MIB,
    }
    assert b.total_bytes() == 250 * MIB
    parts = {name: part for name, (part, _) in b.classes().items()}
    assert parts == {
        "slab": "kernel", "pagetables": "kernel", "percpu": "kernel", "kernel_stack": "kernel",
        "zswap": "kernel", "file_dirty": "file",
    }
    assert b.classes()["file_dirty"][1] == 10 * MIB  # dirty + under writeback
    slab = (b.slab_bytes, b.slab_reclaimable_bytes, b.slab_unreclaimable_bytes)
    assert slab == (15 * MIB, 10 * MIB, 5 * MIB)
    assert (b.sec_pagetables_bytes, b.vmalloc_bytes, b.anon_thp_bytes) == (MIB, 3 * MIB, 50 * MIB)
    assert (b.file_mapped_bytes, b.swapcached_bytes, b.zswapped_bytes) == (20 * MIB, 7 * MIB, 12 * MIB)
    # a kernel without ``slab`` (before 5.9) still has its two halves
    del stat["slab"]
    assert _facts(stat).breakdown.slab_bytes == 15 * MIB  # type: ignore[union-attr]


def test_v1_classes_from_its_keys_and_the_kmem_line() -> None:
    """v1: cache holds shmem, mapped_file, dirty and writeback; rss holds rss_huge; swap is not memory."""
    stat = {
        "cache": 300 * MIB, "rss": 60 * MIB, "rss_huge": 40 * MIB, "shmem": 20 * MIB, "mapped_file": 5 * MIB,
        "dirty": 200 * MIB, "writeback": 60 * MIB, "swap": 70 * MIB, "pgfault": 5,
        "total_cache": 300 * MIB, "total_rss": 60 * MIB, "total_rss_huge": 40 * MIB, "total_shmem": 20 * MIB,
        "total_mapped_file": 5 * MIB, "total_dirty": 200 * MIB, "total_writeback": 60 * MIB,
        "total_swap": 70 * MIB,
    }
    facts = _facts(stat, version=1, kmem=10 * MIB)
    b = facts.breakdown
    assert b is not None
    assert b.categories() == {"anon": 60 * MIB, "shmem": 20 * MIB, "kernel": 10 * MIB, "file": 280 * MIB}
    assert b.sock_bytes is None  # v1 charges socket memory to a counter of its own (tcpmem), not memory
    assert (b.file_dirty_bytes, b.file_writeback_bytes, b.file_mapped_bytes) == (200 * MIB, 60 * MIB, 5 * MIB)
    assert (b.anon_thp_bytes, b.swap_bytes) == (40 * MIB, 70 * MIB)
    finding = categories.dominant_category(facts)
    assert finding is not None and finding.code == "file-dirty-dominant"
    assert finding.evidence["file_dirty_bytes"] == 200 * MIB
    assert finding.evidence["file_writeback_bytes"] == 60 * MIB


def test_v1_local_blocks_sum_their_dirty_pages() -> None:
    """Old v1 kernels print each child's local stats; the classes are summed over the subtree too."""
    text = (
        "writer invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=0\n"
        "Task in /c/a killed as a result of limit of /c\n"
        "memory: usage 524288kB, limit 524288kB, failcnt 9\n"
        "memory+swap: usage 524288kB, limit 9007199254740988kB, failcnt 0\n"
        "kmem: usage 0kB, limit 9007199254740988kB, failcnt 0\n"
        "Memory cgroup stats for /c: cache:0KB rss:0KB rss_huge:0KB shmem:0KB mapped_file:0KB dirty:0KB "
        "writeback:0KB swap:0KB inactive_anon:0KB active_anon:0KB\n"
        "Memory cgroup stats for /c/a: cache:409600KB rss:81920KB rss_huge:0KB shmem:0KB mapped_file:0KB "
        "dirty:307200KB writeback:20480KB swap:0KB inactive_anon:81920KB active_anon:0KB\n"
        "[ pid ]   uid  tgid total_vm      rss nr_ptes swapents oom_score_adj name\n"
        "[ 4242]     0  4242   100000    20480      50        0           0 writer\n"
        "Memory cgroup out of memory: Kill process 4242 (writer) score 1000 or sacrifice child\n"
        "Killed process 4242 (writer) total-vm:400000kB, anon-rss:81920kB, file-rss:0kB\n"
    )
    [record] = oom_parser.parse_text(text)
    report = diagnosis.diagnose(record)
    b = record_facts(record).breakdown
    assert b is not None and b.file_dirty_bytes == 300 * MIB and b.file_writeback_bytes == 20 * MIB
    assert "file-dirty-dominant" in {f.code for f in report.findings}


def test_sock_dominant_through_the_parser_and_the_report() -> None:
    kill = SyntheticKill(
        victim_pid=100,
        tasks=[SyntheticTask(100, "gateway", 16 * 256)],
        anon_bytes=40 * MIB,
        kernel_bytes=20 * MIB,
        limit_kb=512 * 1024,
        extra_stat={"sock": 440 * MIB},
    )
    [record] = oom_parser.parse_lines(synthetic.render(kill, "kmsg"))
    report = diagnosis.diagnose(record)
    codes = {f.code for f in report.findings}
    assert "sock-dominant" in codes and "anon-dominant" not in codes
    assert report.cgroup is not None and report.cgroup.dominant == "sock"
    assert report.cgroup.dominant_class == "sock"
    assert report.cgroup.breakdown is not None and report.cgroup.breakdown.sock_bytes == 440 * MIB
    dumped = report.model_dump(mode="json")["cgroup"]
    assert dumped["breakdown"]["sock_bytes"] == 440 * MIB and dumped["dominant_class"] == "sock"
    assert {"anon_bytes", "file_bytes", "shmem_bytes", "kernel_bytes", "source"} <= set(dumped["breakdown"])


def test_slab_dominant_keeps_the_coarse_category_in_dominant() -> None:
    """``cgroup.dominant`` stays the coarse category (kernel); ``dominant_class`` names the part."""
    kill = SyntheticKill(
        victim_pid=100,
        tasks=[SyntheticTask(100, "indexer", 16 * 256)],
        anon_bytes=40 * MIB,
        kernel_bytes=400 * MIB,
        limit_kb=512 * 1024,
        extra_stat={"slab_reclaimable": 350 * MIB, "slab_unreclaimable": 20 * MIB, "slab": 370 * MIB},
    )
    [record] = oom_parser.parse_lines(synthetic.render(kill, "kmsg"))
    report = diagnosis.diagnose(record)
    assert report.cgroup is not None
    assert (report.cgroup.dominant, report.cgroup.dominant_class) == ("kernel", "slab")
    finding = report.finding("slab-dominant")
    assert finding is not None and report.finding("kernel-dominant") is None
    assert finding.evidence["slab_reclaimable_bytes"] == 350 * MIB
    assert "dentries" in finding.message + finding.action


@pytest.mark.parametrize(
    ("stem", "kernel", "sock", "dominant"),
    [
        # 6.x v2 with the ``kernel`` key: sock (28 KiB) is not part of it and is counted on its own
        ("43-efs-csi-1218-v2-multiline-stats-cri-containerd", 10436608, 28672, "anon"),
        # 5.x v2 without ``kernel``: kernel_stack + pagetables + percpu + slab, sock left out
        ("63-aks-node-allocatable-besteffort-oomgroup-npd", 1605632 + 17588224 + 280264 + 5454816, 4096,
         "anon"),
    ],
)
def test_real_v2_records(stem: str, kernel: int, sock: int, dominant: str) -> None:
    records = oom_parser.parse_text((RECORDS / f"{stem}.log").read_text())
    b = record_facts(records[-1]).breakdown
    assert b is not None and b.kernel_bytes == kernel and b.sock_bytes == sock
    assert b.dominant() == b.dominant_class() == dominant


def test_real_v1_record_of_dirty_page_cache() -> None:
    """Record 23 (kubedirector#356): 503 MB of the 507 MB cache is dirty; memory+swap filled."""
    text = (RECORDS / "23-kubedirector-356-v1-hardwrap-memsw-dirty.log").read_text()
    [record] = oom_parser.parse_text(text)
    report = diagnosis.diagnose(record)
    assert report.cgroup is not None
    assert (report.cgroup.dominant, report.cgroup.dominant_class) == ("file", "file_dirty")
    finding = report.finding("file-dirty-dominant")
    assert finding is not None and report.finding("file-dominant") is None
    assert finding.evidence["file_dirty_bytes"] == 503316 * 1024
    assert finding.evidence["file_writeback_bytes"] == 0
    assert finding.evidence["file_bytes"] == 519344128 - 28 * 1024
    assert finding.evidence["class_bytes"] == 503316 * 1024 and finding.evidence["category"] == "file"
    assert "dirty page cache" in finding.message and "vm.dirty_bytes" in finding.action
