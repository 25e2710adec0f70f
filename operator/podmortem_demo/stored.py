"""The report the demo's operator stored, read back the way every reader does (`ReportDocument.parse`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from podmortem.reports.document import ReportDocument

#: Where a job of another kind keeps its report.
REPORT_ANNOTATION = "podmortem.io/failure-report"


def in_status(obj: Mapping[str, Any] | None) -> ReportDocument | None:
    """A TrainingJob's ``status.failureReport``; None when it has none (yet)."""
    status = (obj or {}).get("status")
    raw = status.get("failureReport") if isinstance(status, Mapping) else None
    return ReportDocument.parse(raw) if isinstance(raw, Mapping) and raw else None


def in_annotation(obj: Mapping[str, Any] | None) -> ReportDocument | None:
    """The ``podmortem.io/failure-report`` annotation of a job of another kind; None without one."""
    meta = (obj or {}).get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    raw = annotations.get(REPORT_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(raw, str) or not raw:
        return None
    doc = json.loads(raw)
    return ReportDocument.parse(doc) if isinstance(doc, Mapping) else None


def finding_codes(report: ReportDocument) -> str:
    return ", ".join(f.code for f in report.report.findings)
