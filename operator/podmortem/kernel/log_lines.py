"""One kernel log line as people paste it, split into its prefix (time, host, kmsg header) and message.

Why a module of its own: the forms a line reaches us in (``dmesg``, ``dmesg -T`` in any locale,
raw ``/dev/kmsg``, ``journalctl -k`` and syslog in any locale, mail quotes, terminal and mail
wraps, pager cuts) are independent of what the OOM parser reads in the message, and each needs
its own care to stay linear on hostile input: every regex here is anchored and bounded.

Only lines whose prefix says they came from the kernel (``kernel:`` in syslog, a dmesg or kmsg
stamp), or bare lines with no prefix at all, are kernel messages. Lines of other programs
(kubelet, containerd, node-problem-detector, systemd-oomd) keep their whole text as the message,
so they never start with a kernel form and never become part of a record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from podmortem.reports.oom_record import LineFormat

_QUOTE = re.compile(r"(?:> ?)+")
_KMSG = re.compile(r"(\d+),(\d+),(\d+),[^;]{0,64};")
_DMESG_MONO = re.compile(r"\[\s*(\d+\.\d+)\] ?")
#: dmesg -T in any locale: "[Thu May  9 14:52:38 2024]", "[四 3月 18 18:47:12 2021]", "[Tue Jun  9 11:02:17]".
_DMESG_T = re.compile(
    r"\[([^\[\]\d]{0,16}(?:\d{1,2}[^\[\]\d\s]{1,4} ?)?\d{1,2} \d\d:\d\d:\d\d(?: \d{4})?)\] ?"
)
_ISO = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?) ")
#: syslog / journalctl short in any locale: "Jan  5 02:12:02 host kernel:", "апр 28 01:23:30 PC kernel:".
_SYSLOG = re.compile(r"([^\W\d_]{2,9}\.? {1,2}\d{1,2},? \d\d:\d\d:\d\d(?:\.\d+)?) (\S{1,255}) kernel: ?")
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


def split(raw: str, prev: Line | None) -> Line | None:
    """Strip quoting and the prefix; None for lines that carry no message at all."""
    line = raw if len(raw) <= MAX_LINE else raw[:MAX_LINE]
    if line[:1] == ">":
        line = strip_quote(line)
    if not line or line.isspace():
        return None
    soft_end = line[-1:] in (" ", "\t")
    first = line[0]
    if first == " " or first == "\t":
        if prev is not None and prev.fmt == "kmsg" and _KMSG_DICT.match(line):
            return None  # a /dev/kmsg dictionary line (SUBSYSTEM=…, DEVICE=…)
        msg = line.strip()
        if prev is not None:
            # dmesg and journalctl show a multi-line message with indented continuation lines.
            return Line(
                msg, prev.fmt, prev.host, prev.mono, prev.time_text, None, prev.clock, soft_end=soft_end
            )
        return Line(msg, "plain", None, None, None, None, None, soft_end=soft_end)
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
                return _finish(msg, "kmsg", None, mono, None, int(m.group(2)), mono, soft_end)
            return Line(msg, "kmsg", None, mono, None, int(m.group(2)), mono, False, soft_end)
        m = _ISO.match(line)
        if m is not None:
            fmt, time_text, rest = "iso", m.group(1), line[m.end() :]
    elif first == "[":
        m = _DMESG_MONO.match(line)
        if m is not None:
            fmt, mono, rest = "dmesg", float(m.group(1)), line[m.end() :]
            if rest.find(" kernel:", 0, 264) < 0:
                # Plain dmesg, the commonest form: nothing more to strip.
                msg = rest.strip()
                if msg[-1:] in _CUT_MARKS:
                    return _finish(msg, "dmesg", None, mono, None, None, mono, soft_end)
                return Line(msg, "dmesg", None, mono, None, None, mono, False, soft_end)
        else:
            cached = _last_prefix
            if cached[1] == "dmesg-T" and line.startswith(cached[0]):
                fmt, time_text, rest = "dmesg-T", cached[2], line[len(cached[0]) :]
            else:
                m = _DMESG_T.match(line)
                if m is not None:
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
    if (fmt == "dmesg" or fmt == "iso") and rest.find(" kernel:", 0, 264) > 0:
        # journalctl -o short-iso / short-monotonic: "<stamp> host kernel: msg"
        m = _HOST_KERNEL.match(rest)
        if m is not None:
            host, rest = m.group(1), rest[m.end() :]
            fmt = "syslog"
    if fmt == "syslog" and rest.startswith("["):
        m = _DMESG_MONO.match(rest)
        if m is not None:
            mono, rest = float(m.group(1)), rest[m.end() :]
    clock = mono if mono is not None else _clock(time_text) if time_text is not None else None
    msg = rest.strip()
    if msg[-1:] in _CUT_MARKS:
        return _finish(msg, fmt, host, mono, time_text, None, clock, soft_end)
    return Line(msg, fmt, host, mono, time_text, None, clock, False, soft_end)


def _finish(
    rest: str,
    fmt: LineFormat,
    host: str | None,
    mono: float | None,
    time_text: str | None,
    seq: int | None,
    clock: float | None,
    soft_end: bool,
) -> Line:
    msg = rest.strip()
    cut = False
    if msg.endswith("…") and msg != "…":
        msg, cut = msg[:-1].rstrip(), True
    elif msg.endswith(">") and "<" not in msg[-12:] and not msg.endswith(("->", "=>")):
        msg, cut = msg[:-1].rstrip(), True  # less -S / a terminal marks a line cut at the screen edge
    return Line(msg, fmt, host, mono, time_text, seq, clock, cut=cut, soft_end=soft_end)


def continues(prev_raw: str, prev: Line, raw: str) -> bool:
    """Whether ``raw`` is the rest of ``prev`` after a terminal or mail wrap.

    A wrapped part has no prefix of its own and follows a prefixed kernel line that ended
    softly (mail) or was long (a terminal's hard wrap). Indented lines, elision marks,
    prompts and code fences are never wrapped parts.
    """
    unquoted = strip_quote(raw)
    if prev.fmt in ("plain", "kmsg") or not unquoted or unquoted[0] in " \t$#`[<>":
        return False
    text = unquoted.strip()
    if not text or text in ELISIONS or text.startswith(("```", "...", "…")):
        return False
    if _starts_prefixed(text):
        return False
    return prev.soft_end or len(strip_quote(prev_raw)) >= 60


def _starts_prefixed(text: str) -> bool:
    first = text[0]
    if first.isdigit():
        return _KMSG.match(text) is not None or _ISO.match(text) is not None
    if first.isalpha():
        return _ANY_SYSLOG.match(text) is not None or text.startswith("kernel: ")
    return False


def join(prev: Line, raw: str) -> Line:
    """``prev`` with its wrapped part appended: a soft (mail) wrap keeps a space, a hard wrap none."""
    text = strip_quote(raw).strip()
    glue = " " if prev.soft_end else ""
    soft_end = raw[-1:] in (" ", "\t")
    return _finish(
        prev.msg + glue + text, prev.fmt, prev.host, prev.mono, prev.time_text, prev.seq, prev.clock, soft_end
    )
