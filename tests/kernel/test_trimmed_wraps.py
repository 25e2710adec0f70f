"""A mail wrap whose space the archive trimmed: the kill lines still read as the kernel printed them.

A mail client breaks a line at a space and leaves the space at the end (format=flowed); list
archives and quoting often strip it. Where the break fell between two of the kernel's own words,
or between ``process %d`` and ``(%s)``, the space is put back. A terminal's hard wrap, which cuts
at a column, is left alone (the metamorphic tests wrap at 72, 80 and 100 columns).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem.kernel import oom_parser

CHOSEN = "Out of memory: Kill process {pid} ({comm}) score {score} or sacrifice child"
KILLED = "Killed process {pid} ({comm}) total-vm:5400kB, anon-rss:252kB, file-rss:4kB, shmem-rss:0kB"
PREFIX = "{quote}Nov 14 15:23:48 {host} kernel: [337631.99{n:04d}] "

comms = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="()"),
                min_size=1, max_size=15)


WORDS = {"Out", "of", "memory:", "Kill", "Killed", "process", "score", "or", "sacrifice", "child"}


def _trimmed_wrap(line: str, after: int, pick: int, quote: str) -> list[str]:
    """``line`` broken at a space between two kernel words, or between ``process N`` and
    ``(comm)``, after its first ``after`` characters; the space dropped, the rest quoted."""
    words = line.split(" ")
    cuts, at = [], -1
    for i, word in enumerate(words[:-1]):
        at += len(word) + 1
        nxt = words[i + 1]
        pid_comm = word.isdigit() and words[i - 1] == "process" and nxt.startswith("(")
        if at >= after and ((word in WORDS and nxt in WORDS) or pid_comm):
            cuts.append(at)
    cut = cuts[pick % len(cuts)]
    return [line[:cut], quote + line[cut + 1:]]


@settings(max_examples=200, deadline=None)
@given(
    pid=st.integers(1, 4_194_304), child=st.integers(1, 4_194_304), comm=comms, child_comm=comms,
    # A mail client wraps long lines (72-78 columns): the host makes the prefix that long.
    score=st.integers(0, 1000), host=st.from_regex(r"[a-z][a-z0-9-]{19,30}", fullmatch=True),
    quote=st.sampled_from(["", "> ", "> > ", ">> "]), cut=st.integers(0, 20),
)
def test_kill_lines_wrapped_at_a_kernel_space_read_whole(
    pid: int, child: int, comm: str, child_comm: str, score: int, host: str, quote: str, cut: int
) -> None:
    chosen = PREFIX.format(quote=quote, host=host, n=1) + CHOSEN.format(pid=pid, comm=comm, score=score)
    killed = PREFIX.format(quote=quote, host=host, n=2) + KILLED.format(pid=child, comm=child_comm)
    after = len(PREFIX.format(quote=quote, host=host, n=1))
    chosen_lines = _trimmed_wrap(chosen, after, cut, quote)
    killed_lines = _trimmed_wrap(killed, after, cut, quote)
    [record] = oom_parser.parse_text("\n".join(chosen_lines + killed_lines) + "\n")
    assert record.chosen is not None and (record.chosen.pid, record.chosen.comm) == (pid, comm)
    assert (record.victim_pid, record.victim_comm) == (child, child_comm)
    assert record.scope == "global"


def test_a_2_6_32_lower_case_choice_is_a_kill() -> None:
    """2.6.32-2.6.35 print ``kill process %d (%s) score %li or a child`` in lower case."""
    text = (
        "[    5.786839] Out of memory: kill process 450 (plymouthd) score 38 or a child\n"
        "[    5.786841] Killed process 450 (plymouthd)\n"
    )
    [record] = oom_parser.parse_text(text)
    assert record.chosen is not None and (record.chosen.pid, record.chosen.comm) == (450, "plymouthd")
    assert (record.victim_pid, record.scope) == (450, "global")
