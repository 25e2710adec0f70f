"""Only the kernel's own lines make a kill: its text quoted by other tools' logs never does.

node-problem-detector, the kubelet, containerd, systemd-oomd and journald's other units log
lines that contain the kernel's OOM text. The property: real kernel lines from the corpus,
wrapped in any of those tools' prefixes, give no record, and appended after a real record
they leave its report unchanged. node-problem-detector's OOMKilling Events (a describe Events
row) are the kernel's kill line as its kernel monitor copied it: read only where the text holds
no kernel record (tests/kernel/test_event_kills.py), so after a real record they change nothing.
A record that is itself an Event (an event dump's message, 29-npd-766) is no kernel record: another
Event row after it is another kill, as two Event rows alone are two kills.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from podmortem.kernel import log_lines, oom_parser

RECORDS = Path(__file__).parent.parent / "fixtures" / "oom-records"
_FORMS = (
    "Killed process",
    "Memory cgroup out of memory",
    "Out of memory",
    "oom-kill:",
    "Task in ",
    "Tasks in ",
    "oom_reaper:",
    "memory: usage",
    "Memory cgroup stats for",
)


def _kernel_messages() -> list[str]:
    found: set[str] = set()
    for log in sorted(RECORDS.glob("*.log")):
        for raw in log.read_text().splitlines():
            line = log_lines.split(raw, None)
            if line is None or line.fmt == "plain":
                continue
            if line.msg.startswith(_FORMS) or " invoked oom-killer:" in line.msg[:40]:
                found.add(line.msg)
    return sorted(found)


MESSAGES = _kernel_messages()

#: How other programs carry the kernel's text, as seen in the corpus's posts.
WRAPPERS = (
    "{stamp} {host} node-problem-detector-startup.sh[4208]: I0519 18:14:43.767687    4208 "
    "log_monitor.go:159] New status generated: &{{Source:kernel-monitor Events:[{{Severity:warn "
    "Reason:OOMKilling Message:{msg}}}]}}",
    "{stamp} {host} kubelet[2271]: I0105 02:12:02.519957    2271 oom_watcher_linux.go:63] Got sys oom "
    "event: {msg}",
    '{stamp} {host} containerd[2723]: time="2025-05-19T18:14:43.578084676Z" level=info msg="{msg}"',
    "{stamp} {host} systemd-oomd[93234]: {msg}",
    "{stamp} {host} systemd[1]: cri-containerd-9192cb33.scope: {msg}",
    '    "message": "{msg}",',
    "`{msg}`",
    "- `{msg}`",
    "{host} kernel-monitor: {msg}",
)
#: node-problem-detector's Event on the node, as describe prints it: a kill when nothing else is.
EVENT_WRAPPERS = ("  Warning  OOMKilling  95s (x13 over 2m23s)  kernel-monitor, {host}  {msg}",)
STAMPS = ("Jan  5 02:12:02", "May 19 18:14:43", "2025-05-19T18:14:43.578+0000", "апр 28 01:23:30")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(MESSAGES), st.sampled_from(WRAPPERS), st.sampled_from(STAMPS)),
        min_size=1,
        max_size=12,
    )
)
def test_kernel_lines_quoted_by_other_tools_are_never_a_record(quotes: list[tuple[str, str, str]]) -> None:
    lines = [wrapper.format(msg=msg, stamp=stamp, host="node-a") for msg, wrapper, stamp in quotes]
    assert oom_parser.parse_lines(lines) == []


def _own_records(text: str) -> list[oom_parser.OomKillRecord]:
    """The records of the kernel's own lines: every line naming an OOMKilling Event left out."""
    return oom_parser.parse_text("\n".join(line for line in text.splitlines() if "OOMKilling" not in line))


_OLD_KILL = "Killed process 11726, UID 498, (mysqld) total-vm:7823732kB, anon-rss:2539268kB, file-rss:768kB"


@settings(max_examples=100, deadline=None)
@example(name="29-npd-766-event-json-quotes-kernel.log", quotes=[(_OLD_KILL, WRAPPERS[-1])])
@example(name="29-npd-766-event-json-quotes-kernel.log", quotes=[(_OLD_KILL, EVENT_WRAPPERS[0])])
@given(
    st.sampled_from(sorted(p.name for p in RECORDS.glob("*.log"))),
    st.lists(st.tuples(st.sampled_from(MESSAGES), st.sampled_from(WRAPPERS + EVENT_WRAPPERS)),
             min_size=1, max_size=6),
)
def test_quotes_after_a_real_record_change_nothing(name: str, quotes: list[tuple[str, str]]) -> None:
    text = (RECORDS / name).read_text()
    alone = oom_parser.parse_text(text)
    # Events are read where the kernel's own lines make no record (test_event_kills): then an Event
    # row added is one more kill.
    assume(_own_records(text) or all(w in WRAPPERS for _, w in quotes))
    noise = "\n".join(w.format(msg=m, stamp="May 19 18:14:43", host="node-a") for m, w in quotes)
    quoted = oom_parser.parse_text(text + "\n\n" + noise + "\n")
    assert [(r.victim_pid, r.oom_memcg, r.missing) for r in quoted] == [
        (r.victim_pid, r.oom_memcg, r.missing) for r in alone
    ]


def test_the_property_draws_from_many_kernel_lines() -> None:
    assert len(MESSAGES) >= 120
    assert sum(m.startswith("Killed process") or ": Killed process" in m for m in MESSAGES) >= 20
