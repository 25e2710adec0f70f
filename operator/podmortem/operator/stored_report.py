"""Reading back a report an earlier operator run wrote, to finish what it left pending.

A report waits for the kernel's OOM record for ``AgentAccessSettings.record_wait_s``
(`kernel_record`); an operator that restarts in that window would otherwise
leave it ``pending`` for good. The new run finds the report on the target (the
TrainingJob's ``status.failureReport``, or the ``podmortem.io/failure-report``
annotation's summary), takes its context back, and asks the agent for the rest
of the window.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from podmortem.operator import kernel_record
from podmortem.reports.failure import FailureReport

#: Keys of a status report that are its context, not the `FailureReport` (see ``reports.fit``).
CONTEXT_KEYS = ("pod", "reportedAt", "updatedAt", "evidence", "reportUrl")


def record_state(stored: Mapping[str, Any]) -> str | None:
    """The kernel record's state in a stored report, in either form."""
    summary_state = stored.get("kernelRecord")  # the annotation's summary keeps the state alone
    if isinstance(summary_state, str):
        return summary_state
    evidence = stored.get("evidence")
    record = evidence.get("kernelRecord") if isinstance(evidence, Mapping) else None
    state = record.get("state") if isinstance(record, Mapping) else None
    return state if isinstance(state, str) else None


def pending_record(stored: Mapping[str, Any]) -> bool:
    return record_state(stored) == kernel_record.PENDING


def context(stored: Mapping[str, Any], *, status: bool) -> dict[str, Any]:
    """The report's context (pod, times, evidence summary), as ``Reporter`` keeps it in an outcome.

    From a status report it is there whole; from an annotation's summary only what the summary
    keeps: enough to write the summary again.
    """
    if status:
        doc = {key: stored[key] for key in CONTEXT_KEYS if key in stored}
        doc.setdefault("evidence", {})
        doc["evidence"] = dict(doc["evidence"])
        doc["evidence"].setdefault("errors", [])
        return doc
    return {
        "pod": dict(stored.get("pod") or {}),
        "reportedAt": stored.get("reportedAt"),
        "evidence": {
            "kernelRecord": {"state": record_state(stored)},
            "workingSet": {"peakBytes": stored.get("workingSetPeakBytes")},
            "log": {"lastLineAt": stored.get("lastLogLineAt"), "url": stored.get("logUrl")},
            "errors": list(stored.get("errors") or []),
        },
    }


def failure_report(stored: Mapping[str, Any]) -> FailureReport | None:
    """The `FailureReport` of a status report (perhaps trimmed); None from a summary or when unreadable."""
    try:
        return FailureReport.model_validate({k: v for k, v in stored.items() if k not in CONTEXT_KEYS})
    except ValidationError:
        return None


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 time as written in reports (``...Z``); None when absent or malformed."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def last_line_ns(document: Mapping[str, Any]) -> int | None:
    """The log's last line time from a report's context, in ns (whole seconds, as reports keep it)."""
    log = (document.get("evidence") or {}).get("log") or {}
    at = parse_time(log.get("lastLineAt"))
    return int(at.timestamp()) * 1_000_000_000 if at is not None else None
