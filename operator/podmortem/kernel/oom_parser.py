"""Kernel OOM-kill records out of kernel log text, as people have it: one `OomKillRecord` per kill.

Input can be ``dmesg``, ``dmesg -T``, raw ``/dev/kmsg`` records, ``journalctl -k``,
syslog files, or any of those quoted in an email (``> ``), with unrelated lines
around and between records, lines from several hosts interleaved (syslog
aggregation), and records cut short. The parser never raises on input text:
what it cannot read it skips, and a record that lacks parts says so in
``missing``.

It is a single pass over lines. Each line's prefix (timestamp, host, kmsg header)
is stripped with one anchored regex chosen by the first character, and the
message is classified by cheap ``startswith``/``in`` tests before any regex runs.
A record starts at ``invoked oom-killer`` or at any later part when none is open,
and ends at the next header, when a part comes out of the kernel's printing order,
or after a pause of more than ``RECORD_GAP_S`` seconds.

Why one module of this size: the kernel prints one record across many line forms (mm/oom_kill.c,
mm/memcontrol.c, show_mem) whose meaning depends on the lines before them; one parser with one state
keeps every form's rule next to the others.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from podmortem.reports.memory import CgroupMemoryStat, detect_version
from podmortem.reports.oom_record import (
    ChosenVictim,
    KilledProcess,
    LineFormat,
    MemoryCounter,
    OomKillLine,
    OomKillRecord,
    OomTask,
    ReapedProcess,
)

#: Lines of one record are printed within milliseconds; a longer pause means a new record.
RECORD_GAP_S = 10.0

# -- line prefixes ---------------------------------------------------------------------------------
_KMSG = re.compile(r"(\d+),(\d+),(\d+),[^;]*;")
_DMESG_MONO = re.compile(r"\[\s*(\d+\.\d+)\] ?")
_DMESG_T = re.compile(r"\[([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\] ?")
_ISO = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?) ")
_SYSLOG = re.compile(r"([A-Za-z]{3} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?) (\S+) kernel: ?")
_HOST_KERNEL = re.compile(r"(\S+) kernel: ?")
_MONO_AFTER = re.compile(r"\[\s*(\d+\.\d+)\] ?")
_KMSG_DICT = re.compile(r" [A-Z][A-Z0-9_]*=")
_CLOCK = re.compile(r"(\d\d):(\d\d):(\d\d)")

# -- messages --------------------------------------------------------------------------------------
_HEADER_FIELD = re.compile(r"(\w+)=([^,\s(]*(?:\([^)]*\))?)")
_CPU = re.compile(r"CPU: \d+ (?:UID: \d+ )?PID: (\d+) Comm: (.*?) (?:Not tainted|Tainted: )")
_KVER = re.compile(r"(\d+\.\d+\.\d+[^\s#]*)")
_COUNTER = re.compile(r"([\w.+]+): usage (\d+)kB, limit (\d+)kB, failcnt (\d+)")
_TASK_ROW = re.compile(r"\[\s*(\d+)\]\s+(.*)")
_KILLED = re.compile(
    r"Killed process (\d+) \((.*)\)(?: total-vm:(\d+)kB)?(?:, anon-rss:(\d+)kB)?(?:, file-rss:(\d+)kB)?"
    r"(?:, shmem-rss:(\d+)kB)?(?:,? UID:(\d+))?(?: pgtables:(\d+)kB)?(?: oom_score_adj:(-?\d+))?"
)
_CHOSEN = re.compile(r"Kill process (\d+) \((.*)\)(?: score (-?\d+))?")
_REAPED = re.compile(
    r"oom_reaper: reaped process (\d+) \((.*)\), now anon-rss:(\d+)kB, file-rss:(\d+)kB"
    r"(?:, shmem-rss:(\d+)kB)?"
)
_OOM_KILL_TAIL = re.compile(r",task=(.*),pid=(\d+),uid=(\d+)\s*$")
_TASK_IN = re.compile(r"Task in (.*) killed as a result of limit of (\S+)")
_TASKS_IN = re.compile(r"Tasks in (.*) are going to be killed due to memory\.oom\.group set")
_OLD_CPUSET = re.compile(r".* cpuset=(\S*) mems_allowed=\S*$")

# Printing order of a record's parts: a part earlier than the last one seen starts a new record.
_HEADER, _CPU_LINE, _TASK_IN_LINE, _COUNTERS, _STATS, _TASKS, _DECISION, _KILL, _REAP = range(9)

#: Task-table column → OomTask field.
_COLUMN_FIELDS = {
    "uid": "uid",
    "tgid": "tgid",
    "total_vm": "total_vm_pages",
    "rss": "rss_pages",
    "rss_anon": "rss_anon_pages",
    "rss_file": "rss_file_pages",
    "rss_shmem": "rss_shmem_pages",
    "pgtables_bytes": "pgtables_bytes",
    "nr_ptes": "nr_ptes",
    "swapents": "swapents_pages",
    "oom_score_adj": "oom_score_adj",
}
_NEW_COLUMNS = [
    "uid",
    "tgid",
    "total_vm",
    "rss",
    "rss_anon",
    "rss_file",
    "rss_shmem",
    "pgtables_bytes",
    "swapents",
    "oom_score_adj",
    "name",
]
_OLD_COLUMNS = ["uid", "tgid", "total_vm", "rss", "pgtables_bytes", "swapents", "oom_score_adj", "name"]


@dataclass(slots=True)
class _Line:
    """A kernel message with what its prefix said."""

    msg: str
    fmt: LineFormat
    host: str | None
    mono: float | None
    time_text: str | None
    seq: int | None
    #: Seconds since some origin, for gap detection (monotonic, or the time of day of a human stamp).
    clock: float | None


@dataclass(slots=True)
class _Builder:
    """One record being assembled, with the parser's position inside it."""

    first: _Line
    stage: int = -1
    header: bool = False
    fields: dict[str, object] = field(default_factory=dict)
    counters: dict[str, MemoryCounter] = field(default_factory=dict)
    stats: list[CgroupMemoryStat] = field(default_factory=list)
    stat_open: CgroupMemoryStat | None = None
    stat_headers_without_keys: int = 0
    columns: list[str] | None = None
    table_format: str | None = None
    task_header_seen: bool = False
    tasks: list[OomTask] = field(default_factory=list)
    oom_kill: OomKillLine | None = None
    chosen: ChosenVictim | None = None
    scope: str | None = None
    killed: dict[int, KilledProcess] = field(default_factory=dict)
    group: str | None = None
    reaped: list[ReapedProcess] = field(default_factory=list)
    missing: set[str] = field(default_factory=set)
    lines: int = 0
    last_clock: float | None = None

    def substantive(self) -> bool:
        """Enough to call it an OOM kill (not just a stray table or reaper line)."""
        return (
            self.header
            or self.oom_kill is not None
            or bool(self.killed)
            or self.chosen is not None
            or "task_in" in self.fields
        )


def _split_prefix(line: str, prev: _Line | None) -> _Line | None:
    """Strip quoting and the timestamp/host prefix; None for lines that carry no kernel message."""
    while line.startswith(">"):
        line = line[2:] if line.startswith("> ") else line[1:]
    if not line:
        return None
    first = line[0]
    if first == " " or first == "\t":
        if _KMSG_DICT.match(line) and prev is not None and prev.fmt == "kmsg":
            return None  # a /dev/kmsg dictionary line (SUBSYSTEM=…, DEVICE=…)
        msg = line.strip()
        if prev is not None:
            # dmesg shows a multi-line message with indented continuation lines.
            return _Line(msg, prev.fmt, prev.host, prev.mono, prev.time_text, None, prev.clock)
        return _Line(msg, "plain", None, None, None, None, None)
    fmt: LineFormat = "plain"
    host = None
    mono = None
    time_text = None
    seq = None
    clock = None
    rest = line
    if first.isdigit():
        m = _KMSG.match(line)
        if m is not None:
            seq = int(m.group(2))
            mono = int(m.group(3)) / 1e6
            return _Line(line[m.end() :].strip(), "kmsg", None, mono, None, seq, mono)
        m = _ISO.match(line)
        if m is not None:
            fmt, time_text, rest = "iso", m.group(1), line[m.end() :]
    elif first == "[":
        m = _DMESG_MONO.match(line)
        if m is not None:
            fmt, mono, rest = "dmesg", float(m.group(1)), line[m.end() :]
        else:
            m = _DMESG_T.match(line)
            if m is not None:
                fmt, time_text, rest = "dmesg-T", m.group(1), line[m.end() :]
    elif first.isalpha():
        m = _SYSLOG.match(line)
        if m is not None:
            fmt, time_text, host, rest = "syslog", m.group(1), m.group(2), line[m.end() :]
    if fmt in ("iso", "dmesg"):
        # journalctl -o short-iso / short-monotonic: "<stamp> host kernel: msg"
        m = _HOST_KERNEL.match(rest)
        if m is not None:
            host, rest = m.group(1), rest[m.end() :]
            fmt = "syslog"
    if fmt == "syslog" and rest.startswith("["):
        m = _MONO_AFTER.match(rest)
        if m is not None:
            mono, rest = float(m.group(1)), rest[m.end() :]
    if mono is not None:
        clock = mono
    elif time_text is not None:
        c = _CLOCK.search(time_text)
        if c is not None:
            clock = int(c.group(1)) * 3600 + int(c.group(2)) * 60 + int(c.group(3))
    return _Line(rest.strip(), fmt, host, mono, time_text, seq, clock)


def _parse_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


class OomParser:
    """Incremental parser: ``feed`` lines (any size of input, streamed), then ``finish``.

    ``parse_text``/``parse_lines`` wrap it for whole inputs.
    """

    def __init__(self) -> None:
        self._open: dict[str | None, _Builder] = {}
        self._last_done: dict[str | None, OomKillRecord] = {}
        self._prev: _Line | None = None
        self._last_seq: int | None = None
        self._done: list[OomKillRecord] = []

    # -- public ------------------------------------------------------------------------------------

    def feed(self, raw: str) -> None:
        """One line of text, with or without its newline. Never raises on odd text."""
        if "\\x0a" in raw:
            # /dev/kmsg escapes newlines inside one record (multi-line memory.stat on some kernels).
            head, *more = raw.rstrip("\r\n").split("\\x0a")
            self.feed(head)
            for extra in more:
                self.feed(" " + extra)
            return
        line = _split_prefix(raw.rstrip("\r\n"), self._prev)
        if line is None:
            return
        self._prev = line
        if line.seq is not None:
            last = self._last_seq
            if last is not None and line.seq > last + 1:
                # /dev/kmsg records were lost (overwritten, or filtered out) inside open records.
                for b in self._open.values():
                    if b.first.fmt == "kmsg" and b.stage < _KILL:
                        b.missing.add("kmsg-gap")
            self._last_seq = line.seq
        if line.msg:
            self._message(line)

    def take(self) -> list[OomKillRecord]:
        """Records completed so far (a later header, out-of-order part or pause closed them)."""
        done, self._done = self._done, []
        return done

    def finish(self) -> list[OomKillRecord]:
        """Close every open record and return all not yet taken, in order of their first line."""
        for key in list(self._open):
            self._close(key)
        return self.take()

    # -- dispatch ----------------------------------------------------------------------------------

    def _message(self, line: _Line) -> None:
        msg = line.msg
        key = line.host
        b = self._open.get(key)
        if b is not None:
            block = b.stat_open
            if block is not None:
                # Hottest path: one "key value" line of a memory.stat block (bytes as printed).
                key, sp, value = msg.partition(" ")
                if (
                    sp
                    and (value.isdigit() or (value[:1] == "-" and value[1:].isdigit()))
                    and key.isidentifier()
                ):
                    b.lines += 1
                    block.stat[key] = int(value)
                    return
                self._end_stat(b)
            if (b.columns is not None or b.task_header_seen) and msg[:1] == "[" and msg[1:2] != "<":
                m = _TASK_ROW.match(msg)
                if m is not None:
                    self._touch(b, line)
                    self._task_row(b, int(m.group(1)), m.group(2))
                    return
        self._classify(line)

    def _classify(self, line: _Line) -> None:
        msg = line.msg
        if " invoked oom-killer:" in msg:
            self._header(line)
        elif msg.startswith("CPU: ") and " PID: " in msg:
            b = self._part(line, _CPU_LINE, new_only_if_open=True)
            if b is not None:
                m = _CPU.match(msg)
                if m is not None:
                    b.fields.setdefault("trigger_pid", int(m.group(1)))
                    b.fields.setdefault("trigger_comm", m.group(2))
                    rest = msg[m.end() :]
                    v = _KVER.search(rest)
                    if v is not None:
                        b.fields["kernel_version"] = v.group(1)
        elif ": usage " in msg and "failcnt" in msg:
            m = _COUNTER.match(msg)
            if m is not None:
                name = m.group(1)
                b = self._open.get(line.host)
                if b is not None and name in b.counters:
                    self._close(line.host)
                b = self._part(line, _COUNTERS)
                if b is not None:
                    b.counters[name] = MemoryCounter(
                        usage_kb=int(m.group(2)), limit_kb=int(m.group(3)), failcnt=int(m.group(4))
                    )
        elif msg.startswith("Memory cgroup stats for "):
            self._stats_header(line)
        elif msg.startswith("Tasks state"):
            b = self._open.get(line.host)
            if b is not None and (b.tasks or b.task_header_seen):
                self._close(line.host)
            b = self._part(line, _TASKS)
            if b is not None:
                b.task_header_seen = True
        elif msg[:1] == "[" and "pid" in msg[:14] and msg.endswith("name"):
            self._task_header(line)
        elif msg[:1] == "[" and msg[1:2] != "<" and self._open.get(line.host) is None:
            m = _TASK_ROW.match(msg)
            if m is not None and len(m.group(2).split()) >= 7:
                # A task row with no table open: the record's head was cut (grep -A, truncation).
                b = self._part(line, _TASKS)
                if b is not None:
                    b.missing.add("header")
                    self._task_row(b, int(m.group(1)), m.group(2))
        elif msg.startswith("oom-kill:"):
            self._oom_kill_line(line)
        elif "Killed process " in msg:
            self._killed(line)
        elif "Kill process " in msg and "out of memory" in msg.lower():
            m = _CHOSEN.search(msg)
            if m is not None:
                b = self._open.get(line.host)
                if b is not None and b.chosen is not None:
                    self._close(line.host)
                b = self._part(line, _DECISION)
                if b is not None:
                    self._scope(b, msg)
                    b.chosen = ChosenVictim(
                        pid=int(m.group(1)),
                        comm=m.group(2),
                        score=_parse_int(m.group(3)) if m.group(3) else None,
                    )
        elif msg.startswith("Task in ") and " killed as a result of limit of " in msg:
            m = _TASK_IN.match(msg)
            if m is not None:
                b = self._part(line, _TASK_IN_LINE)
                if b is not None:
                    b.fields["task_in"] = m.group(1)
                    b.fields["limit_of"] = m.group(2)
        elif msg.startswith("Tasks in ") and "memory.oom.group" in msg:
            m = _TASKS_IN.match(msg)
            if m is not None:
                b = self._part(line, _KILL)
                if b is not None:
                    b.group = m.group(1)
        elif msg.startswith("oom_reaper: reaped process "):
            self._reaped(line)
        elif msg == "--" or msg.startswith("..."):
            # An elision mark (grep's "--", a poster's "...") carries no host: it cuts every open record.
            for b in self._open.values():
                b.missing.add("elided")
        elif " cpuset=" in msg and " mems_allowed=" in msg:
            b = self._open.get(line.host)
            if b is not None and b.stage <= _CPU_LINE:
                m = _OLD_CPUSET.match(msg)
                if m is not None:
                    b.fields["cpuset"] = m.group(1)

    # -- record boundaries -------------------------------------------------------------------------

    def _touch(self, b: _Builder, line: _Line) -> None:
        b.lines += 1
        if line.clock is not None:
            b.last_clock = line.clock

    def _gap(self, b: _Builder, line: _Line) -> bool:
        if line.clock is None or b.last_clock is None:
            return False
        delta = abs(line.clock - b.last_clock)
        if line.mono is None:
            delta = min(delta, 86400 - delta)  # a time of day wraps at midnight
        return delta > RECORD_GAP_S

    def _part(self, line: _Line, stage: int, *, new_only_if_open: bool = False) -> _Builder | None:
        """The open record this part belongs to, opening a new (partial) one where needed."""
        key = line.host
        b = self._open.get(key)
        if b is not None and (stage < b.stage or self._gap(b, line)):
            self._close(key)
            b = None
        if b is None:
            if new_only_if_open:
                return None
            b = _Builder(first=line)
            self._open[key] = b
        if stage > b.stage:
            b.stage = stage
        self._touch(b, line)
        return b

    def _close(self, key: str | None) -> None:
        b = self._open.pop(key, None)
        if b is None:
            return
        if b.substantive():
            record = self._build(b)
            self._done.append(record)
            self._last_done[key] = record

    # -- parts -------------------------------------------------------------------------------------

    def _header(self, line: _Line) -> None:
        msg = line.msg
        self._close(line.host)
        b = self._part(line, _HEADER)
        assert b is not None
        b.header = True
        idx = msg.index(" invoked oom-killer:")
        b.fields["trigger_comm"] = msg[:idx]
        for k, v in _HEADER_FIELD.findall(msg, idx + 20):
            if k == "gfp_mask":
                b.fields["gfp_mask"] = v
            elif k == "order":
                b.fields["order"] = _parse_int(v)
            elif k == "oom_score_adj":
                b.fields["trigger_oom_score_adj"] = _parse_int(v)

    def _stats_header(self, line: _Line) -> None:
        b = self._open.get(line.host)
        if b is not None and b.stage > _STATS:
            self._close(line.host)
        b = self._part(line, _STATS)
        if b is None:
            return
        self._end_stat(b)
        body = line.msg[len("Memory cgroup stats for ") :]
        path, sep, tokens = body.partition(": ")
        if not sep:
            path = body[:-1] if body.endswith(":") else body
            tokens = ""
        block = CgroupMemoryStat(path=path or None)
        b.stats.append(block)
        b.stat_open = block
        if tokens:
            # Old kernels: the whole block on one line, "cache:0KB rss:123552KB …".
            for tok in tokens.split():
                k, _, v = tok.partition(":")
                if v.endswith("KB"):
                    n = _parse_int(v[:-2])
                    if n is not None:
                        self._add_stat(b, k, n * 1024, "KB")
                else:
                    n = _parse_int(v)
                    if n is not None:
                        self._add_stat(b, k, n, "bytes")
            self._end_stat(b)

    def _add_stat(self, b: _Builder, key: str, value: int, unit: str) -> None:
        block = b.stat_open
        if block is None:
            return
        block.stat[key] = value
        if unit == "KB":
            block.printed_unit = "KB"

    def _end_stat(self, b: _Builder) -> None:
        block = b.stat_open
        if block is None:
            return
        b.stat_open = None
        if not block.stat:
            b.stat_headers_without_keys += 1
        block.version = detect_version(block.stat)

    def _task_header(self, line: _Line) -> None:
        b = self._open.get(line.host)
        if b is not None and b.tasks:
            self._close(line.host)
        b = self._part(line, _TASKS)
        if b is None:
            return
        _, _, cols = line.msg.partition("]")
        columns = cols.split()
        if not columns or columns[-1] != "name":
            return
        b.columns = columns
        b.task_header_seen = True
        b.table_format = "new" if "rss_anon" in columns else "old"

    def _task_row(self, b: _Builder, pid: int, rest: str) -> None:
        columns = b.columns
        if columns is None:
            # No header: guess from the number of numeric columns.
            numeric = 0
            for tok in rest.split():
                if tok.lstrip("-").isdigit():
                    numeric += 1
                else:
                    break
            columns = _NEW_COLUMNS if numeric >= 10 else _OLD_COLUMNS
            b.columns = columns
            b.table_format = "new" if columns is _NEW_COLUMNS else "old"
        parts = rest.split(None, len(columns) - 1)
        if len(parts) < len(columns):
            b.missing.add("truncated-line")
            return
        values: dict[str, Any] = {"pid": pid, "name": parts[-1]}
        try:
            for col, tok in zip(columns, parts, strict=False):
                target = _COLUMN_FIELDS.get(col)
                if target is not None:
                    values[target] = int(tok)
                elif col != "name":
                    int(tok)  # an unknown numeric column must still be a number
        except ValueError:
            b.missing.add("truncated-line")
            return
        # Every value is an int converted above: skip validation on the hottest path.
        b.tasks.append(OomTask.model_construct(**values))

    def _oom_kill_line(self, line: _Line) -> None:
        b = self._open.get(line.host)
        if b is not None and b.oom_kill is not None:
            self._close(line.host)
        b = self._part(line, _DECISION)
        if b is None:
            return
        body = line.msg[len("oom-kill:") :]
        out: dict[str, object] = {}
        m = _OOM_KILL_TAIL.search(body)
        if m is not None:
            out["task"], out["pid"], out["uid"] = m.group(1), int(m.group(2)), int(m.group(3))
            body = body[: m.start()]
        for item in body.split(","):
            k, eq, v = item.partition("=")
            if not eq:
                if k == "global_oom":
                    out["global_oom"] = True
                continue
            if k in ("constraint", "nodemask", "cpuset", "mems_allowed", "oom_memcg", "task_memcg"):
                out[k] = v
            elif k in ("pid", "uid"):
                n = _parse_int(v)
                if n is not None:
                    out[k] = n
            elif k == "task":
                out[k] = v
        if m is None and "pid" not in out:
            b.missing.add("truncated-line")
        b.oom_kill = OomKillLine.model_validate(out)

    def _scope(self, b: _Builder, msg: str) -> None:
        if msg.startswith("Memory cgroup out of memory"):
            b.scope = "memcg"
        elif msg.startswith("Out of memory"):
            b.scope = b.scope or "global"

    def _killed(self, line: _Line) -> None:
        m = _KILLED.search(line.msg)
        if m is None:
            return
        pid = int(m.group(1))
        b = self._open.get(line.host)
        if b is not None and b.killed and pid not in b.killed and b.group is None:
            self._close(line.host)
        b = self._part(line, _KILL)
        if b is None:
            return
        self._scope(b, line.msg)
        if pid in b.killed:
            return  # memory.oom.group repeats the line for the same process
        g = m.groups()
        if line.msg[m.end() :].strip():
            b.missing.add("truncated-line")  # e.g. "total-vm:99236" cut before its unit
        b.killed[pid] = KilledProcess(
            pid=pid,
            comm=g[1],
            total_vm_kb=_opt(g[2]),
            anon_rss_kb=_opt(g[3]),
            file_rss_kb=_opt(g[4]),
            shmem_rss_kb=_opt(g[5]),
            uid=_opt(g[6]),
            pgtables_kb=_opt(g[7]),
            oom_score_adj=_opt(g[8]),
        )

    def _reaped(self, line: _Line) -> None:
        m = _REAPED.match(line.msg)
        if m is None:
            return
        reaped = ReapedProcess(
            pid=int(m.group(1)),
            comm=m.group(2),
            anon_rss_kb=int(m.group(3)),
            file_rss_kb=int(m.group(4)),
            shmem_rss_kb=_opt(m.group(5)),
        )
        b = self._open.get(line.host)
        if b is not None and reaped.pid in b.killed:
            self._touch(b, line)
            b.reaped.append(reaped)
            return
        last = self._last_done.get(line.host)
        if last is not None and any(k.pid == reaped.pid for k in last.killed):
            last.reaped.append(reaped)  # the reaper reported after the record was closed

    # -- output ------------------------------------------------------------------------------------

    def _build(self, b: _Builder) -> OomKillRecord:
        self._end_stat(b)
        missing = set(b.missing)
        if not b.header:
            missing.add("header")
        if not b.killed:
            missing.add("kill")
        if b.stat_headers_without_keys:
            missing.add("cgroup-stats")
        if b.task_header_seen and not b.tasks:
            missing.add("task-rows")
        f = b.fields
        first = b.first
        return OomKillRecord(
            line_format=first.fmt,
            host=first.host,
            monotonic_s=first.mono,
            time_text=first.time_text,
            kmsg_seq=first.seq,
            trigger_comm=_str(f.get("trigger_comm")),
            trigger_pid=_int(f.get("trigger_pid")),
            gfp_mask=_str(f.get("gfp_mask")),
            order=_int(f.get("order")),
            trigger_oom_score_adj=_int(f.get("trigger_oom_score_adj")),
            kernel_version=_str(f.get("kernel_version")),
            cpuset=_str(f.get("cpuset")),
            counters=b.counters,
            cgroup_stats=b.stats,
            task_in_memcg=_str(f.get("task_in")),
            limit_of_memcg=_str(f.get("limit_of")),
            task_table_format="new" if b.table_format == "new" else "old" if b.table_format else None,
            task_columns=list(b.columns or []),
            tasks=b.tasks,
            oom_kill=b.oom_kill,
            chosen=b.chosen,
            scope="memcg" if b.scope == "memcg" else "global" if b.scope == "global" else None,
            killed=list(b.killed.values()),
            oom_group_memcg=b.group,
            reaped=b.reaped,
            missing=sorted(missing),
            lines=b.lines,
        )


def _opt(text: str | None) -> int | None:
    return int(text) if text is not None else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def parse_lines(lines: Iterable[str]) -> list[OomKillRecord]:
    """Every OOM-kill record in these lines, in order. Never raises on odd text."""
    parser = OomParser()
    for line in lines:
        parser.feed(line)
    return parser.finish()


def iter_records(lines: Iterable[str]) -> Iterator[OomKillRecord]:
    """Like `parse_lines`, yielding records as soon as they are complete (for streams)."""
    parser = OomParser()
    for line in lines:
        parser.feed(line)
        yield from parser.take()
    yield from parser.finish()


def parse_text(text: str) -> list[OomKillRecord]:
    """Every OOM-kill record in ``text``. Never raises on odd text."""
    return parse_lines(text.splitlines())
