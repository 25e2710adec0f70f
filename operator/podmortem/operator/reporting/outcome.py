"""One termination's report as the operator holds it: the document written, and what it was made from.

The first write and each follow-up (the late Prometheus series, the kernel's record, the sidecar's
message, the resume after a restart) change the same `Outcome`, one at a time (its ``lock``), so
every write shows the latest of all of them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from podmortem.diagnosis.rediagnose import Evidence
from podmortem.diagnosis.termination import Termination
from podmortem.operator.jobs import Target
from podmortem.reports.document import KernelRecordState, ReportDocument
from podmortem.reports.failure import FailureReport


@dataclass
class Outcome:
    """What one report run produced, for metrics, tests and the benchmark; later patches update it."""

    termination: Termination
    target: Target
    #: The report with its context, as written (and rewritten as evidence comes).
    document: ReportDocument
    #: Seconds from seeing the termination to the report written.
    latency_s: float
    #: What the report is made from; a follow-up replaces a part and makes it again (`rediagnose`).
    evidence: Evidence = field(default_factory=Evidence)
    #: Where it went: "status", "annotation", "event".
    written: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Why the agent gave no evidence in the report's budget, if it did not.
    agent_error: str | None = None
    #: The first report and its patches (Prometheus series, kernel record) are written one at a time.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The pod's sidecar message was read (or there is no sidecar), so a later pod event does not
    #: read it again.
    sidecar_read: bool = True
    #: Its place among the reports written (the order of `Reports.outcomes`).
    order: int = 0

    @property
    def report(self) -> FailureReport:
        return self.document.report

    @report.setter
    def report(self, report: FailureReport) -> None:
        self.document.report = report

    @property
    def kernel_record_state(self) -> KernelRecordState | None:
        return self.document.kernel_record_state


def headline(outcome: Outcome) -> tuple[str, str]:
    """The verdict and the one-line cause (a condition's and an Event's message, a job row's line)."""
    verdict = outcome.report.verdict or "unknown"
    cause = next((f for f in outcome.report.findings if f.code == verdict), None)
    t = outcome.termination
    return verdict, outcome.report.labelled(
        cause.message if cause is not None else f"exit {t.exit_code}, reason {t.reason or t.pod_reason}"
    )
