"""A memcg OOM whose record prints no v1- or v2-only line: the kernel's era can still tell v1.

cgroup2's memory controller came with 4.5. A kernel older than that is told by its version, by
the header's ``oom_adj=`` (printed up to 3.6), or by a ``gfp_mask`` without the flag names 4.5 began
to print. The ``Task in … killed as a result of limit of …`` line (up to 4.18) under the kubelet's
``kubepods`` is v1 too: the kubelet's cgroup v2 support needs a 5.8+ kernel.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from podmortem.kernel import oom_parser
from podmortem.reports.oom_record import _major_minor

FIXTURES = Path(__file__).parents[1] / "fixtures"

TASK_IN = "[ 10.000002] Task in {path} killed as a result of limit of {path}"
KILL = "[ 10.000003] Memory cgroup out of memory: Kill process 4242 (java) score 854 or sacrifice child"


def _version(header: str, cpu: str | None, path: str) -> int | None:
    lines = [f"[ 10.000000] {header}"]
    if cpu is not None:
        lines.append(f"[ 10.000001] {cpu}")
    lines += [TASK_IN.format(path=path), KILL]
    records = oom_parser.parse_text("\n".join(lines) + "\n")
    assert len(records) == 1
    return records[0].cgroup_version


def test_a_rhel6_lxc_excerpt_is_v1() -> None:
    """corpus-new 185: `dmesg | grep -i kill` on a 2.6.32 LXC host; no counters, no stats."""
    path = next((FIXTURES / "corpus-new").glob("185-*.log"))
    (record,) = oom_parser.parse_text(path.read_text())
    assert record.trigger_oom_adj == 0 and record.cgroup_version == 1


@pytest.mark.parametrize(("header", "cpu", "path", "expected"), [
    # oom_adj in the header: 2.6.36-3.6
    ("java invoked oom-killer: gfp_mask=0xd0, order=0, oom_adj=0, oom_score_adj=0", None, "/lxc/a", 1),
    # a bare gfp mask, header intact: before 4.5
    ("java invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=0", None, "/docker/abc", 1),
    # the version says it
    ("java invoked oom-killer: gfp_mask=0x24000c0(GFP_KERNEL), order=0, oom_score_adj=0",
     "CPU: 1 PID: 4242 Comm: java Not tainted 3.10.0-1160.el7.x86_64 #1", "/docker/abc", 1),
    # 4.14 with flag names: v1 or v2, the record does not say
    ("java invoked oom-killer: gfp_mask=0x14000c0(GFP_KERNEL), nodemask=(null), order=0, oom_score_adj=0",
     "CPU: 1 PID: 4242 Comm: java Not tainted 4.14.0-1 #1", "/docker/abc", None),
    # ... unless the kubelet made the cgroup
    ("java invoked oom-killer: gfp_mask=0x14000c0(GFP_KERNEL), nodemask=(null), order=0, oom_score_adj=0",
     "CPU: 1 PID: 4242 Comm: java Not tainted 4.14.0-1 #1", "/kubepods/burstable/pod1234/abc", 1),
])
def test_the_era_tells_v1(header: str, cpu: str | None, path: str, expected: int | None) -> None:
    assert _version(header, cpu, path) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("4.18.0-rc7", (4, 18)), ("3.10.0-1160.el7.x86_64", (3, 10)), ("5.10.75-v8+", (5, 10)),
    ("6.8.0-45-generic", (6, 8)), ("2.6.32-754.el6.x86_64", (2, 6)), ("garbage", None), (None, None),
])
def test_major_minor(text: str | None, expected: tuple[int, int] | None) -> None:
    assert _major_minor(text) == expected
