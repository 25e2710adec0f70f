"""Kernel OOM-kill records out of kernel log text, as people have it: one `OomKillRecord` per kill.

Input can be ``dmesg``, ``dmesg -T`` (any locale), raw ``/dev/kmsg`` records, ``journalctl -k``,
syslog files, or any of those quoted in an email (``> ``), wrapped by a terminal or a mail
client, with unrelated lines around and between records, lines from several hosts
interleaved (syslog aggregation), and records cut short (``grep -C`` separators, ``...``).
The parser never raises on input text: what it cannot read it skips, and a record that
lacks parts says so in ``missing``. Only the kernel's own lines count: a line of another
program that quotes the kernel (node-problem-detector, kubelet, systemd-oomd) is not a kill;
node-problem-detector's OOMKilling Events are read (`podmortem.kernel.event_kills`) only where the
text holds no kernel record of its own, as the only copy of the kernel's kill line there is.

It is a single pass over lines, linear in the input: every regex is anchored or bounded.
Each line's prefix is stripped by `podmortem.kernel.log_lines`, and the message is
classified by ``startswith`` tests before any regex runs. A record starts at ``invoked
oom-killer`` or at any later part when none is open, and ends at the next header, when a
part comes out of the kernel's printing order, after ``Out of memory and no killable
processes``, or after a pause of more than ``RECORD_GAP_S`` seconds. Across an elision
(``--``, ``...``) a record continues only when the timestamps on both sides say so.

The spec is the kernel's own format strings (mm/oom_kill.c, mm/memcontrol.c, lib/dump_stack.c,
mm/show_mem.c); each form below names the kernels that print it.

Why one module of this size: the kernel prints one record across many line forms whose
meaning depends on the lines before them; one parser with one state keeps every form's
rule next to the others.
"""

from __future__ import annotations

import gc
import re
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from podmortem.kernel import log_lines
from podmortem.kernel.event_kills import EventKills
from podmortem.kernel.kmsg import KmsgRecord
from podmortem.kernel.log_lines import ELISIONS, Line
from podmortem.reports.memory import CgroupMemoryStat
from podmortem.reports.memory_classes import detect_version
from podmortem.reports.oom_record import (
    ChosenVictim,
    KilledProcess,
    MemoryCounter,
    OomKillLine,
    OomKillRecord,
    OomTask,
    ReapedProcess,
)

#: Lines of one record are printed within milliseconds; a longer pause means a new record.
RECORD_GAP_S = 10.0
#: Across an elision mark, a record goes on only if the lines on both sides are this close in time.
CUT_BRIDGE_S = RECORD_GAP_S
#: Earlier kills of the same key a record is compared with to tell a copy (`merge_repeats`): a block
#: pasted twice repeats within a few records, far fewer than this.
REPEAT_WINDOW = 32

# -- messages, each with the kernels that print it ---------------------------------------------
#: "%s invoked oom-killer: gfp_mask=%#x(%pGg), order=%d, oom_score_adj=%hd" (all; %pGg since 4.5,
#: "nodemask=%*pbl," inside it 4.7-4.18). The comm is at most 15 characters (TASK_COMM_LEN).
_INVOKED = " invoked oom-killer:"
_COMM_MAX = 16
#: lib/dump_stack.c: "CPU: %d PID: %d Comm: %.20s %s %s %.*s" (3.x+); "CPU: %d UID: %u PID: …" (6.12+);
#: RHEL and UEK kernels insert "Kdump: loaded" before the taint.
_CPU = re.compile(
    r"CPU: \d+ (?:UID: \d+ )?PID: (\d+) Comm: (.{1,20}?) (?:Kdump: loaded )?(?:Not tainted|Tainted: )"
)
_KVER = re.compile(r"(?<![\w.])(\d+\.\d+\.\d+[^\s#]{0,64})")
#: mm/memcontrol.c: "%s: usage %llukB, limit %llukB, failcnt %lu" for memory, memory+swap, kmem
#: (v1, 3.x+) and memory, swap (v2, 4.19+). Printed only for memory cgroup OOMs.
_COUNTER = re.compile(r"([\w.+]{1,16}): usage (\d+)kB, limit (\d+)kB, failcnt (\d+)")
_TASK_ROW = re.compile(r"\[\s*(\d+)\]\s+(.*)")
#: "Memory cgroup out of memory: " (memcg), "Out of memory: " (global, cpuset, mempolicy), and
#: "Out of memory (oom_kill_allocating_task): " prefix both the choice (2.6.36-5.0) and, since
#: 5.1, the Killed line. 2.4's oom_kill_task printed "Out of Memory: Killed process %d (%s).".
_KILL_PREFIX = re.compile(
    r"(?:(Memory cgroup out of memory|Out of [Mm]emory(?: \(oom_kill_allocating_task\))?): )?"
    r"([Kk]ill(?:ed)?) process "
)
#: The Killed line: "Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB" (3.x),
#: ", shmem-rss:%lukB" (4.5+), ", UID:%u pgtables:%lukB oom_score_adj:%hd" (5.x+);
#: RHEL 6 "Killed process %d, UID %d, (%s) total-vm:…"; RHEL 7 "Killed process %d (%s), UID %u, total-vm:…".
#: The comm may hold parentheses ("(resolved)"), so it ends where the next field begins.
_KILLED = re.compile(
    r"(\d+)(?:, UID (\d+),)? \((.{0,32}?)\)(?=,? (?:total-vm|UID|vsz)|,|\.?\s*$)(?:, UID (\d+),)?"
    r"(?: (?:total-vm|vsz):(\d+)kB)?(?:, anon-rss:(\d+)kB)?(?:, file-rss:(\d+)kB)?(?:, shmem-rss:(\d+)kB)?"
    r"(?:,? UID:(\d+))?(?: pgtables:(\d+)kB)?(?: oom_score_adj:(-?\d+))?"
)
#: "Kill process %d (%s) score %u or sacrifice child" (2.6.36-5.0); "kill process %d (%s) score %li
#: or a child" (2.6.32-2.6.35, lower case).
_CHOSEN = re.compile(r"(\d+) \((.{0,32}?)\)(?= score| or|\s*$)(?: score (-?\d+))?")
#: "oom_reaper: reaped process %d (%s), now anon-rss:%lukB, file-rss:%lukB, shmem-rss:%lukB" (4.6+).
_REAPED = re.compile(
    r"oom_reaper: reaped process (\d+) \((.{0,32}?)\), now anon-rss:(\d+)kB, file-rss:(\d+)kB"
    r"(?:, shmem-rss:(\d+)kB)?"
)
#: "Task in %s killed as a result of limit of %s" (mem_cgroup_print_oom_info, 3.x-4.18).
_TASK_IN = re.compile(r"Task in (.*) killed as a result of limit of (\S+)")
#: "Tasks in %s are going to be killed due to memory.oom.group set" (4.19+, cgroup v2).
_TASKS_IN = re.compile(r"Tasks in (.*) are going to be killed due to memory\.oom\.group set")
#: Call-trace frames of the memory cgroup OOM path (3.x-6.x): a memcg OOM whatever else is cut.
_MEMCG_FRAMES = ("mem_cgroup_out_of_memory", "mem_cgroup_oom_synchronize")
#: Call-trace frames of the page allocator's way to the OOM killer (mm/page_alloc.c, 3.x-6.x):
#: ``__alloc_pages_slowpath`` calls ``__alloc_pages_may_oom``, which calls ``out_of_memory`` for the
#: whole node (a memory cgroup's charge never goes through them).
_PAGE_ALLOC_FRAMES = ("__alloc_pages_may_oom", "__alloc_pages_slowpath")
#: The first key of each line of show_mem's summary after ``Mem-Info:`` (mm/show_mem.c, and
#: show_free_areas in mm/page_alloc.c before 6.2; 2.6.32 on): ``active_anon:%lu inactive_anon:%lu
#: isolated_anon:%lu`` / `` active_file:…`` / `` unevictable:… dirty:… writeback:…`` / ``
#: slab_reclaimable:…`` / `` mapped:… shmem:… pagetables:…`` / `` sec_pagetables:…`` / ``
#: kernel_misc_reclaimable:…`` / `` free:… free_pcp:… free_cma:…``. Values are pages.
_MEM_INFO_FIRST = ("active_anon:", "active_file:", "unevictable:", "slab_reclaimable:", "mapped:",
                   "sec_pagetables:", "kernel_misc_reclaimable:", "free:")
_MEM_INFO_PAIR = re.compile(r"([a-z_]{2,32}):(\d{1,20})(?=\s|$)")

# Printing order of a record's parts: a part earlier than the last one seen starts a new record.
_HEADER, _CPU_LINE, _TASK_IN_LINE, _COUNTERS, _STATS, _TASKS, _DECISION, _KILL, _REAP = range(9)

#: Task-table column → OomTask field. Tables: "[ pid ] uid tgid total_vm rss nr_ptes swapents
#: oom_score_adj name" (3.x-4.0; nr_pmds added 4.1-4.14), pgtables_bytes for nr_ptes (4.15+),
#: "Tasks state (memory values in pages):" above it (4.19+), rss_anon rss_file rss_shmem (6.8+).
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
class _Builder:
    """One record being assembled, with the parser's position inside it."""

    first: Line
    stage: int = -1
    header: bool = False
    fields: dict[str, object] = field(default_factory=dict)
    counters: dict[str, MemoryCounter] = field(default_factory=dict)
    stats: list[CgroupMemoryStat] = field(default_factory=list)
    stat_open: CgroupMemoryStat | None = None
    stat_headers_without_keys: int = 0
    columns: list[str] | None = None
    #: OomTask field per numeric column of ``columns``, worked out at the table's first row.
    targets: tuple[str, ...] | None = None
    table_format: str | None = None
    task_header_seen: bool = False
    tasks: list[OomTask] = field(default_factory=list)
    oom_kill: OomKillLine | None = None
    chosen: ChosenVictim | None = None
    scope: str | None = None
    killed: dict[int, KilledProcess] = field(default_factory=dict)
    group: str | None = None
    reaped: list[ReapedProcess] = field(default_factory=list)
    no_killable: bool = False
    trace_memcg: bool = False
    trace_page_alloc: bool = False
    show_mem: bool = False
    mem_info: dict[str, int] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)
    lines: int = 0
    last_clock: float | None = None
    #: An elision mark was seen since the last line of this record.
    cut: bool = False

    def substantive(self) -> bool:
        """Enough to call it an OOM record (not just a stray table or reaper line)."""
        return (
            self.header
            or self.oom_kill is not None
            or bool(self.killed)
            or self.chosen is not None
            or "task_in" in self.fields
            or self.no_killable
            or bool(self.counters)
            or any(b.stat for b in self.stats)
        )


def _quoted_comm(comm: str) -> bool:
    """A "comm" that is really another program's quoting ('"message": "cp', '`cp', '- cp')."""
    return '"' in comm or "`" in comm or "=" in comm or comm.startswith("- ")


def _parse_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


#: A viewer's right-aligned line number and its one space, before a wrapped part.
_NUMBERED = re.compile(r"[ \t]{0,8}\d{1,7} ")


class OomParser:
    """Incremental parser: ``feed`` lines (any size of input, streamed), then ``finish``.

    ``join_wraps``: hold each line back until the next one shows whether a terminal or mail
    client wrapped it (pasted text); the node agent reads the kernel's own buffer, where lines
    never wrap, and keeps it off so a record completes without waiting for another line.
    ``parse_text``/``parse_lines`` wrap it for whole inputs, with wraps joined.
    """

    def __init__(self, *, join_wraps: bool = False) -> None:
        self._open: dict[str | None, _Builder] = {}
        self._last_done: dict[str | None, OomKillRecord] = {}
        self._prev: Line | None = None
        self._last_seq: int | None = None
        self._done: list[OomKillRecord] = []
        self._join_wraps = join_wraps
        #: A line that a wrapped part may still follow: (its last part, the line so far, its first part).
        self._held: tuple[str, Line, str] | None = None

    # -- public ------------------------------------------------------------------------------------

    def feed(self, raw: str) -> None:
        """One line of text, with or without its newline. Never raises on odd text."""
        raw = raw.rstrip("\r\n")
        if "\\x0a" in raw:
            # /dev/kmsg escapes newlines inside one record (multi-line memory.stat on some kernels).
            head, *more = raw.split("\\x0a")
            self.feed(head)
            for extra in more:
                self.feed(" " + extra)
            return
        if log_lines.may_be_joined(raw):
            parts = log_lines.unjoin(raw)
            if len(parts) > 1:
                for part in parts:
                    self.feed(part)
                return
        held = self._held
        if held is not None:
            held_raw, held_line, first_raw = held
            # A prefix no log's own (a tool's, a viewer's) may be on every line, its wrapped parts' too.
            foreign = held_line.foreign
            part = raw
            if foreign and raw.startswith(foreign) and len(raw) > len(foreign):
                part = raw[len(foreign):]
            if foreign and foreign[-1:] == " " and foreign[:-1].isdigit():
                # A viewer's right-aligned line number ("  12 "): each part has its own, and the line's
                # other marks (numbers, quotes) are compared without it.
                numbered = _NUMBERED.match(raw)
                part = raw[numbered.end():] if numbered is not None and numbered.end() < len(raw) else raw
                held_raw = _NUMBERED.sub("", held_raw, 1)
                first_raw = _NUMBERED.sub("", first_raw, 1)
            # Fast path: a line opening like the held line's first part (same stamp shape) is never its
            # wrapped part; its later parts may open alike by chance ("e.scope" / "e.slice").
            # (Indented, quoted, numbered or coloured pastes differ only after their marks: those
            # always ask; every line of a coloured paste opens with the same escape.)
            wrapped = bool(part) and (
                part[0] in " \t>\x1b" or part[:2] == "[<" or (part[0] != "[" and part[:3] != first_raw[:3]))
            if wrapped and log_lines.continues(held_raw, held_line, part, first_raw=first_raw):
                joined = log_lines.join(held_line, part, first_raw=first_raw)
                joined.foreign = foreign
                self._held = (part, joined, first_raw)
                return
            self._held = None
            self._dispatch(held_line)
        line = log_lines.split(raw, self._prev)
        if line is None:
            if not raw.strip():
                self._prev = None if self._prev is None or self._prev.fmt == "plain" else self._prev
            return
        if self._join_wraps and (line.fmt != "plain" or log_lines.incomplete(line.msg)):
            self._held = (raw, line, raw)
            return
        self._dispatch(line)

    def feed_record(self, record: KmsgRecord) -> None:
        """One ``/dev/kmsg`` record as its reader parsed it (`podmortem.kernel.kmsg`): its sequence number
        and time are the record's own, not printed into text for `feed` to read back.

        A record is whole, as the kernel wrote it: no pager cut it, no terminal wrapped it, no paste
        marked it, so its message is taken as it stands (the kernel escapes what it cannot print).
        """
        held, self._held = self._held, None
        if held is not None:
            self._dispatch(held[1])
        # /dev/kmsg escapes newlines inside one record (multi-line memory.stat on some kernels): the
        # lines after the first are that record's continuations.
        head, *more = record.message.split("\\x0a")
        text = head[: log_lines.MAX_LINE]
        mono = record.usec / 1e6
        soft_end = text[-1:] in (" ", "\t")
        self._dispatch(Line(text.strip(), "kmsg", None, mono, None, record.seq, mono, soft_end=soft_end))
        for extra in more:
            self.feed(" " + extra)

    def take(self) -> list[OomKillRecord]:
        """Records completed so far (a later header, out-of-order part or pause closed them)."""
        done, self._done = self._done, []
        return done

    def finish(self) -> list[OomKillRecord]:
        """Close every open record and return all not yet taken, in order of their first line."""
        held, self._held = self._held, None
        if held is not None:
            self._dispatch(held[1])
        for key in list(self._open):
            self._close(key)
        return self.take()

    # -- dispatch ----------------------------------------------------------------------------------

    def _dispatch(self, line: Line) -> None:
        self._prev = line
        if line.seq is not None:
            last = self._last_seq
            if last is not None and line.seq > last + 1:
                # /dev/kmsg records were lost (overwritten, or filtered out) inside open records.
                for gapped in self._open.values():
                    if gapped.first.fmt == "kmsg" and gapped.stage < _KILL:
                        gapped.missing.add("kmsg-gap")
            self._last_seq = line.seq
        msg = line.msg
        if not msg:
            return
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
                    if line.cut:
                        b.missing.add("truncated-line")
                        return
                    b.lines += 1
                    block.stat[key] = int(value)
                    return
                self._end_stat(b)
            if (b.columns is not None or b.task_header_seen) and msg[:1] == "[" and msg[1:2] != "<":
                m = _TASK_ROW.match(msg)
                if m is not None and b.stage > _TASKS:
                    # A task row after this record's kill is the next record's (a re-pasted block).
                    self._close(line.host)
                    b = None
                if m is not None and b is not None:
                    if b.cut:
                        b = self._bridge(b, line)
                    if b is not None:
                        b.lines += 1
                        if line.clock is not None:
                            b.last_clock = line.clock
                        self._task_row(b, int(m.group(1)), m.group(2), line.cut)
                        return
        self._classify(line)

    def _classify(self, line: Line) -> None:
        msg = line.msg
        first = msg[:1]
        if len(msg) <= 6 and (msg in ELISIONS or msg.strip(".") == ""):
            # An elision mark (grep's "--", a poster's "...") carries no host: it cuts every open record.
            for cut in self._open.values():
                cut.missing.add("elided")
                cut.cut = True
            return
        invoked = msg.find(_INVOKED, 0, _COMM_MAX + len(_INVOKED))
        if invoked > 0 and not _quoted_comm(msg[:invoked]):
            self._header(line, invoked)
        elif first == "C" and msg.startswith("CPU: ") and " PID: " in msg[:40]:
            self._cpu(line)
        elif msg.find(": usage ", 0, 24) >= 0 and "failcnt" in msg:
            m = _COUNTER.match(msg)
            if m is not None:
                name = m.group(1)
                b = self._open.get(line.host)
                if b is not None and (name in b.counters or b.stage > _COUNTERS):
                    self._close(line.host)
                b = self._part(line, _COUNTERS)
                if b is not None:
                    b.counters[name] = MemoryCounter(
                        usage_kb=int(m.group(2)), limit_kb=int(m.group(3)), failcnt=int(m.group(4))
                    )
        elif first == "M" and msg.startswith("Memory cgroup stats for "):
            self._stats_header(line)
        elif first == "T" and msg.startswith("Tasks state"):
            b = self._open.get(line.host)
            if b is not None and (b.tasks or b.task_header_seen):
                self._close(line.host)
            b = self._part(line, _TASKS)
            if b is not None:
                b.task_header_seen = True
        elif first == "[" and "pid" in msg[:14] and msg.endswith("name"):
            self._task_header(line)
        elif first == "[" and msg[1:2] != "<" and self._open.get(line.host) is None:
            m = _TASK_ROW.match(msg)
            if m is not None and len(m.group(2).split(None, 8)) >= 7:
                # A task row with no table open: the record's head was cut (grep -A, truncation).
                b = self._part(line, _TASKS)
                if b is not None:
                    b.missing.add("header")
                    self._task_row(b, int(m.group(1)), m.group(2), line.cut)
        elif first == "o" and msg.startswith("oom-kill:"):
            self._oom_kill_line(line)
        elif first == "o" and msg.startswith("oom_reaper: reaped process "):
            self._reaped(line)
        elif first in "KkMO" and (m := _KILL_PREFIX.match(msg)) is not None:
            if m.group(2) == "Killed":
                self._killed(line, m)
            else:
                self._chosen(line, m)
        elif first == "O" and msg.startswith("Out of memory and no killable processes"):
            b = self._part(line, _KILL)
            if b is not None:
                b.no_killable = True
                self._close(line.host)
        elif first == "T" and msg.startswith("Task in ") and " killed as a result of limit of " in msg:
            m = _TASK_IN.match(msg)
            if m is not None:
                b = self._open.get(line.host)
                if b is not None and "task_in" in b.fields:
                    self._close(line.host)  # each OOM prints this line once (grep may keep only these)
                b = self._part(line, _TASK_IN_LINE)
                if b is not None:
                    b.fields["task_in"] = m.group(1)
                    b.fields["limit_of"] = m.group(2)
        elif first == "T" and msg.startswith("Tasks in ") and "memory.oom.group" in msg:
            m = _TASKS_IN.match(msg)
            if m is not None:
                b = self._part(line, _KILL)
                if b is not None:
                    b.group = m.group(1)
        elif " cpuset=" in msg and " mems_allowed=" in msg:
            # "%s cpuset=%s mems_allowed=%*pbl" (cpuset_print_current_mems_allowed, up to 4.18).
            b = self._open.get(line.host)
            if b is not None and b.stage <= _CPU_LINE:
                start = msg.rfind(" cpuset=")
                value, _, _ = msg[start + 8 :].partition(" ")
                b.fields["cpuset"] = value
        elif msg == "Mem-Info:":
            # show_mem(): printed for OOMs outside a memory cgroup only. A paste may start here.
            b = self._part(line, _CPU_LINE)
            if b is not None:
                b.show_mem = True
        elif msg.endswith((" pages RAM", " pages reserved")) and msg[:1].isdigit():
            # show_mem's "%lu pages RAM" / "%lu pages reserved", after the zones
            b = self._open.get(line.host)
            count, _, what = msg.partition(" pages ")
            if b is not None and b.show_mem and b.stage <= _CPU_LINE and count.isdigit():
                b.mem_info.setdefault("pages_ram" if what == "RAM" else "pages_reserved", int(count))
        elif msg.startswith(_MEM_INFO_FIRST):
            b = self._open.get(line.host)
            if b is not None and b.show_mem and b.stage <= _CPU_LINE:
                for key, value in _MEM_INFO_PAIR.findall(msg):
                    b.mem_info.setdefault(key, int(value))
        else:
            b = self._open.get(line.host)
            if b is not None and b.header and b.stage <= _CPU_LINE:
                if b.cut:
                    b = self._bridge(b, line)
                if b is None:
                    return
                if "mem_cgroup_o" in msg and any(f in msg for f in _MEMCG_FRAMES):
                    b.trace_memcg = True
                elif "__alloc_pages_" in msg and any(f in msg for f in _PAGE_ALLOC_FRAMES):
                    b.trace_page_alloc = True

    # -- record boundaries -------------------------------------------------------------------------

    def _touch(self, b: _Builder, line: Line) -> None:
        b.lines += 1
        if line.clock is not None:
            b.last_clock = line.clock

    def _delta(self, b: _Builder, line: Line) -> float | None:
        if line.clock is None or b.last_clock is None:
            return None
        delta = abs(line.clock - b.last_clock)
        if line.mono is None:
            delta = min(delta, 86400 - delta)  # a time of day wraps at midnight
        return delta

    @staticmethod
    def _went_back(b: _Builder, line: Line) -> bool:
        """Time ran backwards: a record's lines never do, so this is another block (a re-paste).

        A time of day that runs back by half a day or more has passed midnight instead.
        """
        if line.clock is None or b.last_clock is None:
            return False
        back = b.last_clock - line.clock
        if line.mono is not None:
            return back > 0.5
        return 0.5 < back < 43200

    def _bridge(self, b: _Builder, line: Line) -> _Builder | None:
        """``b`` if this line may continue it; after an elision only when the timestamps say so."""
        if not b.cut:
            return b
        delta = self._delta(b, line)
        if delta is None and (line.clock is None or b.last_clock is None):
            # No times to tell: "..." inside a record leaves it whole. A part out of printing
            # order or a new header still starts the next record.
            b.cut = False
            return b
        if delta is not None and delta <= CUT_BRIDGE_S:
            b.cut = False
            return b
        self._close(line.host)
        return None

    def _part(self, line: Line, stage: int, *, new_only_if_open: bool = False) -> _Builder | None:
        """The open record this part belongs to, opening a new (partial) one where needed."""
        key = line.host
        b = self._open.get(key)
        if b is not None:
            if stage < b.stage:
                self._close(key)
                b = None
            elif line.clock is not None and b.last_clock is not None:
                delta = self._delta(b, line)
                if (delta is not None and delta > RECORD_GAP_S) or self._went_back(b, line):
                    self._close(key)
                    b = None
            if b is not None and b.cut:
                b = self._bridge(b, line)
        if b is None:
            if new_only_if_open:
                return None
            b = _Builder(first=line)
            self._open[key] = b
        if stage > b.stage:
            b.stage = stage
        b.lines += 1
        if line.clock is not None:
            b.last_clock = line.clock
        if line.cut:
            b.missing.add("truncated-line")
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

    def _header(self, line: Line, invoked: int) -> None:
        msg = line.msg
        self._close(line.host)
        b = self._part(line, _HEADER)
        assert b is not None
        b.header = True
        b.fields["trigger_comm"] = msg[:invoked]
        for item in msg[invoked + len(_INVOKED) :].split(","):
            k, eq, v = item.strip().partition("=")
            if not eq:
                continue
            if k == "gfp_mask":
                b.fields["gfp_mask"] = v
            elif k == "order":
                b.fields["order"] = _parse_int(v)
            elif k == "oom_score_adj":
                b.fields["trigger_oom_score_adj"] = _parse_int(v)
            elif k == "oom_adj":
                b.fields["trigger_oom_adj"] = _parse_int(v)

    def _cpu(self, line: Line) -> None:
        b = self._part(line, _CPU_LINE, new_only_if_open=True)
        if b is None:
            return
        m = _CPU.match(line.msg)
        if m is None:
            return
        b.fields.setdefault("trigger_pid", int(m.group(1)))
        b.fields.setdefault("trigger_comm", m.group(2))
        v = _KVER.search(line.msg, m.end(), m.end() + 160)
        if v is not None:
            b.fields["kernel_version"] = v.group(1)

    def _stats_header(self, line: Line) -> None:
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
            # Old kernels (3.x-5.x, v1): the whole block on one line, "cache:0KB rss:123552KB …".
            parts = tokens.split()
            if line.cut and parts:
                parts.pop()  # the last token is not whole
            stat = block.stat
            in_kb = False
            for tok in parts:
                k, _, v = tok.partition(":")
                if v.endswith("KB"):
                    n = _parse_int(v[:-2])
                    if n is not None:
                        stat[k] = n * 1024
                        in_kb = True
                else:
                    n = _parse_int(v)
                    if n is not None:
                        stat[k] = n
            if in_kb:
                block.printed_unit = "KB"
            self._end_stat(b)

    def _end_stat(self, b: _Builder) -> None:
        block = b.stat_open
        if block is None:
            return
        b.stat_open = None
        if not block.stat:
            b.stat_headers_without_keys += 1
        block.version = detect_version(block.stat)

    def _task_header(self, line: Line) -> None:
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
        b.targets = None
        b.task_header_seen = True
        b.table_format = "new" if "rss_anon" in columns else "old"

    def _task_row(self, b: _Builder, pid: int, rest: str, cut: bool) -> None:
        columns = b.columns
        if columns is None:
            # No header: guess from the number of numeric columns.
            numeric = 0
            for tok in rest.split(None, 12):
                if tok.lstrip("-").isdigit():
                    numeric += 1
                else:
                    break
            columns = _NEW_COLUMNS if numeric >= 10 else _OLD_COLUMNS
            b.columns = columns
            b.table_format = "new" if columns is _NEW_COLUMNS else "old"
        targets = b.targets
        if targets is None:
            # Field per numeric column ("" for a column no field keeps, which must still be a number).
            targets = b.targets = tuple(_COLUMN_FIELDS.get(col, "") for col in columns[:-1])
        parts = rest.split(None, len(targets))
        if len(parts) <= len(targets) or (cut and len(parts) == len(columns) and parts[-1].isdigit()):
            b.missing.add("truncated-line")
            return
        name = parts.pop()
        try:
            values: dict[str, Any] = dict(zip(targets, map(int, parts), strict=True))
        except ValueError:
            b.missing.add("truncated-line")
            return
        values.pop("", None)
        values["pid"] = pid
        values["name"] = name
        # Validation in pydantic-core is cheaper than model_construct's Python loop over defaults.
        b.tasks.append(OomTask(**values))

    def _oom_kill_line(self, line: Line) -> None:
        """"oom-kill:constraint=%s,nodemask=%*pbl,cpuset=…,mems_allowed=…,oom_memcg=…,task_memcg=…,
        task=%s,pid=%d,uid=%d" (4.19+; global_oom instead of oom_memcg for node-wide OOMs)."""
        b = self._open.get(line.host)
        if b is not None and b.oom_kill is not None:
            self._close(line.host)
        b = self._part(line, _DECISION)
        if b is None:
            return
        body = line.msg[len("oom-kill:") :]
        out: dict[str, object] = {}
        # The tail "task=%s,pid=%d,uid=%d" is read from the right: a comm may hold commas.
        uid_at = body.rfind(",uid=")
        pid_at = body.rfind(",pid=", 0, uid_at) if uid_at >= 0 else -1
        task_at = body.rfind(",task=", 0, pid_at) if pid_at >= 0 else -1
        tail_ok = False
        if task_at >= 0:
            pid = _parse_int(body[pid_at + 5 : uid_at])
            uid = _parse_int(body[uid_at + 5 :].strip())
            if pid is not None and uid is not None:
                out["task"], out["pid"], out["uid"] = body[task_at + 6 : pid_at], pid, uid
                body = body[:task_at]
                tail_ok = True
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
        if not tail_ok and "pid" not in out:
            b.missing.add("truncated-line")
        b.oom_kill = OomKillLine.model_validate(out)

    def _scope(self, b: _Builder, prefix: str | None) -> None:
        if prefix == "Memory cgroup out of memory":
            b.scope = "memcg"
        elif prefix is not None:
            b.scope = b.scope or "global"

    def _chosen(self, line: Line, prefix: re.Match[str]) -> None:
        m = _CHOSEN.match(line.msg, prefix.end())
        if m is None:
            return
        b = self._open.get(line.host)
        if b is not None and (b.chosen is not None or b.killed):
            self._close(line.host)
        b = self._part(line, _DECISION)
        if b is not None:
            self._scope(b, prefix.group(1))
            b.chosen = ChosenVictim(
                pid=int(m.group(1)), comm=m.group(2), score=_parse_int(m.group(3)) if m.group(3) else None
            )

    def _killed(self, line: Line, prefix: re.Match[str]) -> None:
        m = _KILLED.match(line.msg, prefix.end())
        if m is None:
            return
        pid = int(m.group(1))
        b = self._open.get(line.host)
        if b is not None and b.killed and b.group is None:
            # Another victim is another kill; the same one again without memory.oom.group is a
            # second copy of the line (a re-paste), which must not lengthen this record.
            self._close(line.host)
        b = self._part(line, _KILL)
        if b is None:
            return
        self._scope(b, prefix.group(1))
        if pid in b.killed:
            return  # memory.oom.group repeats the line for the same process
        g = m.groups()
        if line.msg[m.end() :].strip() not in ("", "."):  # 2.4 ended its line with a period
            b.missing.add("truncated-line")  # e.g. "total-vm:99236" cut before its unit
        values = [None if x is None else int(x) for x in g[4:11]]
        if line.cut:
            # The last number printed may be cut ("anon-rss:12>"): drop it rather than trust it.
            last = max((i for i, v in enumerate(values) if v is not None), default=None)
            if last is not None:
                values[last] = None
        b.killed[pid] = KilledProcess(
            pid=pid,
            comm=g[2],
            total_vm_kb=values[0],
            anon_rss_kb=values[1],
            file_rss_kb=values[2],
            shmem_rss_kb=values[3],
            uid=_opt(g[1] or g[3]) if (g[1] or g[3]) else values[4],
            pgtables_kb=values[5],
            oom_score_adj=values[6],
        )

    def _reaped(self, line: Line) -> None:
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
        if b is not None and (reaped.pid in b.killed or (not b.killed and b.oom_kill is None)):
            # Raw /dev/kmsg readers may keep only the reaper's line: then it names the victim.
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
        if not b.killed and not b.no_killable:
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
            trigger_oom_adj=_int(f.get("trigger_oom_adj")),
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
            no_killable=b.no_killable,
            trace_memcg=b.trace_memcg,
            trace_page_alloc=b.trace_page_alloc,
            show_mem=b.show_mem,
            mem_info=b.mem_info,
            missing=sorted(missing),
            lines=b.lines,
        )


def _opt(text: str | None) -> int | None:
    return int(text) if text is not None else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def parse_records(records: Iterable[KmsgRecord]) -> list[OomKillRecord]:
    """Every OOM-kill record in these ``/dev/kmsg`` records, in order (`OomParser.feed_record`)."""
    parser = OomParser()
    with _collector_paused():
        for record in records:
            parser.feed_record(record)
        return parser.finish()


def parse_lines(lines: Iterable[str]) -> list[OomKillRecord]:
    """Every OOM-kill record in these lines, in order, wrapped lines joined. Never raises on odd text."""
    parser = OomParser(join_wraps=True)
    events = EventKills()
    with _collector_paused():
        for line in log_lines.join_continued(log_lines.unescape_markdown(log_lines.unquote_printable(lines))):
            events.see(line)
            parser.feed(line)
        records = parser.finish()
        if not records and events.lines:
            # No kernel line of its own: node-problem-detector's OOMKilling Events are the kernel's
            # kill lines as its kernel monitor copied them (`podmortem.kernel.event_kills`).
            quoted = OomParser()
            for text in events.lines:
                quoted.feed(text)
            records = quoted.finish()
    return merge_repeats(drop_bare_quotes(records))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a whole input is parsed.

    Why: every record holds a dozen small models, each tracked by the collector, and its full
    passes walk all records kept so far; on a log of 10,000 records that was a quarter of the
    parse time (measured with bench/diagnose.py). The parser makes no reference cycles, so
    nothing is left for the collector to free meanwhile; reference counting frees the rest.
    The previous state is restored, and a collector paused by someone else stays paused.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def drop_bare_quotes(records: list[OomKillRecord]) -> list[OomKillRecord]:
    """A lone bare kernel line among kernel-stamped records is a quote (``kubectl describe``, an Event).

    A record of several bare lines, or an input of bare lines only, was pasted without its stamps
    and stays.
    """
    if all(r.line_format == "plain" for r in records):
        return records
    return [r for r in records if r.line_format != "plain" or r.lines > 1]


def _kill_key(record: OomKillRecord) -> tuple[object, ...] | None:
    """What makes two records one kill, the time aside: the victim (a pid dies once) and its cgroup."""
    if record.victim_pid is not None:
        return ("kill", record.victim_pid, record.victim_comm, record.oom_memcg or record.task_memcg)
    if record.trigger_comm is not None and record.trigger_pid is not None:
        return ("header", record.trigger_comm, record.trigger_pid, record.gfp_mask, record.order)
    if record.lines > 1 and (record.counters or record.cgroup_stats or record.task_in_memcg):
        # No victim, no trigger: only a copy prints the same counters, failcnt and paths again. A
        # single line (grep's "Task in ..." of several kills in one second) could be either: kept.
        return ("copy", record.model_dump_json(exclude={"lines", "missing", "monotonic_s", "time_text"}))
    return None


_HMS = re.compile(r"(\d\d):(\d\d):(\d\d)")


def _same_time(a: OomKillRecord, b: OomKillRecord) -> bool:
    """Printed within one record's span (its first lines may be cut from one copy), or no times to tell."""
    if a.monotonic_s is not None and b.monotonic_s is not None:
        return abs(a.monotonic_s - b.monotonic_s) <= RECORD_GAP_S
    if a.time_text and b.time_text:
        x, y = _HMS.search(a.time_text), _HMS.search(b.time_text)
        if x is None or y is None:
            return a.time_text == b.time_text
        seconds = [int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3)) for m in (x, y)]
        return abs(seconds[0] - seconds[1]) <= RECORD_GAP_S
    return True


def merge_repeats(records: list[OomKillRecord]) -> list[OomKillRecord]:
    """One record per kill when a paste holds the same block twice (a reply quoting it, a re-paste).

    The copy that lacks fewer parts stays, at the place of the first; without a victim, a
    trigger or whole copied lines there is nothing to tell two kills from one, and both stay.
    A record is compared with the last `REPEAT_WINDOW` kills of its key only, so that many kills
    of one key (a pid reused, one process invoking the killer again and again) cost each record
    the same work, not work that grows with the kills before it.
    """
    out: list[OomKillRecord] = []
    seen: dict[tuple[object, ...], deque[int]] = {}
    for record in _drop_repeated_runs(records):
        key = _kill_key(record)
        if key is None:
            out.append(record)
            continue
        at = next((i for i in seen.get(key, ()) if _same_time(out[i], record)), None)
        if at is None:
            seen.setdefault(key, deque(maxlen=REPEAT_WINDOW)).append(len(out))
            out.append(record)
        elif len(record.missing) < len(out[at].missing):
            out[at] = record
    return out


def _repeat_key(r: OomKillRecord) -> tuple[object, ...]:
    return (r.monotonic_s, r.time_text, r.trigger_pid, r.trigger_comm, r.oom_memcg, r.task_memcg,
            r.victim_pid, r.no_killable, len(r.tasks), len(r.cgroup_stats), tuple(r.counters))


def _drop_repeated_runs(records: list[OomKillRecord]) -> list[OomKillRecord]:
    """A run of records followed at once by the same run again: a block pasted twice, kept once.

    Records the same in every printed field, time included, that make a whole run twice over
    are one block pasted twice, whatever they lack (no victim, no trigger, no timestamps). A run
    of one-line records only (grep's ``Task in`` lines of kills in one second) is left: several
    kills print them alike.
    """
    if len(records) < 2:
        return records
    # A cheap key finds candidates; whole dumps (made only for those) decide.
    keys = [_repeat_key(r) for r in records]
    dumps: dict[int, str] = {}

    def same(a: int, b: int) -> bool:
        if keys[a] != keys[b]:
            return False
        for at in (a, b):
            if at not in dumps:
                dumps[at] = records[at].model_dump_json(exclude={"lines", "missing"})
        return dumps[a] == dumps[b]

    # next_same[i]: the next index with the same cheap key, or -1 (one pass from the end).
    next_same = [-1] * len(keys)
    last: dict[tuple[object, ...], int] = {}
    for at in range(len(keys) - 1, -1, -1):
        next_same[at] = last.get(keys[at], -1)
        last[keys[at]] = at
    out: list[OomKillRecord] = []
    i = 0
    while i < len(records):
        j = next_same[i]
        k = j - i
        if j > 0 and j + k <= len(records) and any(r.lines > 1 for r in records[i:j]) \
                and all(same(i + n, j + n) for n in range(k)):
            for a, b in zip(records[i:j], records[j:j + k], strict=True):
                out.append(b if len(b.missing) < len(a.missing) else a)
            i = j + k
            continue
        out.append(records[i])
        i += 1
    return out


def iter_records(lines: Iterable[str]) -> Iterator[OomKillRecord]:
    """Like `parse_lines`, yielding records as soon as they are complete (for streams)."""
    parser = OomParser(join_wraps=True)
    for line in lines:
        parser.feed(line)
        yield from parser.take()
    yield from parser.finish()


def parse_text(text: str) -> list[OomKillRecord]:
    """Every OOM-kill record in ``text``. Never raises on odd text."""
    return parse_lines(text.splitlines())
