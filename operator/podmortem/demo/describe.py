"""``kubectl describe`` for a custom resource, as plain text: how a user would see the report.

kubectl describes a custom resource by printing its fields with camelCase keys
turned into words ("failureReport" → "Failure Report"), nested maps indented,
then its Events. This does the same for the demo's TrainingJob, so the demo's
output is what ``kubectl describe trainingjob`` shows on a real cluster.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
#: Metadata kubectl leaves out of a describe.
_SKIP_META = {"managedFields", "name", "namespace", "labels", "annotations", "resourceVersion"}
#: Long strings are cut to this many characters (a describe is for reading, `-o yaml` for all).
MAX_VALUE = 400
#: Maps and lists longer than this show their first entries and a count of the rest...
MAX_ITEMS = 12
#: ...from this depth (indent) on: the object's own sections and the report's parts stay whole.
CUT_FROM_INDENT = 8


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


def _more(pad: str, hidden: int) -> str:
    return f"{pad}… {hidden} more (kubectl get -o yaml shows all)"


def _fields(value: Any, indent: int, out: list[str], max_items: int | None = MAX_ITEMS) -> None:
    pad = " " * indent
    if isinstance(value, Mapping):
        entries = list(value.items())
        hidden = 0
        if max_items is not None and indent >= CUT_FROM_INDENT and len(entries) > max_items:
            entries, hidden = entries[: max_items - 1], len(entries) - (max_items - 1)
        for key, item in entries:
            nested_list = isinstance(item, list) and any(isinstance(i, Mapping | list) for i in item)
            if (isinstance(item, Mapping) and item) or nested_list:
                out.append(f"{pad}{words(str(key))}:")
                _fields(item, indent + 2, out, max_items)
            elif isinstance(item, list):
                out.append(
                    f"{pad}{words(str(key))}:{' ' if item else ''}{', '.join(_scalar(i) for i in item)}"
                )
            else:
                out.append(f"{pad}{words(str(key))}:  {_scalar(item)}")
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
                _fields(item, indent + 2, inner, max_items)
                if inner:
                    inner[0] = pad + "- " + inner[0][indent + 2 :]
                out.extend(inner)
            else:
                out.append(f"{pad}- {_scalar(item)}")
        if hidden:
            out.append(_more(pad, hidden))
    else:
        out.append(f"{pad}{_scalar(value)}")


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
) -> str:
    """The object as ``kubectl describe`` prints a custom resource, Events included.

    ``max_items``: longer maps and lists are cut to their first entries and a count (None: all).
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
            _fields(obj[section], 2, out, max_items)
    if events:
        out.append("Events:")
        out.append("  Type     Reason           Age   From       Message")
        out.append("  ----     ------           ----  ----       -------")
        for e in events:
            source = (e.get("source") or {}).get("component") or e.get("reportingComponent") or "podmortem"
            stamp = e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")
            out.append(
                f"  {e.get('type', 'Normal'):<8} {e.get('reason', ''):<16} {_age(stamp, now):<5} "
                f"{source:<10} {_scalar(e.get('message', ''))}"
            )
    else:
        out.append("Events:       <none>")
    return "\n".join(out)
