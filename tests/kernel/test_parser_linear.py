"""The parser's work grows linearly with its input, also on lines crafted to make regexes backtrack.

Issue 13 found a 1 MiB crafted line took 296 s. Each case here is a 1 MiB line built to hit one
former quadratic spot; the generous timeout only catches a return of the quadratic behaviour
(linear parsing takes milliseconds, quadratic takes minutes).
"""

from __future__ import annotations

import pytest

from podmortem.kernel import log_lines, oom_parser
from podmortem.reports.oom_record import OomKillRecord

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


# -- a record followed by ordinary long lines (issue 36) -----------------------------------------

_RECORD = (
    "[  425.146217] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
    "[  425.146647] Memory cgroup out of memory: Killed process 6054 (python3) total-vm:98488kB, "
    "anon-rss:88820kB, file-rss:6616kB, shmem-rss:0kB, UID:0 pgtables:232kB oom_score_adj:0\n"
)


def _console(lines: int) -> str:
    """``lines`` ordinary 90-character lines of a program's output, as a console capture has them."""
    return "".join(f"{i:06d} epoch=3 step={i} loss=0.{i % 97:02d} lr=3e-4 ".ljust(90, "x") + "\n"
                   for i in range(lines))


def _held_characters(lines: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """Characters of the held line that the wrap check looked at, over a record and ``lines`` lines."""
    seen = 0
    real = log_lines.continues

    def counting(prev_raw: str, prev: log_lines.Line, raw: str, *, first_raw: str | None = None) -> bool:
        nonlocal seen
        seen += len(prev.msg)
        return real(prev_raw, prev, raw, first_raw=first_raw)

    monkeypatch.setattr(log_lines, "continues", counting)
    [record] = oom_parser.parse_text(_RECORD + _console(lines))
    assert record.victim_pid == 6054
    return seen


def test_long_lines_after_a_record_cost_the_parser_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each 90-character line after a kernel line was taken as one more wrapped part of it, and each
    part rescanned the line so far: 12,000 lines took a minute. The work the wrap check does may grow
    at most as the input does."""
    small, large = _held_characters(2_000, monkeypatch), _held_characters(4_000, monkeypatch)
    assert large <= 2.3 * small, f"{small} -> {large} characters looked at for twice the lines"


def test_a_line_joined_from_wrapped_parts_stays_within_max_line(monkeypatch: pytest.MonkeyPatch) -> None:
    longest = 0
    real = log_lines.join

    def measuring(prev: log_lines.Line, raw: str, *, first_raw: str | None = None) -> log_lines.Line:
        nonlocal longest
        joined = real(prev, raw, first_raw=first_raw)
        longest = max(longest, len(joined.msg))
        return joined

    monkeypatch.setattr(log_lines, "join", measuring)
    oom_parser.parse_text(_RECORD + _console(1_000))
    assert 0 < longest <= log_lines.MAX_LINE


def _time_comparisons(kills: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """How often `merge_repeats` compared two records' times: ``kills`` kills of one pid a minute apart."""
    calls = 0
    real = oom_parser._same_time

    def counting(a: OomKillRecord, b: OomKillRecord) -> bool:
        nonlocal calls
        calls += 1
        return real(a, b)

    monkeypatch.setattr(oom_parser, "_same_time", counting)
    lines = []
    for i in range(kills):
        t = 1000.0 + 60.0 * i
        lines.append(f"[{t:12.6f}] python3 invoked oom-killer: gfp_mask=0xcc0, order=0, oom_score_adj=0")
        lines.append(f"[{t + 0.001:12.6f}] Killed process 6054 (python3) total-vm:98488kB, anon-rss:88820kB, "
                     "file-rss:6616kB, shmem-rss:0kB")
    assert len(oom_parser.parse_lines(lines)) == kills  # a minute apart: every one a kill of its own
    return calls


def test_many_kills_of_one_key_cost_each_record_bounded_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each record was compared with every earlier kill of its pid and cgroup: quadratic in the kills."""
    small, large = _time_comparisons(300, monkeypatch), _time_comparisons(600, monkeypatch)
    assert large <= 2.3 * small, f"{small} -> {large} comparisons for twice the kills"
