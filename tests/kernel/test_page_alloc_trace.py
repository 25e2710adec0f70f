"""A header-only record whose call trace is the page allocator's is a node-wide OOM.

``__alloc_pages_slowpath`` -> ``__alloc_pages_may_oom`` -> ``out_of_memory`` is the page
allocator's way to the OOM killer for the whole node (mm/page_alloc.c); a memory cgroup's charge
goes through ``mem_cgroup_out_of_memory`` instead. A record cut after its call trace says which.
"""

from __future__ import annotations

import pytest

from podmortem.diagnosis import diagnose
from podmortem.kernel import oom_parser

_HEAD = """\
[ 8765.123456] java invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0
[ 8765.123460] CPU: 3 PID: 4242 Comm: java Not tainted 5.15.0-91-generic #101-Ubuntu
[ 8765.123462] Call Trace:
[ 8765.123465]  dump_stack_lvl+0x4a/0x63
[ 8765.123468]  dump_header+0x4a/0x1f4
[ 8765.123470]  oom_kill_process.cold+0xb/0x10
[ 8765.123472]  out_of_memory+0x106/0x2e0
"""
_PAGE_ALLOC = """\
[ 8765.123475]  __alloc_pages_slowpath.constprop.0+0xa0c/0xcb0
[ 8765.123478]  __alloc_pages+0x2a3/0x320
"""
_OLD_PAGE_ALLOC = """\
[ 8765.123474]  __alloc_pages_may_oom+0x118/0x190
[ 8765.123475]  __alloc_pages_nodemask+0x2a2/0x2c0
"""
_MEMCG = """\
[ 8765.123473]  mem_cgroup_out_of_memory+0x4b/0x80
[ 8765.123474]  try_charge+0x6ee/0x750
"""


def _verdict(text: str) -> str | None:
    (record,) = oom_parser.parse_text(text)
    return diagnose(record).verdict


@pytest.mark.parametrize("frames", [_PAGE_ALLOC, _OLD_PAGE_ALLOC])
def test_page_allocator_trace_is_a_global_oom(frames: str) -> None:
    assert _verdict(_HEAD + frames) == "global-oom"


def test_a_memcg_frame_keeps_it_a_memcg_oom() -> None:
    assert _verdict(_HEAD + _MEMCG + _PAGE_ALLOC) == "memcg-limit"


def test_no_allocator_frame_says_nothing_of_the_limit() -> None:
    assert _verdict(_HEAD) is None
