"""A whole node's OOM: what filled the node, read from show_mem's ``Mem-Info:`` summary.

The kernel prints ``Mem-Info:`` only for OOMs outside a memory cgroup, then one summary of the
node's counters in pages (mm/show_mem.c ``__show_mem``; show_free_areas in mm/page_alloc.c before
6.2), the zones, and ``%lu pages RAM`` / ``%lu pages reserved``. A category dominates only with half
of the RAM in use: memory in no counter (vmalloc, drivers) counts in the total, never as dominant.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podmortem.diagnosis import facts as facts_mod
from podmortem.diagnosis.from_record import diagnose
from podmortem.kernel import oom_parser

FIXTURES = Path(__file__).parents[1] / "fixtures"
MIB_PAGES = 256  # 4 KiB pages

KILL = ("oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
        "task_memcg=/user.slice,task=python3,pid=4242,uid=1000")
KILLED = ("Out of memory: Killed process 4242 (python3) total-vm:9000000kB, anon-rss:7000000kB, "
          "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:14000kB oom_score_adj:0")


def _record(summary: list[str], *, ram: int | None = 2_097_152, reserved: int = 50_000,
            prefix: str = "[ 100.{n:06d}] ") -> str:
    """A global OOM as a 6.x kernel prints it, with ``summary`` as show_mem's lines."""
    lines = [
        "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
        "oom_score_adj=0",
        "CPU: 3 PID: 4242 Comm: python3 Not tainted 6.8.0-45-generic #45-Ubuntu",
        "Mem-Info:",
        *summary,
        "Node 0 active_anon:7000000kB inactive_anon:0kB all_unreclaimable? yes",
        "Free swap  = 0kB",
        "Total swap = 0kB",
    ]
    if ram is not None:
        lines += [f"{ram} pages RAM", "0 pages HighMem/MovableOnly", f"{reserved} pages reserved"]
    lines += [KILL, KILLED]
    return "\n".join(prefix.format(n=i) + line for i, line in enumerate(lines)) + "\n"


def summary_6x(*, anon: int, file: int, slab: int, shmem: int = 0, free: int = 20_000) -> list[str]:
    """show_mem's summary in 6.2+'s format (sec_pagetables, kernel_misc_reclaimable), continuation
    lines indented as dmesg shows a multi-line message."""
    return [
        f"active_anon:{anon} inactive_anon:{shmem} isolated_anon:0",
        f" active_file:{file // 2} inactive_file:{file - file // 2} isolated_file:0",
        " unevictable:0 dirty:12 writeback:0",
        f" slab_reclaimable:{slab // 2} slab_unreclaimable:{slab - slab // 2}",
        f" mapped:100 shmem:{shmem} pagetables:3000",
        " sec_pagetables:0 bounce:0",
        " kernel_misc_reclaimable:0",
        f" free:{free} free_pcp:10 free_cma:0",
    ]


def _cgroup(text: str) -> tuple[str | None, str | None, str]:
    records = oom_parser.parse_text(text)
    assert len(records) == 1
    report = diagnose(records[0])
    finding = next((f.message for f in report.findings if f.code.endswith("-dominant")), "")
    breakdown = report.cgroup.breakdown
    return report.cgroup.dominant, breakdown.source if breakdown else None, finding


def test_a_real_kubernetes_node_oom_is_anon() -> None:
    """corpus-new 165: a BestEffort pod's memory-eater filled an 8 GB node (5.4, header cut)."""
    path = next((FIXTURES / "corpus-new").glob("165-*.log"))
    record = oom_parser.parse_text(path.read_text())[0]
    assert record.mem_info["active_anon"] == 1935824 and record.mem_info["pages_ram"] == 2098035
    dominant, source, finding = _cgroup(path.read_text())
    assert dominant == "anon" and source is not None and "node's Mem-Info" in source
    assert "of the node's memory" in finding


def test_a_record_cut_before_pages_ram_tells_no_shares() -> None:
    """oom-records 51: a vmalloc test module filled a Raspberry Pi; vmalloc is in no counter, and the
    paste ends before ``pages RAM``: 92% slab of the named counters would be a wrong answer."""
    path = next((FIXTURES / "oom-records").glob("51-*.log"))
    record = oom_parser.parse_text(path.read_text())[0]
    assert record.mem_info["slab_unreclaimable"] == 5512 and "pages_ram" not in record.mem_info
    assert _cgroup(path.read_text())[0] is None


def test_memory_in_no_counter_keeps_any_category_from_dominating() -> None:
    # 8 GiB of RAM, 7.7 GiB in use, of which only 1 GiB in the counters: vmalloc or a driver
    text = _record(summary_6x(anon=100 * MIB_PAGES, file=400 * MIB_PAGES, slab=500 * MIB_PAGES))
    assert _cgroup(text)[0] is None


@pytest.mark.parametrize("prefix", [
    "[ 100.{n:06d}] ",
    "Dec 14 17:13:12 node-3 kernel: ",
    "kern  :warn  : [Sat Dec 14 17:13:12 2024] ",
    "<4>[ 100.{n:06d}] ",
])
def test_the_summary_is_read_whatever_the_prefix(prefix: str) -> None:
    text = _record(summary_6x(anon=1_800_000, file=20_000, slab=30_000, shmem=5_000), prefix=prefix)
    assert _cgroup(text)[0] == "anon"


def test_shmem_on_the_anon_lists_is_told_apart() -> None:
    """tmpfs and shmem pages sit on the anon LRU lists: /dev/shm filling a node is shmem, not anon."""
    text = _record(summary_6x(anon=300_000, file=20_000, slab=30_000, shmem=1_500_000))
    assert _cgroup(text)[0] == "shmem"


@given(anon=st.integers(0, 2_000_000), file=st.integers(0, 2_000_000), slab=st.integers(0, 2_000_000),
       free=st.integers(0, 100_000))
def test_a_dominant_category_holds_half_of_the_ram_in_use(anon: int, file: int, slab: int, free: int) -> None:
    ram, reserved = 8_000_000, 50_000
    text = _record(summary_6x(anon=anon, file=file, slab=slab, free=free), ram=ram, reserved=reserved)
    record = oom_parser.parse_text(text)[0]
    breakdown = facts_mod.record_facts(record).breakdown
    assert breakdown is not None
    dominant = breakdown.dominant()
    in_use = (ram - reserved - free) * 4096
    named = (anon + file + slab + 3000) * 4096
    assert breakdown.total_bytes() == max(in_use, named)
    if dominant is not None:
        assert breakdown.categories()[dominant] * 2 >= breakdown.total_bytes()
