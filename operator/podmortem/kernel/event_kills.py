"""The kernel's kill lines as node-problem-detector's ``OOMKilling`` Events carry them.

node-problem-detector's kernel monitor (its ``config/kernel-monitor.json``) matches the kernel's
own kill line with a rule of reason ``OOMKilling``: ``Killed process \\d+ (.+) total-vm:\\d+kB,
anon-rss:\\d+kB, file-rss:\\d+kB.*`` today, ``Kill process \\d+ (.+) score \\d+ or sacrifice child``
(with ``\\nKilled process ...`` after it in some releases) before kernel 4.19 reworded it. The
Event it posts on the node has the matched kernel text as its message, with whatever came before
it on the kernel's line (``Memory cgroup out of memory: ``), and the API server may prefix
``(combined from similar events): ``. So ``kubectl get events`` rows, a describe Events row and
an event dump (``Reason:OOMKilling`` ... ``Message:...``) hold the kernel's own kill lines. A row
is read only with the cells kubectl prints between the reason and the message: the object
(``node/NAME``: node-problem-detector posts on the Node) or describe's source (``kernel-monitor``).

Why apart from `podmortem.kernel.log_lines`: such a line is the kernel's record only when the
text holds nothing better. With the node's log given too, the kernel's own lines are the record
and the Events repeat them; `podmortem.kernel.oom_parser.parse_lines` reads these lines only when
the text holds no record of its own. A journal line of node-problem-detector itself (``prog[pid]:``)
is its log, not an Event, and is never read here.
"""

from __future__ import annotations

import re

#: The kill lines node-problem-detector's OOMKilling rules match (mm/oom_kill.c's wordings).
KILL_TEXTS = (
    "Memory cgroup out of memory: Kill process ",
    "Memory cgroup out of memory: Killed process ",
    "Out of memory: Kill process ",
    "Out of memory: Killed process ",
    "Kill process ",
    "Killed process ",
)
_KILL = re.compile("|".join(re.escape(t) for t in KILL_TEXTS))
#: A program's journal line (node-problem-detector's own log, the kubelet's): not an Event.
_PROGRAM_LINE = re.compile(r"[\w.@/-]\[\d{1,10}\]: ")
#: The reason as a cell of ``kubectl get events`` or describe's Events table.
_ROW = re.compile(r"(?:^|[\s|])OOMKilling(?=[\s|])")
#: The reason as a table's cell: two spaces or more (or a bar) either side.
_PADDED_CELL = re.compile(r"(?:  |\|\s?)OOMKilling(?:\s{2,}|\s?\|)")
#: The reason as a field of an event dump: ``Reason:OOMKilling``, ``reason: OOMKilling``, JSON.
_REASON_FIELD = re.compile(r"""(?<![\w])["']?[Rr]eason["']?\s{0,8}[:=]\s{0,8}["']?OOMKilling\b""")
#: The message field of an event dump.
_MESSAGE_FIELD = re.compile(r"""(?<![\w])["']?[Mm]essage["']?\s{0,8}[:=]\s{0,8}["']?""")
#: Fields of one event dump between its reason and its message.
_FIELDS_TO_MESSAGE = 12
#: Lines a quoted message may be wrapped into (a kernel kill line is under 300 characters).
_WRAPPED_PARTS = 8


def kill_text(text: str) -> str | None:
    """The kernel's kill line in ``text`` from where it starts, or None."""
    m = _KILL.search(text)
    return None if m is None else text[m.start():].rstrip().rstrip(",").rstrip("\"'")


class EventKills:
    """Collects the kernel's kill lines from OOMKilling Events, line by line (linear, one look a line
    outside an event dump: ``OOMKilling`` must be in it)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        #: Lines left in which an event dump's message may still come (its reason seen), or 0.
        self._dump = 0
        #: Inside an OOMKilling dump's message: its next lines may be more kernel lines.
        self._in_message = False
        #: A quoted message (JSON, YAML) whose closing quote has not come yet: lines a terminal or a
        #: mail client wrapped it into, joined as they were cut (at most `_WRAPPED_PARTS` of them).
        self._open_quote = ""
        self._parts = 0

    def see(self, raw: str) -> None:
        if self._open_quote:
            self._parts -= 1
            end = raw.find(self._open_quote)
            self.lines[-1] += raw if end < 0 else raw[:end]
            if end >= 0 or not self._parts:
                self._open_quote = ""
            return
        if self._in_message:
            found = kill_text(raw)
            if found is not None and _KILL.match(raw.lstrip()) is not None:
                self.lines.append(found)
                return
            self._in_message = False
        if self._dump:
            self._dump -= 1
            # Whatever prefix each line of the paste carries (a viewer's, a logger's), the field is
            # searched for in the line.
            m = _MESSAGE_FIELD.search(raw)
            if m is not None:
                self._dump = 0
                value = raw[m.end():]
                found = kill_text(value)
                if found is not None:
                    quote = raw[m.end() - 1]
                    if quote in "\"'" and quote not in value:
                        self._open_quote, self._parts = quote, _WRAPPED_PARTS
                        found = value[value.find(found[:20]):]
                    self.lines.append(found)
                    self._in_message = True
                return
        if "OOMKilling" not in raw or _PROGRAM_LINE.search(raw) is not None:
            return
        if _REASON_FIELD.search(raw) is not None:
            self._dump = _FIELDS_TO_MESSAGE
            return
        row = _ROW.search(raw)
        if row is not None:
            rest = raw[row.end():]
            m = _KILL.search(rest)
            # The row's cells between the reason and the message name the Event's object (``get
            # events``: ``node/NAME``) or its source (describe: ``kernel-monitor, NAME``): a line of
            # prose that only names the reason ("Warning OOMKilling <the message>") is a quote.
            # A tool's own table of the node's events (kubeye's ``ke diag``: NAMESPACE SEVERITY NODENAME
            # EVENTTIME REASON MESSAGE) puts the message right after the reason: the reason is a cell,
            # padded on both sides as a table's writer pads it, and the kill line is the next cell.
            cell = m is not None and not rest[:m.start()].strip() \
                and _PADDED_CELL.search(raw[max(0, row.start() - 1):row.end() + 2]) is not None
            between = rest[:m.start()] if m is not None else ""
            if m is not None and (cell or "node/" in between or "kernel-monitor" in between):
                self.lines.append(rest[m.start():].rstrip())
