"""``kubectl describe`` for a custom resource, as plain text: how a user would see the report.

kubectl describes a custom resource by printing its fields with camelCase keys
turned into words ("failureReport" → "Failure Report"), nested maps indented,
then its Events. This does the same for the demo's TrainingJob, so the demo's
output is what ``kubectl describe trainingjob`` shows on a real cluster, with two
additions for a reader comparing figures:

- a byte count (a ``...Bytes``, ``..._bytes`` or ``..._kb`` field) is followed by
  its binary-unit reading, ``268435456 (256Mi)``, in the units of
  ``status.memory.peakOfLimit``, the MemoryPressure message and the demo's summary;
- `Labels` marks fields, condition messages and Event messages with a note, which
  the demo uses to label everything that came from a recorded kernel record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from podmortem.memory_line.status import short_size

_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
#: Metadata kubectl leaves out of a describe.
_SKIP_META = {"managedFields", "name", "namespace", "labels", "annotations", "resourceVersion"}
#: Long strings are cut to this many characters (a describe is for reading, `-o yaml` for all).
MAX_VALUE = 400
#: Maps and lists longer than this show their first entries and a count of the rest...
MAX_ITEMS = 12
#: ...from this depth (indent) on: the object's own sections and the report's parts stay whole.
CUT_FROM_INDENT = 8


#: What the demo's default view leaves out of a describe, each replaced by one line saying so: the
#: pod template and the report's reference parts (its process table, the findings' evidence maps,
#: the working set's points, the kill line and cgroup figures), about 170 of a failed job's 260
#: lines. The verdict, the findings' messages and what to do, the conditions, the memory, the
#: report's evidence with its peaks and the Events stay; ``podmortem demo -v`` shows all.
BRIEF_HIDDEN: frozenset[tuple[str, ...]] = frozenset({
    ("spec", "template"),
    ("status", "failureReport", "tasks"),
    ("status", "failureReport", "pod"),
    ("status", "failureReport", "evidence", "workingSet", "points"),
    ("status", "failureReport", "kill"),
    ("status", "failureReport", "cgroup"),
    ("status", "failureReport", "findings", "evidence"),
})


@dataclass(frozen=True)
class Labels:
    """Notes printed beside what they label (empty: a plain describe)."""

    #: Field path from the object's root (map keys; list items are not in the path) -> a note after
    #: the field's value, or after its name for a map or list.
    fields: Mapping[tuple[str, ...], str] = field(default_factory=dict)
    #: Condition type -> a note before that condition's message.
    conditions: Mapping[str, str] = field(default_factory=dict)
    #: Event reason -> a note before that Event's message.
    events: Mapping[str, str] = field(default_factory=dict)


def words(key: str) -> str:
    """``failureReport`` → ``Failure Report``, ``podUID`` → ``Pod UID``, as kubectl prints keys."""
    parts = _WORD.split(key)
    return " ".join(p[:1].upper() + p[1:] for p in parts if p)


def _scalar(value: Any) -> str:
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = value if isinstance(value, str) else json.dumps(value)
    text = text.replace("\n", " ")
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def _with_unit(key: str, value: Any) -> str:
    """The value as printed, with a byte count's binary-unit reading: ``268435456 (256Mi)``."""
    text = _scalar(value)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        if key.endswith(("Bytes", "_bytes")):
            return f"{text} ({short_size(value)})"
        if key.endswith("_kb"):
            return f"{text} ({short_size(value * 1024)})"
    return text


def _more(pad: str, hidden: int) -> str:
    return f"{pad}… {hidden} more (kubectl get -o yaml shows all)"


def _fields(
    value: Any,
    indent: int,
    out: list[str],
    max_items: int | None = MAX_ITEMS,
    *,
    path: tuple[str, ...] = (),
    labels: Labels | None = None,
    hide: frozenset[tuple[str, ...]] = frozenset(),
) -> None:
    pad = " " * indent
    notes = labels.fields if labels is not None else {}
    if isinstance(value, Mapping):
        entries = list(value.items())
        hidden = 0
        if max_items is not None and indent >= CUT_FROM_INDENT and len(entries) > max_items:
            entries, hidden = entries[: max_items - 1], len(entries) - (max_items - 1)
        note_for_message = _condition_note(value, path, labels)
        for key, item in entries:
            here = (*path, str(key))
            note = f"  {notes[here]}" if here in notes else ""
            nested_list = isinstance(item, list) and any(isinstance(i, Mapping | list) for i in item)
            if here in hide and item:
                said = _hidden_notes(here, notes)
                out.append(f"{pad}{words(str(key))}:  … (podmortem demo -v shows it){said}")
            elif (isinstance(item, Mapping) and item) or nested_list:
                out.append(f"{pad}{words(str(key))}:{note}")
                _fields(item, indent + 2, out, max_items, path=here, labels=labels, hide=hide)
            elif isinstance(item, list):
                out.append(
                    f"{pad}{words(str(key))}:{' ' if item else ''}{', '.join(_scalar(i) for i in item)}{note}"
                )
            elif key == "message" and note_for_message:
                out.append(f"{pad}{words(str(key))}:  {note_for_message} {_scalar(item)}{note}")
            else:
                out.append(f"{pad}{words(str(key))}:  {_with_unit(str(key), item)}{note}")
        if hidden:
            out.append(_more(pad, hidden))
    elif isinstance(value, list):
        items = value
        hidden = 0
        if max_items is not None and indent >= CUT_FROM_INDENT and len(items) > max_items:
            items, hidden = items[: max_items - 1], len(items) - (max_items - 1)
        for item in items:
            if isinstance(item, Mapping):
                inner: list[str] = []
                _fields(item, indent + 2, inner, max_items, path=path, labels=labels, hide=hide)
                if inner:
                    inner[0] = pad + "- " + inner[0][indent + 2 :]
                out.extend(inner)
            else:
                out.append(f"{pad}- {_scalar(item)}")
        if hidden:
            out.append(_more(pad, hidden))
    else:
        out.append(f"{pad}{_scalar(value)}")


def _hidden_notes(path: tuple[str, ...], notes: Mapping[tuple[str, ...], str]) -> str:
    """The labels of the fields under a hidden part, once each: a hidden part stays labelled."""
    under = dict.fromkeys(note for where, note in notes.items() if where[: len(path)] == path)
    return "".join(f"  {note}" for note in under)


def _condition_note(value: Mapping[str, Any], path: tuple[str, ...], labels: Labels | None) -> str:
    """The note before a status condition's message, by the condition's type ("" for none)."""
    if labels is None or path != ("status", "conditions"):
        return ""
    return labels.conditions.get(str(value.get("type")), "")


def _age(timestamp: str | None, now: datetime) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    seconds = max(0, int((now - then).total_seconds()))
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"


def describe(
    obj: Mapping[str, Any],
    *,
    events: Sequence[Mapping[str, Any]] = (),
    now: datetime | None = None,
    max_items: int | None = MAX_ITEMS,
    labels: Labels | None = None,
    hide: frozenset[tuple[str, ...]] = frozenset(),
) -> str:
    """The object as ``kubectl describe`` prints a custom resource, Events included.

    ``max_items``: longer maps and lists are cut to their first entries and a count (None: all).
    ``labels``: notes beside fields, condition messages and Event messages (see `Labels`).
    ``hide``: field paths (as in `Labels.fields`) printed as one line each (`BRIEF_HIDDEN`).
    """
    now = now or datetime.now(UTC)
    meta = obj.get("metadata") or {}
    out = [
        f"Name:         {meta.get('name', '')}",
        f"Namespace:    {meta.get('namespace', '')}",
        "Labels:       "
        + ("\n              ".join(f"{k}={v}" for k, v in (meta.get("labels") or {}).items()) or "<none>"),
        "Annotations:  "
        + (
            "\n              ".join(f"{k}: {_scalar(v)}" for k, v in (meta.get("annotations") or {}).items())
            or "<none>"
        ),
        f"API Version:  {obj.get('apiVersion', '')}",
        f"Kind:         {obj.get('kind', '')}",
        "Metadata:",
    ]
    _fields({k: v for k, v in meta.items() if k not in _SKIP_META}, 2, out, max_items)
    for section in ("spec", "status"):
        if obj.get(section):
            out.append(f"{words(section)}:")
            _fields(obj[section], 2, out, max_items, path=(section,), labels=labels, hide=hide)
    if events:
        out.append("Events:")
        out.append("  Type     Reason           Age   From       Message")
        out.append("  ----     ------           ----  ----       -------")
        for e in events:
            source = (e.get("source") or {}).get("component") or e.get("reportingComponent") or "podmortem"
            stamp = e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")
            note = labels.events.get(str(e.get("reason", ""))) if labels is not None else None
            message = _scalar(e.get("message", ""))
            out.append(
                f"  {e.get('type', 'Normal'):<8} {e.get('reason', ''):<16} {_age(stamp, now):<5} "
                f"{source:<10} {f'{note} ' if note else ''}{message}"
            )
    else:
        out.append("Events:       <none>")
    return "\n".join(out)
