"""One kernel log line as people paste it, split into its prefix (time, host, kmsg header) and message.

Why one module of this size: the prefix forms compose in any order people's tools stack them, so
each form is tried in one ordered loop beside all the others.

Why a module of its own: the forms a line reaches us in (``dmesg``, ``dmesg -T`` in any locale, raw
``/dev/kmsg``, ``journalctl -k`` and syslog in any locale, mail quotes, terminal and mail
wraps, pager cuts) are independent of what the OOM parser reads in the message, and each needs
its own care to stay linear on hostile input: every regex here is anchored and bounded.

Two layers of prefix are stripped, each a loop over the forms it knows, so that they compose
in any order people's tools stack them:

* the paste's own marks: CR, ANSI colours, Markdown indentation (spaces or tabs), mail quotes,
  an editor's or ``grep -n``'s line numbers;
* the log's: a raw ``<4>`` level, ``dmesg -x``'s facility and level (``kern  :warn  : ``), any
  timestamp form (``dmesg``, ``dmesg`` with a printk caller id, ``dmesg -T`` in any locale with
  one- or two-digit days, ISO, syslog and journalctl short with a host or without one), the
  host and ``kernel:``.

Only lines whose prefix says they came from the kernel (``kernel:`` in syslog, a dmesg or kmsg
stamp), or bare lines with no prefix at all, are kernel messages. Lines of other programs
(kubelet, containerd, node-problem-detector, systemd-oomd) keep their whole text as the message,
so they never start with a kernel form and never become part of a record. A line whose start is
no known prefix but which holds a kernel stamp (``[  123.456789] `` or ``<3>[``) further on, as
another tool's log wraps the kernel's lines (a hypervisor's guest log), is read from that stamp.

Indentation alone does not make a line a continuation: a line is the previous message's
continuation (as ``dmesg`` and ``journalctl`` indent a multi-line message) only when it carries
no prefix of its own and is indented deeper than the line before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from podmortem.reports.oom_record import LineFormat

_QUOTE = re.compile(r"(?:> ?)+")
#: "`[  123.4] …`" (inline code) or "``` [Thu …] …" (a fence the paste glued its lines onto).
_CODE_MARK = re.compile(r"`(?=[\[<])|```[\w+-]{0,16} +(?=\S)")
#: ANSI escape sequences (``dmesg --color``, ``less -R`` captures): removed wherever they are.
_ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[ -/]{0,4}[@-~]")
#: An editor's (``cat -n``: "  12\t"), ``grep -n``'s ("12:", context "12-") or a pasted list's ("12 | ")
#: line number: digits then a tab, a colon or dash not followed by a digit, or a bar.
_LINE_NO = re.compile(r"\d{1,7}(?:\t|:(?!\d{1,2}:\d\d)|-(?![\d:])| ?\| ?)")
_LINE_NO_KMSG = re.compile(r"\d{1,7}[:-]")
#: ``dmesg -r``'s raw level "<4>", and ``dmesg -x``'s "kern  :warn  : ".
_LEVEL = re.compile(r"<\d{1,3}>")
_FACILITY = re.compile(
    r"(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7]) *: {0,8}"
    r"(?:emerg|alert|crit|err|warn|warning|notice|info|debug) *: ?"
)
#: The first four characters a facility can start with: the regex runs only after this cheap look.
_FACILITY_STARTS = frozenset({
    "kern", "user", "mail", "daem", "auth", "sysl", "lpr ", "lpr:", "news", "uucp", "cron", "ftp ", "ftp:",
    "loca",
})
#: A printk caller id after a dmesg stamp: "[ T1234]", "[C3]" (CONFIG_PRINTK_CALLER).
_CALLER = re.compile(r"\[ *[TC]\d{1,7}\] ?")
#: A kernel stamp inside a line whose start is another program's (a hypervisor's guest log):
#: "<3>[  123.456789] " or "[  123.456789] " after a space or a colon.
_EMBEDDED = re.compile(r"(?:<\d{1,3}>)?\[ {0,12}\d{1,10}\.\d{3,9}\] ")
_KMSG = re.compile(r"(\d+),(\d+),(\d+),[^;]{0,64};")
_DMESG_MONO = re.compile(r"\[\s*(\d+\.\d+)\] ?")
#: dmesg -T in any locale: "[Thu May  9 14:52:38 2024]", "[四 3月 18 18:47:12 2021]", "[Tue Jun  9 11:02:17]".
_DMESG_T = re.compile(
    r"\[([^\[\]\d]{0,16}(?:\d{1,2}[^\[\]\d\s]{1,4} {0,2})?\d{1,2} \d\d:\d\d:\d\d(?: \d{4})?)\] ?"
)
_ISO = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?) ")
#: ``talosctl dmesg``'s stamp after its host and facility: "[2025-01-02T03:04:05.678901Z]: ".
_ISO_BRACKET = re.compile(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\]:? ?")
#: ``dmesg -H``: "[Mar19 10:02] " where the minute changes, "[  +0.000003] " (the time since the line
#: before) on the others. Neither is a point in time on its own: such lines carry no clock.
_DMESG_H = re.compile(
    r"\[(?:[^\W\d_]{3}\d{1,2} \d\d:\d\d|[^\W\d_]{3} \d\d:\d\d| {0,12}\+\d{1,10}\.\d{1,9})\] ?"
)
#: A tool's own prefix before a line of the log: ``grep``'s file name ("messages-20150510:",
#: "kern.log:12:" with -n, "kern.log-12-" as context), a host ("10.0.0.1: ", ``talosctl dmesg``),
#: a viewer's right-aligned line number with one space ("  12 ").
_TOOL_PREFIX = re.compile(
    r"(?:\d{1,7} [ \t]{0,16}|[^\s:\[<]{1,255}(?::\d{1,7}[:-]|-\d{1,7}-|:) ?)"
    # only where a log's own prefix follows: a stamp, a syslog date, a facility, a quote or indent
    r"(?=[\[<> \t]|[^\W\d_]{2,9}\.? {1,2}\d|\d{4}-\d\d-|\d{1,7},\d"
    r"|(?:kern|user|daemon|syslog|auth|local\d) *:)"
)
#: Where the kernel's own OOM text starts in a line whose prefix is no log's (a file name, a level, a
#: viewer's columns, a logger's): the messages of mm/oom_kill.c, mm/memcontrol.c and show_mem, as
#: catalogued in podmortem.diagnosis.catalogue (tests/kernel/test_kernel_text.py holds them equal).
#: The header's comm comes before its words and is found apart (`kernel_text_start`).
KERNEL_TEXTS: tuple[str, ...] = (
    "oom-kill:constraint=",
    "Out of memory: Killed process ",
    "Memory cgroup out of memory: Killed process ",
    "Killed process ",
    "Memory cgroup out of memory: Kill process ",
    "Out of memory: Kill process ",
    "oom_reaper: reaped process ",
    "Out of memory and no killable processes...",
    "Tasks in ",
    "Tasks state (memory values in pages):",
    "Task in ",
    "memory: usage ",
    "memory+swap: usage ",
    "kmem: usage ",
    "swap: usage ",
    "Memory cgroup stats for ",
    "Mem-Info:",
    "NVRM: Xid (PCI:",
)
_KERNEL_TEXT = re.compile(
    "|".join(re.escape(t) for t in sorted(KERNEL_TEXTS, key=len, reverse=True))
    + r"|(?<![\w.])\d{1,20} (?:pages RAM|total pagecache pages)$"
)
#: Cheap looks before `_KERNEL_TEXT` runs: every kernel text above holds one of these.
_KERNEL_HINTS = ("Kill", "kill", "oom", "Task", "usage ", "cgroup stats", "Mem-Info", "pages", "NVRM")
_HEADER_WORDS = " invoked oom-killer: "
_COMM_AFTER = (" ", "\t", ";", '"', "'", "|", "│", ">")
#: A prefix that makes the line another program's, quoting the kernel (node-problem-detector, the
#: kubelet, containerd, systemd-oomd, an Events row, a JSON or logfmt message, Markdown inline code):
#: its ``prog[pid]:``, ``msg=``, a message key, the event's reason or source, a backtick.
_PROGRAM = re.compile(r"[\w.@/-]\[\d{1,10}\]: |\bmsg=|[Mm]essage\b|`|OOMKilling|kernel-monitor|\bevent: ")
#: A time stamp of a line that no kernel form read: another program's line.
_STAMP = re.compile(r"[^\W\d_]{2,9}\.? {1,2}\d{1,2},? \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:\d\d")
#: How far into a line a foreign prefix may reach, and the characters it ends in.
_FOREIGN_MAX = 128
_SEPARATORS = frozenset(" :|]>\"'\t│")
#: syslog / journalctl short in any locale: "Jan  5 02:12:02 host kernel:", "апр 28 01:23:30 PC kernel:".
_SYSLOG = re.compile(r"([^\W\d_]{2,9}\.? {1,2}\d{1,2},? \d\d:\d\d:\d\d(?:\.\d+)?) (?:(\S{1,255}) )?kernel: ?")
#: Any syslog-style stamp, whichever program wrote the line (its own line, never a wrapped part).
_ANY_SYSLOG = re.compile(r"[^\W\d_]{2,9}\.? {1,2}\d{1,2},? \d\d:\d\d:\d\d")
_HOST_KERNEL = re.compile(r"(\S{1,255}) kernel: ?")
_KMSG_DICT = re.compile(r" [A-Z][A-Z0-9_]*=")
_CLOCK = re.compile(r"(\d\d):(\d\d):(\d\d)")

_CUT_MARKS = frozenset(">…")
#: Lines that stand for lines left out: grep's "--", a poster's "...", "…", ":" or "[...]".
ELISIONS = frozenset({"--", "...", "....", ".....", "…", ":", "[...]", "[…]", "<snip>", "<...>", "[snip]"})
#: How long a single printed line may reasonably be: printk lines are at most 1 KiB in the kernel;
#: memory.stat through /dev/kmsg and wrapped pastes stay well under this. Longer text is cut here.
MAX_LINE = 8192


@dataclass(slots=True)
class Line:
    """A kernel message with what its prefix said."""

    msg: str
    fmt: LineFormat
    host: str | None
    mono: float | None
    time_text: str | None
    seq: int | None
    #: Seconds since some origin, for gap detection (monotonic, or the time of day of a human stamp).
    clock: float | None
    #: The line ends in a pager's or terminal's cut mark (">" or "…"): its last token is not whole.
    cut: bool = False
    #: The raw text ended in whitespace (a mail client's soft wrap, format=flowed).
    soft_end: bool = False
    #: Whitespace before the text once the paste's marks are off (continuations are deeper).
    indent: int = 0
    #: A prefix that is no log's own, found before the kernel's words on this line (a tool's, a
    #: viewer's): the next lines that start with it are read without it.
    foreign: str | None = None


def strip_quote(line: str) -> str:
    """Mail quoting, any depth: "> > text", ">> text"."""
    if line[:1] != ">":
        return line
    m = _QUOTE.match(line)
    return line[m.end() :] if m is not None else line


_last_clock: tuple[str, float | None] = ("", None)


def _clock(time_text: str) -> float | None:
    """Seconds of the day of a human stamp; consecutive lines share one stamp, so the last is kept."""
    global _last_clock
    if _last_clock[0] == time_text:
        return _last_clock[1]
    c = _CLOCK.search(time_text)
    value = None if c is None else int(c.group(1)) * 3600 + int(c.group(2)) * 60 + int(c.group(3))
    _last_clock = (time_text, value)
    return value


#: The last human-stamped prefix read (text, format, stamp, host): the lines of one record share it,
#: so a line that starts with the same text skips the prefix regex.
_last_prefix: tuple[str, LineFormat, str | None, str | None] = ("", "plain", None, None)


def _keep_prefix(m: re.Match[str], fmt: LineFormat, host: str | None) -> None:
    """Keep a matched prefix for the next line, if it ends where the pattern must end.

    Only a prefix that ends in the optional space after ``]`` or ``kernel:`` is kept: then the
    pattern, run on any line that starts with the same text, would match exactly that text.
    """
    global _last_prefix
    text = m.group(0)
    if text.endswith(" "):
        _last_prefix = (text, fmt, m.group(1), host)


def strip_paste(line: str, *, numbers: int = 2) -> tuple[str, int]:
    """The line without the paste's marks (CR, ANSI, indentation, quotes, line numbers), and its indent.

    The indent is the width of the whitespace right before the text: what tells a multi-line
    message's continuation (indented deeper than the line before) from a line of its own.
    ``numbers``: how many line numbers to take at most (``cat -n`` of ``grep -n`` has two); a
    wrapped part is given as many as its line had, since it may start with the digits of a cut
    path ("4-da9c-…" is no ``grep -n`` context line then).
    """
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if line[-1:] == "\r":
        line = line.rstrip("\r")
    indent = 0
    for _ in range(6):  # each form at most once or twice; bounded, whatever the input
        first = line[:1]
        if first == " " or first == "\t":
            stripped = line.lstrip(" \t")
            indent = len(line) - len(stripped)
            line = stripped
        elif first == "`":
            # Markdown: an inline code span around a kernel line, or a fence with the lines glued on.
            m = _CODE_MARK.match(line)
            if m is None:
                break
            line = line[m.end():]
            if line[-1:] == "`":
                line = line.rstrip("`").rstrip()
        elif first == ">":
            line = strip_quote(line)
            indent = 0
        elif first.isdigit():
            if numbers <= 0 or _KMSG.match(line) is not None:
                break
            m = _LINE_NO.match(line)
            if m is None:
                m = _LINE_NO_KMSG.match(line)  # "12:6,1234,5678,-;…": grep -n over raw /dev/kmsg
                if m is None or _KMSG.match(line, m.end()) is None:
                    break
            line = line[m.end():]
            indent = 0
            numbers -= 1
        else:
            break
    return line, indent


def split(raw: str, prev: Line | None) -> Line | None:
    """Strip the paste's marks and the log's prefix; None for lines that carry no message at all."""
    line = raw if len(raw) <= MAX_LINE else raw[:MAX_LINE]
    line, indent = strip_paste(line)
    if not line or line.isspace():
        return None
    foreign = prev.foreign if prev is not None else None
    if foreign and line.startswith(foreign) and len(line) > len(foreign):
        line = strip_paste(line[len(foreign):])[0]  # the paste's indent is the one before the prefix
        if not line:
            return None
    else:
        foreign = None
    soft_end = line[-1:] in (" ", "\t")  # after the paste's marks: a colour's reset, a CR
    found = _split_prefixed(line, indent, soft_end)
    if foreign is not None:
        if found is None:
            found = _after_prefix(line, indent, soft_end, None) or \
                _finish(line, "plain", None, None, None, None, None, soft_end, 0)
        return _behind(found, foreign)
    if found is not None and (found.fmt != "iso" or found.host is not None):
        return found
    if prev is not None and prev.fmt == "kmsg" and _KMSG_DICT.match(" " + line) and indent:
        return None  # a /dev/kmsg dictionary line (SUBSYSTEM=…, DEVICE=…)
    m = _EMBEDDED.search(line, 1, 512)
    if m is not None and line[m.start() - 1] in " :\t\"'|│]>":
        # Another tool's line wrapping the kernel's (a hypervisor's guest log): read from the stamp,
        # unless a log prefix of the kernel's own starts before it, behind a foreign prefix.
        syslog_first = _ANY_SYSLOG.search(line, 0, m.start()) is not None
        before = _after_prefix(line, indent, soft_end, prev) if syslog_first else None
        if before is not None:
            return before
        inner = _split_prefixed(line[m.start():], indent, soft_end)
        if inner is not None:
            return _behind(inner, line[:m.start()])
    if found is not None:
        return found  # an ISO stamp with no host: "dmesg --time-format iso" prints no more
    behind = _after_prefix(line, indent, soft_end, prev)
    if behind is not None:
        return behind
    msg = line.strip()
    if prev is not None and indent > prev.indent:
        # dmesg and journalctl show a multi-line message with indented continuation lines.
        return Line(msg, prev.fmt, prev.host, prev.mono, prev.time_text, None, prev.clock, soft_end=soft_end,
                    indent=prev.indent)
    return Line(msg, "plain", None, None, None, None, None, soft_end=soft_end, indent=indent)


def _split_prefixed(line: str, indent: int, soft_end: bool) -> Line | None:
    """The line read by its log prefix; None when it starts with no prefix this module knows."""
    first = line[0]
    if first == "<":
        m = _LEVEL.match(line)
        if m is not None:
            line = line[m.end():]
            if not line:
                return None
            first = line[0]
    if first.isalpha() and line[:4] in _FACILITY_STARTS:
        m = _FACILITY.match(line)
        if m is not None:
            line = line[m.end():]
            if not line:
                return None
            first = line[0]
    fmt: LineFormat = "plain"
    host = None
    mono = None
    time_text = None
    rest = line
    if first.isdigit():
        m = _KMSG.match(line)
        if m is not None:
            mono = int(m.group(3)) / 1e6
            msg = line[m.end() :].strip()
            if msg[-1:] in _CUT_MARKS:
                return _finish(msg, "kmsg", None, mono, None, int(m.group(2)), mono, soft_end, indent)
            return Line(msg, "kmsg", None, mono, None, int(m.group(2)), mono, False, soft_end, indent)
        m = _ISO.match(line)
        if m is None:
            return None
        fmt, time_text, rest = "iso", m.group(1), line[m.end() :]
    elif first == "[":
        m = _DMESG_MONO.match(line)
        if m is not None:
            fmt, mono, rest = "dmesg", float(m.group(1)), line[m.end() :]
            if rest[:1] == "[" and (c := _CALLER.match(rest)) is not None:
                rest = rest[c.end():]
            if rest.find(" kernel:", 0, 264) < 0:
                # Plain dmesg, the commonest form: nothing more to strip.
                msg = rest.strip()
                if msg[-1:] in _CUT_MARKS:
                    return _finish(msg, "dmesg", None, mono, None, None, mono, soft_end, indent)
                return Line(msg, "dmesg", None, mono, None, None, mono, False, soft_end, indent)
        else:
            cached = _last_prefix
            if cached[1] == "dmesg-T" and line.startswith(cached[0]):
                fmt, time_text, rest = "dmesg-T", cached[2], line[len(cached[0]) :]
            else:
                m = _DMESG_T.match(line)
                if m is None:
                    return _split_bracketed(line, indent, soft_end)
                fmt, time_text, rest = "dmesg-T", m.group(1), line[m.end() :]
                _keep_prefix(m, "dmesg-T", None)
    elif first.isalpha():
        cached = _last_prefix
        if cached[1] == "syslog" and line.startswith(cached[0]):
            fmt, time_text, host, rest = "syslog", cached[2], cached[3], line[len(cached[0]) :]
        elif (m := _SYSLOG.match(line)) is not None:
            fmt, time_text, host, rest = "syslog", m.group(1), m.group(2), line[m.end() :]
            _keep_prefix(m, "syslog", m.group(2))
        elif line.startswith("kernel: "):
            rest = line[8:]  # journalctl -o cat with the identifier kept, or a trimmed syslog line
        else:
            return None
    else:
        return None
    if (fmt == "dmesg" or fmt == "iso") and rest.find(" kernel:", 0, 264) > 0:
        # journalctl -o short-iso / short-monotonic: "<stamp> host kernel: msg"
        m = _HOST_KERNEL.match(rest)
        if m is not None:
            host, rest = m.group(1), rest[m.end() :]
            fmt = "syslog"
    if (fmt == "syslog" or fmt == "plain") and rest.startswith("["):
        m = _DMESG_MONO.match(rest)
        if m is not None:
            mono, rest = float(m.group(1)), rest[m.end() :]
            if rest[:1] == "[" and (c := _CALLER.match(rest)) is not None:
                rest = rest[c.end():]
    clock = mono if mono is not None else _clock(time_text) if time_text is not None else None
    msg = rest.strip()
    if msg[-1:] in _CUT_MARKS:
        return _finish(msg, fmt, host, mono, time_text, None, clock, soft_end, indent)
    return Line(msg, fmt, host, mono, time_text, None, clock, False, soft_end, indent)


def _split_bracketed(line: str, indent: int, soft_end: bool) -> Line | None:
    """A line after a bracketed stamp of the rarer forms: ``talosctl dmesg``'s ISO stamp, ``dmesg -H``'s
    minute or relative stamp (no clock: the time since the line before is no time of day)."""
    m = _ISO_BRACKET.match(line) if line[1:2].isdigit() else _DMESG_H.match(line)
    if m is None:
        return None
    rest = line[m.end():]
    if rest[:1] == "[" and (c := _CALLER.match(rest)) is not None:
        rest = rest[c.end():]
    if m.re is _ISO_BRACKET:
        return _finish(rest, "iso", None, None, m.group(1), None, _clock(m.group(1)), soft_end, indent)
    return _finish(rest, "dmesg-T", None, None, m.group(0).strip(), None, None, soft_end, indent)


def _after_prefix(line: str, indent: int, soft_end: bool, prev: Line | None) -> Line | None:
    """A kernel line behind a prefix that is no log's own: a tool's (grep's file name, a host, a
    right-aligned line number), or any text before the kernel's own words (a level, a logger's
    prefix, a viewer's columns, quote marks). The prefix is kept on the line (`Line.foreign`): the
    lines that follow with the same prefix are read without it, whatever their message. The paste's
    marks (a mail quote, indentation) may come after such a prefix: grep ran on the pasted file."""
    if line.startswith(KERNEL_TEXTS):
        return None  # the kernel's own words with nothing before them
    inner = _behind_tools(line, indent, soft_end)
    if inner is not None:
        return inner
    at = kernel_text_start(line) if any(hint in line for hint in _KERNEL_HINTS) else -1
    if at > 0 or " kernel:" in line:
        # A log prefix of its own may follow the foreign one ("x: [ 1.2] Task in", "WARNING: > Jun 20
        # 03:23:46 host kernel: …"): the line is read from where that starts, the first place after a
        # separator from which the rest reads as a kernel line (ending in the kernel's words, when
        # known), unless what comes before makes the line another program's.
        end = min(at if at > 0 else len(line) - 1, _FOREIGN_MAX)
        program = _PROGRAM.search(line, 0, end)
        if program is not None:
            end = program.start()
        words = line[at:].strip() if at > 0 else ""  # its start: a comm may hold a space
        for k in range(1, end + 1):
            if line[k - 1] not in _SEPARATORS and line[k] not in "[<":
                continue
            rest = strip_paste(line[k:])[0]
            inner = _split_prefixed(rest, 0, soft_end) if rest else None
            if inner is not None and inner.fmt != "plain" and words[:40] in inner.msg[:80]:
                return _behind(inner, line[:k])
    if at <= 0 or _PROGRAM.search(line, 0, at) is not None or _STAMP.search(line, 0, at) is not None:
        return None  # no kernel words, or another program's line quoting them
    return _behind(_finish(line[at:], "plain", None, None, None, None, None, soft_end, 0), line[:at])


def _behind(line: Line, prefix: str) -> Line:
    """``line`` read behind ``prefix``; a quote mark the prefix opened is closed at the line's end."""
    line.foreign = prefix
    quote = prefix.rstrip()[-1:]
    if quote in ("'", '"') and line.msg.rstrip(",")[-1:] == quote:
        line.msg = line.msg.rstrip(",")[:-1].rstrip()
    return line


def quotes_kernel(prefix: str) -> bool:
    """Whether text before the kernel's words makes the line another program's quote of them."""
    return _PROGRAM.search(prefix) is not None or _STAMP.search(prefix) is not None


def _behind_tools(line: str, indent: int, soft_end: bool) -> Line | None:
    """A log line behind one or two tools' prefixes (a viewer's line number of grep's output)."""
    rest = line
    for _ in range(2):
        m = _TOOL_PREFIX.match(rest)
        if m is None:
            return None
        rest = strip_paste(rest[m.end():])[0]
        inner = _split_prefixed(rest, indent, soft_end) if rest else None
        if inner is not None and inner.fmt != "plain":
            return _behind(inner, line[:len(line) - len(rest)])
    return None


def kernel_text_start(line: str) -> int:
    """Where the kernel's own OOM text starts in ``line`` (after any prefix), or -1."""
    at = line.find(_HEADER_WORDS)
    if at > 0:
        # "%s invoked oom-killer:": the comm is the word before (a comm may hold brackets and colons:
        # "runc:[2:INIT]"), after a space, a /dev/kmsg header's ";", a quote mark or a column's bar.
        return max(line.rfind(c, 0, at) for c in _COMM_AFTER) + 1
    m = _KERNEL_TEXT.search(line)
    return m.start() if m is not None else -1


def _finish(
    rest: str,
    fmt: LineFormat,
    host: str | None,
    mono: float | None,
    time_text: str | None,
    seq: int | None,
    clock: float | None,
    soft_end: bool,
    indent: int = 0,
) -> Line:
    msg = rest.strip()
    cut = False
    if msg.endswith("…") and msg != "…":
        msg, cut = msg[:-1].rstrip(), True
    elif msg.endswith(">") and "<" not in msg[-12:] and not msg.endswith(("->", "=>")):
        msg, cut = msg[:-1].rstrip(), True  # less -S / a terminal marks a line cut at the screen edge
    return Line(msg, fmt, host, mono, time_text, seq, clock, cut=cut, soft_end=soft_end, indent=indent)


def continues(prev_raw: str, prev: Line, raw: str, *, first_raw: str | None = None) -> bool:
    """Whether ``raw`` is the rest of ``prev`` after a terminal or mail wrap.

    A wrapped part has no prefix of its own and follows a prefixed kernel line that ended
    softly (mail) or was long (a terminal's hard wrap). The paste's own marks (quotes, line
    numbers, indentation) were added after the wrap, so they are compared, not read: a wrapped
    part is never indented deeper than its line. Elision marks, prompts and code fences are
    never wrapped parts. ``first_raw``: the line's own first part, when ``prev_raw`` is a part.

    A line joined from its parts stays within `MAX_LINE`, what `split` keeps of any one line: a
    part that would make it longer is a line of its own. Without this bound every ordinary long
    line after a kernel line (a console capture, a node log with program output) was taken as one
    more wrapped part, and each part rescanned the whole line so far: quadratic (issue 36).
    """
    if len(prev.msg) + len(raw) > MAX_LINE:
        return False
    cut_message = incomplete(prev.msg)
    if prev.fmt == "plain" and not cut_message:
        return False  # text without stamps: only the kernel's own format says a line goes on
    numbered = _numbered(first_raw if first_raw is not None else prev_raw)
    text, indent = strip_paste(raw, numbers=numbered)
    long_prev = len(strip_paste(prev_raw, numbers=numbered)[0]) >= 60
    if not long_prev and first_raw is not None and first_raw[:1] == ">" and prev_raw[:1] != ">":
        # The last few characters of a quoted line a terminal wrapped ("…: Kil" / "l"): the line as
        # the mail shows it is the two together, long enough for the mail to have wrapped it too.
        long_prev = len(strip_paste(first_raw, numbers=numbered)[0]) + len(prev_raw) >= 60
    # "Killed process 2692" alone is no whole kernel message: its comm is on the next line, which
    # starts with the one space a wrap on a space leaves, however short the line was.
    cut_kill = _CUT_KILL.search(prev.msg[-_TAIL:]) is not None
    # A hard wrap that fell on a space starts its part with that one space.
    # A call-trace frame ("[<ffffffff8114e30a>] ? oom_kill_process+0x28a/0x3e0") wrapped off its
    # stamp is the whole message of a line that is nothing but its prefix.
    frame = text.startswith("[<") and not prev.msg.strip()
    # Compared with the line's own indent, or its outer one where a quote mark came after it
    # ("    > kernel: …" quoted, then indented): the part, cut off after the quote, has only that.
    outer = _outer_indent(first_raw if first_raw is not None else prev_raw)
    # A task table's header or row is one message: a terminal's wrap inside its column padding
    # starts the part with several spaces, never a multi-line message's continuation.
    table = long_prev and _TASK_TABLE.match(prev.msg) is not None and bool(text.strip()) and \
        text.lstrip()[0] not in "[<>$#`"
    slack = 1 if long_prev or cut_kill else 0
    if (not table and (not text or indent > max(prev.indent, outer) + slack)) or \
            (text[0] in "$#`[<>" and not frame):
        return False
    text = text.strip()
    if text == ":" and prev.msg.startswith("Memory cgroup stats for ") and not prev.msg.endswith(":"):
        return True  # "Memory cgroup stats for %s:" wrapped just before its colon: not an elision
    if not text or text in ELISIONS or text.startswith(("```", "...", "…")):
        return False
    if _split_prefixed(text, 0, False) is not None or _OTHER_LOG.match(text) is not None:
        return False
    if text[:1] != "[" and _behind_tools(text, 0, False) is not None:
        return False  # a log line behind a tool's prefix (a viewer's line number, grep's file name)
    foreign = prev.foreign
    if foreign and text.startswith(foreign) and \
            _split_prefixed(strip_paste(text[len(foreign):])[0] or " ", 0, False) is not None:
        return False  # a log line behind the prefix the line before had
    if _LEVEL.match(text) is not None or (text[:4] in _FACILITY_STARTS and _FACILITY.match(text)):
        return False  # dmesg -r and -x print their level on every line, a wrapped part has none
    if cut_kill or (prev.fmt == "plain" and cut_message):
        return True
    if _TASK_IN_DONE.match(prev.msg) is not None and " " in text:
        return False  # only the limit's path can go on; words after it are a line of their own
    if prev.fmt == "kmsg" and indent and _KMSG_DICT.match(" " + text):
        return False  # a /dev/kmsg dictionary line (SUBSYSTEM=…), not the rest of the message
    if prev.msg.startswith("Memory cgroup stats for ") and _V1_STATS_PART.match(text):
        # The rest of a one-line v1 stats line ("cache:…KB rss:…KB …"), whatever its parts'
        # lengths: wrapped twice (a terminal's wrap of a hard-wrapped paste), a part is short.
        return True
    return prev.soft_end or long_prev


#: What a wrap leaves of mem_cgroup_print_oom_info's one-line v1 stats ("%s:%luKB " per key, 3.x-5.x):
#: a key's or number's rest, whole keys, and the start of the next one.
#: A task table's header or row: "[ pid ]   uid  tgid …", "[  pid  ] …", "[   1762]   998 …".
_TASK_TABLE = re.compile(r"\[\s*(?:pid|\d{1,10})\s*\]\s")
_V1_STATS_PART = re.compile(r"(?:[a-z_]*:\d+KB|\d*K?B)(?: [a-z_]+:\d+KB)*(?: [a-z_]+(?::\d*K?)?)?$")


#: How much of a message's end the end-anchored patterns below need (their longest match is 25
#: characters): they look at that much only, so a check costs the same however long the line.
_TAIL = 32
#: "Task in %s killed as a result of limit of %s": nothing follows the second path on its line.
_TASK_IN_DONE = re.compile(r"Task in \S.* killed as a result of limit of \S+$")
_ENDS_OOM_KILL = re.compile(r",uid=\d{1,10}$")
_ENDS_HEADER = re.compile(r"oom_score_adj=-?\d{1,5}$")
_ENDS_KILLED = re.compile(r"(?:kB|oom_score_adj:-?\d{1,5}|\)\.?)$")
_ENDS_KILLED_5_1 = re.compile(r"(?:kB|oom_score_adj:-?\d{1,5})$")
_ENDS_ADJ = re.compile(r"oom_score_adj:-?\d{1,5}$")
_PREFIXED_KILLED = ("Memory cgroup out of memory: Killed", "Out of memory: Killed", "Out of memory (")


def incomplete(msg: str) -> bool:
    """An OOM message the kernel never ends where this one ends: its rest is on the next line.

    By the format strings: the oom-kill line ends ``,uid=%u`` (4.19+), the header
    ``oom_score_adj=%hd``, the Killed line ``oom_score_adj:%hd`` once it shows ``UID:`` (5.x), else
    a ``kB`` figure or, before 2.6.36 and without the 5.1+ prefix, the comm's parenthesis; ``Task in
    %s killed as a result of limit of %s`` has both paths.
    """
    if msg.startswith("oom-kill:"):
        return _ENDS_OOM_KILL.search(msg[-_TAIL:]) is None
    if msg.startswith("Task in "):
        return _TASK_IN_DONE.match(msg) is None
    if " invoked oom-killer:" in msg[:48]:
        return _ENDS_HEADER.search(msg[-_TAIL:]) is None
    if "Killed process " in msg[:64]:
        if " UID:" in msg or " pgtables:" in msg:
            return _ENDS_ADJ.search(msg[-_TAIL:]) is None
        if msg.startswith(_PREFIXED_KILLED):
            return _ENDS_KILLED_5_1.search(msg[-_TAIL:]) is None  # 5.1+: the rss figures always follow
        return _ENDS_KILLED.search(msg[-_TAIL:]) is None
    return False


#: A kill line the kernel never ends there: "[Kk]ill(ed) process %d (%s)…", its pid the last word.
_CUT_KILL = re.compile(r"(?:[Kk]ill(?:ed)?|reaped) process \d{1,10}$")

#: Another program's line or a shell prompt: "containerd[1021]: ...", "root@node-7:~# ...".
_OTHER_LOG = re.compile(r"[\w.@/-]{1,64}\[\d{1,10}\]: |[\w.-]{1,32}@[\w.-]{1,64}:\S{0,256}[#$] ?")

_JOINED = re.compile(r"(?<=\S) +(?=\[ {0,12}\d{1,10}\.\d{6}\] )")
_JOINED_SYSLOG = re.compile(
    r"(?<=\S) +(?=[^\W\d_]{2,9}\.? {1,2}\d{1,2},? \d\d:\d\d:\d\d(?:\.\d+)? (?:\S{1,255} )?kernel: )"
)
_JOINED_T = re.compile(
    r"(?<=\S) +(?=\[[^\[\]\d]{0,16}(?:\d{1,2}[^\[\]\d\s]{1,4} {0,2})?\d{1,2} \d\d:\d\d:\d\d(?: \d{4})?\] )"
)


def may_be_joined(raw: str) -> bool:
    """A cheap look for a second stamp inside a line, before `unjoin` reads it (every line pays this).

    A dmesg stamp ends in six fraction digits then "] ", a ``dmesg -T`` one in ``HH:MM:SS] `` or
    ``HH:MM:SS YYYY] ``; a syslog line glued on brings a second " kernel: ". A task row's
    ``[ 1234] `` is none of these.
    """
    at = raw.find("] ")
    if at >= 0:
        at = raw.find("] ", at + 2)
        while at >= 7:
            if raw[at - 7] == "." or raw[at - 3] == ":" or (raw[at - 5] == " " and raw[at - 8] == ":"):
                return True
            at = raw.find("] ", at + 2)
    return raw.count(" kernel: ") >= 2


def unjoin(raw: str) -> list[str]:
    """Lines a paste glued together ("[  1.000001] a [  1.000002] b"), apart again.

    Only dmesg stamps with their six-digit fraction, ``dmesg -T`` stamps with their time of day, or
    syslog stamps followed by ``kernel:``, split a line, and only a line that starts with one of the
    same kind: a message that merely mentions a time in brackets stays whole.
    """
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)  # the head below is what strip_paste cut off the front, and only that
    text, _ = strip_paste(raw)
    if text.startswith("[") and _DMESG_MONO.match(text) is not None:
        joined = _JOINED
    elif text.startswith("[") and _DMESG_T.match(text) is not None:
        joined = _JOINED_T
    elif _SYSLOG.match(text) is not None:
        joined = _JOINED_SYSLOG
    else:
        return [raw]
    head = raw[: len(raw) - len(text)]
    parts = joined.split(text)
    if len(parts) == 1:
        return [raw]
    return [head + part for part in parts]


#: Whole words of the OOM messages (mm/oom_kill.c, mm/memcontrol.c): a wrap between two of them
#: fell where the kernel printed a space, even when the mail client that broke the line there
#: dropped it. A terminal's hard wrap cuts at a column, mid-word as likely as not, and a cut
#: between two whole words leaves the space on one side of it.
_KERNEL_WORDS = frozenset({
    "Kill", "kill", "Killed", "killed", "process", "processes", "invoked", "oom-killer:", "Memory",
    "memory", "memory:", "cgroup", "Out", "out", "of", "and", "no", "killable", "Task", "Tasks",
    "in", "as", "a", "result", "limit", "score", "or", "sacrifice", "child", "are", "going", "to",
    "be", "due", "set", "reaped", "now", "stats", "for", "state", "values", "usage", "failcnt",
})


def _between_words(left: str, right: str) -> bool:
    """Whether a wrap between ``left`` and ``right`` fell between two of the kernel's words, or
    between a pid and its ``(comm)`` ("process %d (%s)": the kernel always prints the space)."""
    last, first = left.rpartition(" ")[2], right.partition(" ")[0]
    if last.isdigit() and first.startswith("(") and left[-len(last) - 9:-len(last)].endswith("process "):
        return True
    if first.startswith(_SPACED_FIELDS):
        return True
    return last in _KERNEL_WORDS and first in _KERNEL_WORDS


#: Fields the kernel prints after a space ("Killed process %d (%s) total-vm:%lukB, anon-rss:…",
#: "invoked oom-killer: gfp_mask=%#x(%pGg), order=%d, oom_score_adj=%hd"): a wrap before one of
#: them fell on that space.
_SPACED_FIELDS = ("total-vm:", "anon-rss:", "file-rss:", "shmem-rss:", "UID:", "pgtables:",
                  "oom_score_adj:", "gfp_mask=", "order=", "oom_score_adj=", "nodemask=")


def _numbered(raw: str) -> int:
    """How many line numbers (an editor's, grep's) the line carries: its wrapped parts carry as many."""
    bare, one = strip_paste(raw, numbers=0)[0], strip_paste(raw, numbers=1)[0]
    if one == bare:
        return 0
    return 1 if strip_paste(raw, numbers=2)[0] == one else 2


def _outer_indent(raw: str) -> int:
    """Whitespace right before a line's innermost quote mark, after any line number (0 without one)."""
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)
    indent = before_quote = 0
    for _ in range(6):
        stripped = raw.lstrip(" \t")
        if stripped != raw:
            indent, raw = len(raw) - len(stripped), stripped
        if raw[:1] == ">":
            before_quote, raw, indent = indent, raw[1:], 0  # the innermost quote's counts
            continue
        m = _LINE_NO.match(raw) if raw[:1].isdigit() else None
        if m is None:
            break
        raw, indent = raw[m.end():], 0
    return before_quote


def join(prev: Line, raw: str, *, first_raw: str | None = None) -> Line:
    """``prev`` with its wrapped part appended: a soft (mail) wrap keeps a space, a hard wrap none.

    ``first_raw``: the line's first part, whose indent before a quote mark the parts share.
    """
    text, indent = strip_paste(raw, numbers=_numbered(first_raw) if first_raw is not None else 2)
    soft_end = text[-1:] in (" ", "\t")  # after the paste's marks: a colour's reset, a CR
    text = text.strip()
    base = max(prev.indent, _outer_indent(first_raw)) if first_raw is not None else prev.indent
    soft = prev.soft_end or indent > base or _between_words(prev.msg, text)
    glue = " " if soft else ""
    msg, mono, clock = prev.msg + glue + text, prev.mono, prev.clock
    if mono is None and msg.startswith("[") and (m := _DMESG_MONO.match(msg)) is not None:
        # A wrap inside the dmesg stamp after a syslog prefix ("kernel: [ " / "8341.856856] …"):
        # the stamp is whole again only now.
        msg, mono = msg[m.end():], float(m.group(1))
        clock = mono  # as split() sets it for a whole line: the stamp orders lines, not the syslog time
    return _finish(msg, prev.fmt, prev.host, mono, prev.time_text, prev.seq, clock, soft_end, prev.indent)


#: A quoted-printable escape: every "=" the kernel printed reads "=3D" in a mail's raw source.
_QP_ESCAPE = re.compile(r"=([0-9A-F]{2})")


def unquote_printable(lines: Iterable[str]) -> Iterator[str]:
    """Lines of a mail's raw quoted-printable source, decoded; other text passes unchanged.

    A paste is read as quoted-printable from its first line holding ``=3D`` (the kernel's OOM
    lines are full of "="): from there a line ending in "=" is a soft break, joined to the next,
    and ``=XX`` escapes are decoded. A joined line is bounded by `MAX_LINE`.
    """
    qp = False
    pending = ""
    for raw in lines:
        if not qp:
            if "=3D" not in raw:
                yield raw
                continue
            qp = True
        line = raw.rstrip("\r\n")
        if line.endswith("=") and not line.endswith("=3D") and len(pending) + len(line) < MAX_LINE:
            pending += line[:-1]
            continue
        yield _QP_ESCAPE.sub(_qp_char, pending + line)
        pending = ""
    if pending:
        yield _QP_ESCAPE.sub(_qp_char, pending)


def _qp_char(m: re.Match[str]) -> str:
    code = int(m.group(1), 16)
    return chr(code) if 32 <= code < 127 or code == 9 else m.group(0)


#: Markdown's backslash escapes of characters the kernel prints ("gfp\_mask" for "gfp_mask").
_MD_ESCAPE = re.compile(r"\\([_\[\]*<>`#|~])")
#: An escaped underscore inside one of the kernel's own field names: the paste went through Markdown.
_MD_KERNEL_ESCAPE = re.compile(r"(?:gfp|oom|score|total|pgtables|anon|file|shmem|mems)\\_")


def join_continued(lines: Iterable[str]) -> Iterator[str]:
    """Lines broken with a trailing backslash (a shell's line continuation, which people use to fold a
    long kernel line in a note or a slide) joined again, the next line's indentation dropped. Only an
    indented next line continues: Markdown's hard line break is a trailing backslash too, and there the
    next line is a line of its own at the margin. A joined line is bounded by `MAX_LINE`."""
    pending = ""
    for raw in lines:
        if pending:
            if raw[:1] in (" ", "\t"):
                raw = pending + raw.lstrip(" \t")
            else:
                yield pending + "\\\n"
            pending = ""
        line = raw.rstrip("\r\n")
        if line.endswith("\\") and len(line) < MAX_LINE:
            pending = line[:-1]
            continue
        yield raw
    if pending:
        yield pending + "\\"


def unescape_markdown(lines: Iterable[str]) -> Iterator[str]:
    """Lines of text that went through Markdown escaping, its backslash escapes taken out.

    From the first line where one of the kernel's field names reads escaped (``gfp\\_mask``,
    ``oom\\_score\\_adj``) on: before, a backslash is the text's own (a comm may hold one).
    """
    escaped = False
    for raw in lines:
        if not escaped and "\\" in raw and _MD_KERNEL_ESCAPE.search(raw) is not None:
            escaped = True
        yield _MD_ESCAPE.sub(r"\1", raw) if escaped and "\\" in raw else raw
