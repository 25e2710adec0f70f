"""The parser's work grows linearly with its input, also on lines crafted to make regexes backtrack.

Issue 13 found a 1 MiB crafted line took 296 s. Each case here is a 1 MiB line built to hit one
former quadratic spot; the generous timeout only catches a return of the quadratic behaviour
(linear parsing takes milliseconds, quadratic takes minutes).
"""

from __future__ import annotations

import pytest

from podmortem.kernel import oom_parser

MIB = 1 << 20

#: One crafted 1 MiB line per spot that used to backtrack or copy per character.
CRAFTED = {
    "mail-quote": ">" * MIB,
    "header-fields": "x invoked oom-killer: " + "a" * MIB,
    "killed-comm": "Killed process 1 (" * (MIB // 18),
    "kill-choice": "Out of memory: Kill process 1 (" * (MIB // 31),
    "oom-kill-tail": "oom-kill:" + ",task=" * (MIB // 6),
    "reaper-comm": "oom_reaper: reaped process 1 (" + "(" * MIB,
    "kernel-version": "CPU: 1 PID: 2 Comm: x Not tainted " + "1" * MIB,
    "task-in": "Task in " + " killed as a result of limit o" * (MIB // 31),
    "cpuset": "x" + " cpuset=a" * (MIB // 9) + " mems_allowed=",
    "dmesg-T": "[" + "a" * MIB,
    "syslog": "Jan  1 00:00:00 " + "h" * MIB,
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("text", CRAFTED.values(), ids=list(CRAFTED))
def test_a_crafted_mebibyte_line_parses_in_bounded_time(text: str) -> None:
    oom_parser.parse_text("x invoked oom-killer: gfp_mask=0xcc0, order=0, oom_score_adj=0\n" + text)


@pytest.mark.timeout(20)
def test_a_crafted_line_inside_an_open_record_parses_in_bounded_time() -> None:
    head = "[ 1.0] x invoked oom-killer: gfp_mask=0xcc0, order=0, oom_score_adj=0\n"
    cpu = "[ 1.0] CPU: 1 PID: 2 Comm: x Not tainted " + "1" * MIB + "\n"
    [record] = oom_parser.parse_text(head + cpu)
    assert record.trigger_comm == "x"
    assert len(record.kernel_version or "") < 100
