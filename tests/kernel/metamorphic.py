"""What pastes do to a kernel record, as functions of text, and the diagnosis that must survive them.

Each transformation is one thing a person's tools do to a record on its way into a paste:
an editor's line numbers, Markdown indentation with spaces or tabs, a mail quote, a terminal
or mail wrap, ANSI colours, CRLF, ``dmesg -x`` facility and level, a raw ``<4>`` level, a
journal line without a host, lines the diagnosis does not need left out at ``...``, the block
pasted twice, a shell prompt and unrelated lines around it. `answer` is what the diagnosis
says of each kill; a transformed record must give the same answer (tests/kernel/test_metamorphic.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from podmortem.cgroups import paths
from podmortem.diagnosis import diagnose
from podmortem.kernel import oom_parser

Transform = Callable[[str], str]


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _join(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def line_numbers(text: str) -> str:
    """An editor's or ``cat -n``'s numbers before every line."""
    return _join([f"{i:6d}\t{line}" for i, line in enumerate(_lines(text), 1)])


def line_numbers_colon(text: str) -> str:
    """``grep -n``'s numbers: ``12:line``."""
    return _join([f"{i}:{line}" for i, line in enumerate(_lines(text), 1)])


def indent_spaces(text: str) -> str:
    """A Markdown code block indented with four spaces."""
    return _join(["    " + line if line else line for line in _lines(text)])


def indent_tab(text: str) -> str:
    """A Markdown code block indented with a tab."""
    return _join(["\t" + line if line else line for line in _lines(text)])


def mail_quote(text: str) -> str:
    return _join(["> " + line for line in _lines(text)])


def crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


_STAMP = re.compile(r"^(\[[^\]]{1,40}\])")


def ansi(text: str) -> str:
    """``dmesg --color=always``: the stamp green, the rest bold, reset at the end."""
    out = []
    for line in _lines(text):
        m = _STAMP.match(line)
        if m is not None:
            line = f"\x1b[32m{m.group(1)}\x1b[0m\x1b[1m{line[m.end():]}\x1b[0m"
        elif line:
            line = f"\x1b[1m{line}\x1b[0m"
        out.append(line)
    return _join(out)


def dmesg_x(text: str) -> str:
    """``dmesg -x``: facility and level before each line (only lines that look like dmesg's own)."""
    return _join([f"kern  :warn  : {line}" if line[:1] == "[" else line for line in _lines(text)])


def raw_level(text: str) -> str:
    """``dmesg -r``: the raw ``<4>`` level before each dmesg line."""
    return _join([f"<4>{line}" if line[:1] == "[" else line for line in _lines(text)])


_SYSLOG_HOST = re.compile(r"^([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) (\S+) kernel: ")


def journal_no_host(text: str) -> str:
    """A journal line as ``journalctl -o short`` prints it on a host without a hostname: no host field."""
    return _join([_SYSLOG_HOST.sub(r"\1 kernel: ", line) for line in _lines(text)])


def _hard_wrap(width: int) -> Transform:
    def wrap(text: str) -> str:
        out: list[str] = []
        for line in _lines(text):
            while len(line) > width:
                out.append(line[:width])
                line = line[width:]
            out.append(line)
        return _join(out)

    wrap.__name__ = f"terminal_wrap_{width}"
    return wrap


def _soft_wrap(width: int) -> Transform:
    """A mail client's format=flowed wrap: lines break after a space, which stays at the end."""

    def wrap(text: str) -> str:
        out: list[str] = []
        for line in _lines(text):
            while len(line) > width:
                cut = line.rfind(" ", 0, width)
                if cut <= 0:
                    break
                out.append(line[:cut + 1])
                line = line[cut + 1:]
            out.append(line)
        return _join(out)

    wrap.__name__ = f"mail_wrap_{width}"
    return wrap


#: Lines no diagnosis rests on: call-trace frames (but the memory cgroup's and the page allocator's,
#: which tell a memcg or a node-wide OOM where the record's head is cut), per-zone dumps, registers,
#: hardware names. "Mem-Info:", its summary and "pages RAM"/"pages reserved" stay: they tell a global
#: OOM and what filled the node.
_UNNEEDED = re.compile(
    r"(\+0x[0-9a-f]+/0x[0-9a-f]+|\bHardware name:|\bCall Trace:|\bNode \d+ "
    r"|\blowmem_reserve\[\]|\btotal pagecache pages\b"
    r"|\bFree swap\b|\bTotal swap\b|\bSwap cache stats\b|\bRIP: |\bRSP: |\bRAX: |\bRDX: |\bRBP: |\bR1[0-5]: "
    r"|\bR0?[89]: |<TASK>|</TASK>|\bCode: )"
)


def elide(text: str) -> str:
    """Runs of lines the diagnosis does not need, left out and marked ``...``, as posters do."""
    out: list[str] = []
    for line in _lines(text):
        if _UNNEEDED.search(line) and "invoked oom-killer" not in line and "mem_cgroup" not in line \
                and "__alloc_pages_" not in line:
            if not out or out[-1] != "...":
                out.append("...")
        else:
            out.append(line)
    return _join(out)


def twice(text: str) -> str:
    """The same block pasted twice (on a line of its own, also after a text with no last newline)."""
    block = text if text.endswith("\n") else text + "\n"
    return block + block


def prompt_and_noise(text: str) -> str:
    """A shell prompt before, unrelated lines around, a prompt after."""
    return (
        "root@node-7:~# dmesg -T | grep -B5 -A60 oom\n"
        "systemd[1]: Started Session 42 of user root.\n"
        + text
        + "containerd[1021]: time=\"2024-05-01T12:00:00Z\" level=info msg=\"shim disconnected\"\n"
        "root@node-7:~# \n"
    )


def grep_file_name(text: str) -> str:
    """``grep -r``'s file name before every line: ``messages-20150510:May  9 …``."""
    return _join([f"messages-20150510:{line}" if line else line for line in _lines(text)])


_MONO = re.compile(r"^\[\s*(\d+)\.(\d+)\] ?")


def dmesg_human(text: str) -> str:
    """``dmesg -H``: the minute where it changes, ``[Mar19 10:02]``, then the time since the line
    before, ``[  +0.000003]``, in place of each dmesg stamp."""
    out: list[str] = []
    last: float | None = None
    for line in _lines(text):
        m = _MONO.match(line)
        if m is None:
            out.append(line)
            continue
        now = float(f"{m.group(1)}.{m.group(2)}")
        rest = line[m.end():]
        if last is None or int(now // 60) != int(last // 60):
            minute = int(now // 60)
            out.append(f"[Mar19 {10 + minute // 60 % 14:02d}:{minute % 60:02d}] {rest}")
        else:
            out.append(f"[  +{now - last:.6f}] {rest}")
        last = now
    return _join(out)


def talosctl(text: str) -> str:
    """``talosctl dmesg``: the node's address, facility and level, an ISO stamp, for each dmesg line."""
    out = []
    for line in _lines(text):
        m = _MONO.match(line)
        if m is not None:
            seconds = int(m.group(1))
            hours, minutes = 10 + seconds // 3600 % 14, seconds // 60 % 60
            line = (f"10.0.0.1: kern:    info: [2025-03-19T{hours:02d}:{minutes:02d}:"
                    f"{seconds % 60:02d}.{m.group(2)[:6]:0<6}Z]: {line[m.end():]}")
        out.append(line)
    return _join(out)


def line_numbers_space(text: str) -> str:
    """A viewer's right-aligned line numbers and one space: ``  12 line``."""
    return _join([f"{i:4d} {line}" for i, line in enumerate(_lines(text), 1)])


def any_prefix(prefix: str) -> Transform:
    """The same printable prefix before every line (a logger's, a viewer's column, a level)."""

    def add(text: str) -> str:
        return _join([prefix + line if line else line for line in _lines(text)])

    add.__name__ = f"prefix_{prefix!r}"
    return add


#: Prefixes people's tools and viewers put before each line, for the checks of each one alone.
ANY_PREFIXES: tuple[Transform, ...] = (
    any_prefix("node-7 | "), any_prefix("WARNING: "), any_prefix("kern.warn "), any_prefix('"'),
    any_prefix("│ "), any_prefix("[pod/trainer-0/main] "),
)

#: The log's own forms: what the tool printed, before any terminal or mail wrapped it.
FORMATS: tuple[Transform, ...] = (dmesg_x, raw_level, journal_no_host, talosctl)
#: Prefixes that are no log's own (a file name, a logger's, a viewer's), checked alone and, for any
#: printable prefix, by test_any_printable_prefix_keeps_every_answer; their compositions with wraps
#: are not yet held (a wrapped part without the prefix is not always joined back). dmesg -H is
#: checked alone too: its relative stamps carry no time, so a block pasted twice is not told apart.
FOREIGN: tuple[Transform, ...] = (grep_file_name, dmesg_human, *ANY_PREFIXES)
#: The paste's own marks, added to what was wrapped.
MARKS: tuple[Transform, ...] = (
    line_numbers, line_numbers_colon, indent_spaces, indent_tab, mail_quote, crlf, ansi,
)
#: A viewer's marks, checked alone: a one-space line number on a wrapped part is not yet stripped
#: (a kernel message may itself start with a number and a space), so wraps do not compose with it.
VIEWER: tuple[Transform, ...] = (line_numbers_space,)
PREFIXES: tuple[Transform, ...] = (*MARKS, *FORMATS, *FOREIGN, *VIEWER)
WRAPS: tuple[Transform, ...] = (
    _hard_wrap(72), _hard_wrap(80), _hard_wrap(100), _soft_wrap(72), _soft_wrap(80),
)
WHOLE: tuple[Transform, ...] = (elide, twice, prompt_and_noise)
ALL: tuple[Transform, ...] = (*WHOLE, *WRAPS, *PREFIXES)


@dataclass(frozen=True)
class Kill:
    """What the diagnosis says of one kill: the fields a user acts on."""

    verdict: str | None
    pid: int | None
    comm: str | None
    limit: str | None
    pod_uid: str | None
    container_id: str | None
    dominant: str | None


def answer(text: str) -> list[Kill]:
    out = []
    for record in oom_parser.parse_text(text):
        cpuset = record.oom_kill.cpuset if record.oom_kill else record.cpuset
        pod = paths.pod_ref(
            task_memcg=record.task_memcg, oom_memcg=record.oom_memcg or record.oom_group_memcg, cpuset=cpuset
        )
        report = diagnose(record, pod=pod)
        kill = report.kill
        dominant = next((f.code for f in report.findings if f.code.endswith("-dominant")), None)
        out.append(Kill(
            verdict=report.verdict,
            pid=kill.pid if kill else None,
            comm=kill.comm if kill else None,
            limit=record.oom_memcg,
            pod_uid=kill.pod_uid if kill else None,
            container_id=kill.container_id if kill else None,
            dominant=dominant,
        ))
    return out
