"""Reading back a report an earlier operator run wrote, to finish what it left pending.

A report waits for the kernel's OOM record for ``AgentAccessSettings.record_wait_s``
(`kernel_record`); an operator that restarts in that window would otherwise
leave it ``pending`` for good. The new run finds the report on the target (the
TrainingJob's ``status.failureReport``, or the ``podmortem.io/failure-report``
annotation's summary), takes its context back, and asks the agent for the rest
of the window.

Anyone who may edit the object can edit what is stored there, so a stored report is read
within bounds (:func:`parse_annotation`, :func:`checked`): a document too big, nested too
deep or not a JSON object is `Unreadable`, never a RecursionError out of a handler, and
fields of the wrong type read as absent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from podmortem.errors import PodmortemError
from podmortem.operator import kernel_record
from podmortem.reports.failure import FailureReport
from podmortem.reports.stored_fields import kernel_record_state
from podmortem.reports.times import parse_time

#: Keys of a status report that are its context, not the `FailureReport` (see ``reports.fit``).
CONTEXT_KEYS = ("pod", "reportedAt", "updatedAt", "evidence", "reportUrl")

#: Bytes of JSON a stored report may take to be read back. The operator writes at most
#: ``--status-report-max-bytes`` (16 KiB by default, 1 MiB at most) into a status and
#: ``--annotation-report-max-bytes`` (4 KiB, 256 KiB at most) into the annotation; a bigger
#: document was not written by it, and parsing or drawing it would cost memory for nothing.
MAX_BYTES = 1 << 20
#: Bytes of the annotation: all of an object's annotations together are capped at 256 KiB by the
#: API server, which is also the most ``--annotation-report-max-bytes`` accepts.
ANNOTATION_MAX_BYTES = 256 << 10
#: Nesting depth of a stored report. The operator's documents are 6 levels deep at most
#: (``evidence.workingSet.points[i][j]``); a much deeper one is an edit, and Python's JSON
#: parser and ``str()`` recurse (RecursionError at about 1,000 levels).
MAX_DEPTH = 32
#: The largest integer read back: Kubernetes keeps JSON integers as int64; a bigger one (Python
#: parses any) would overflow a float where the page scales or formats it.
MAX_INT = 1 << 63


class Unreadable(PodmortemError, ValueError):
    """A stored report that is not read back: too big, too deep, not JSON or not an object."""


def parse_annotation(raw: object) -> dict[str, Any]:
    """The ``podmortem.io/failure-report`` annotation's JSON object, within the bounds above.

    Raises `Unreadable` (and nothing else) for any other value: the bytes are counted before
    parsing, and the parser's own RecursionError, ValueError and TypeError are caught.
    """
    if not isinstance(raw, str):
        raise Unreadable(f"the annotation is not text but {type(raw).__name__}")
    size = len(raw) if len(raw) > ANNOTATION_MAX_BYTES else len(raw.encode("utf-8", "surrogatepass"))
    if size > ANNOTATION_MAX_BYTES:
        raise Unreadable(
            f"{size:,} bytes of JSON or more, over the {ANNOTATION_MAX_BYTES:,} an annotation may take"
        )
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise Unreadable(f"nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, TypeError) as exc:
        raise Unreadable(f"not JSON: {str(exc)[:100]}") from None
    return checked(doc)


def checked(document: object) -> dict[str, Any]:
    """``document`` (parsed JSON, e.g. a ``status.failureReport``) if it is an object within the bounds.

    The walk is iterative, so a document of any depth is measured without recursing;
    raises `Unreadable` otherwise.
    """
    if not isinstance(document, dict):
        raise Unreadable(f"not a JSON object but {type(document).__name__}")
    size = 0
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise Unreadable(f"nested deeper than {MAX_DEPTH} levels")
            size += 2
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                size += len(key) + 4 if isinstance(key, str) else 1
                stack.append((item, depth + 1))
        elif isinstance(value, str):
            size += len(value) + 2
        elif isinstance(value, bool) or value is None:
            size += 5
        elif isinstance(value, int):
            if abs(value) > MAX_INT:
                raise Unreadable("a number beyond 64 bits")
            size += 20
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise Unreadable("a number that is not finite")
            size += 24
        else:
            raise Unreadable(f"not JSON: a {type(value).__name__}")
        if size > MAX_BYTES:
            raise Unreadable(f"over {MAX_BYTES:,} bytes of JSON, the most a stored report may take")
    return document


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _errors(value: object) -> list[str]:
    return [e for e in value if isinstance(e, str)] if isinstance(value, list) else []


def pending_record(stored: Mapping[str, Any]) -> bool:
    return kernel_record_state(stored) == kernel_record.PENDING


def context(stored: Mapping[str, Any], *, status: bool) -> dict[str, Any]:
    """The report's context (pod, times, evidence summary), as ``Reporter`` keeps it in an outcome.

    From a status report it is there whole; from an annotation's summary only what the summary
    keeps: enough to write the summary again. A part of the wrong type (an edited report) reads
    as absent.
    """
    if status:
        doc = {key: stored[key] for key in CONTEXT_KEYS if key in stored}
        if "pod" in doc:
            doc["pod"] = dict(_mapping(doc["pod"]))
        doc["evidence"] = dict(_mapping(doc.get("evidence")))
        doc["evidence"]["errors"] = _errors(doc["evidence"].get("errors", []))
        return doc
    return {
        "pod": dict(_mapping(stored.get("pod"))),
        "reportedAt": stored.get("reportedAt"),
        "evidence": {
            "kernelRecord": {"state": kernel_record_state(stored)},
            "workingSet": {"peakBytes": stored.get("workingSetPeakBytes")},
            "log": {"lastLineAt": stored.get("lastLogLineAt"), "url": stored.get("logUrl")},
            "errors": _errors(stored.get("errors")),
        },
    }


def failure_report(stored: Mapping[str, Any]) -> FailureReport | None:
    """The `FailureReport` of a status report (perhaps trimmed); None from a summary or when unreadable."""
    try:
        return FailureReport.model_validate({k: v for k, v in stored.items() if k not in CONTEXT_KEYS})
    except ValidationError:
        return None


def last_line_ns(document: Mapping[str, Any]) -> int | None:
    """The log's last line time from a report's context, in ns (whole seconds, as reports keep it)."""
    at = parse_time(_mapping(_mapping(document.get("evidence")).get("log")).get("lastLineAt"))
    return int(at.timestamp()) * 1_000_000_000 if at is not None else None
