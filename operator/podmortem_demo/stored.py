"""The report the demo's operator stored, read back the way every reader does (`StoredReport.locate`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podmortem.reports.document import ReportDocument
from podmortem.reports.stored_report import StoredReport


def read(obj: Mapping[str, Any] | None) -> ReportDocument | None:
    """The report stored on ``obj`` (a TrainingJob's ``status.failureReport``, any other job's
    annotation); None when it has none (yet)."""
    stored = StoredReport.locate(obj)
    return stored.document() if stored is not None else None


def finding_codes(report: ReportDocument) -> str:
    return ", ".join(f.code for f in report.report.findings)
