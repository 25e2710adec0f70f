"""Text that went through a mail's quoted-printable source or Markdown escaping reads as the kernel wrote it.

Both are decoded only where the text shows the encoding (``=3D``; an escaped kernel field name):
any other text passes through unchanged, which hypothesis checks over arbitrary lines.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podmortem.kernel import log_lines, oom_parser

KILL = ("[  244.946537] Out of memory: Killed process 4526 (dhclient) total-vm:20464kB, anon-rss:1112kB, "
        "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:76kB oom_score_adj:0")
OOM_KILL = ("[  244.945440] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,"
            "global_oom,task_memcg=/,task=dhclient,pid=4526,uid=0")


def test_a_quoted_printable_source_with_soft_breaks_reads_whole() -> None:
    encoded = OOM_KILL.replace("=", "=3D")
    lines = ["> > " + encoded[:60] + "=", encoded[60:120] + "=", encoded[120:], "> > " + KILL]
    [record] = oom_parser.parse_lines(lines)
    assert record.oom_kill is not None and record.oom_kill.pid == 4526
    assert record.constraint_printed == "CONSTRAINT_NONE" and record.victim_comm == "dhclient"


def test_markdown_escapes_are_taken_out_once_a_kernel_field_reads_escaped() -> None:
    text = [r"Apr 09 16:00:14 node kernel: java invoked oom-killer: gfp\_mask=0xd0, order=0, "
            r"oom\_score\_adj=0",
            r"Apr 09 16:00:14 node kernel: \[ pid \]   uid  tgid total\_vm      rss nr\_ptes swapents "
            r"oom\_score\_adj name",
            r"Apr 09 16:00:14 node kernel: \[10768\]     0 10768  1190330   131163     465        0"
            r"             0 java",
            "Apr 09 16:00:14 node kernel: Memory cgroup out of memory: Kill process 10768 (java) score 1021 "
            "or sacrifice child"]
    [record] = oom_parser.parse_lines(text)
    assert record.trigger_comm == "java" and [t.pid for t in record.tasks] == [10768]


def test_a_comm_with_a_backslash_keeps_it_in_text_that_was_not_escaped() -> None:
    line = r"[  1.000000] Out of memory: Killed process 7 (a\_b) total-vm:1kB, anon-rss:1kB, file-rss:0kB"
    [record] = oom_parser.parse_lines([line])
    assert record.victim_comm == r"a\_b"


@given(st.lists(st.text(max_size=80).filter(lambda s: "\n" not in s and "\r" not in s), max_size=20))
def test_text_that_shows_neither_encoding_passes_unchanged(lines: list[str]) -> None:
    plain = [line for line in lines if "=3D" not in line]
    assert list(log_lines.unquote_printable(plain)) == plain
    unescaped = [line for line in plain if "\\" not in line]
    assert list(log_lines.unescape_markdown(unescaped)) == unescaped


def test_lines_without_stamps_go_on_only_where_the_kernels_format_says_so() -> None:
    text = ["    oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/ltp",
            "    _19257,task_memcg=/ltp_19257,task=memcg_process,pid=19289,uid=0",
            "    Memory cgroup out of memory: Killed process 19289 (memcg_process)",
            "    total-vm:2676kB, anon-rss:84kB, file-rss:1468kB, shmem-rss:4kB, UID:0 pgtables:40kB",
            "    oom_score_adj:0",
            "    the next line of prose"]
    [record] = oom_parser.parse_lines(text)
    assert record.oom_kill is not None and record.oom_kill.oom_memcg == "/ltp_19257"
    victim = record.victim
    assert victim is not None and (victim.file_rss_kb, victim.uid, victim.oom_score_adj) == (1468, 0, 0)
    assert log_lines.incomplete("Killed process 1 (x)") is False  # 2.6's whole Killed line
    assert log_lines.incomplete("Out of memory: Killed process 1 (x)") is True  # 5.1+ prints the rss too
