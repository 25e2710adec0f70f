"""Where an object keeps its failure report, and the report read from there within the bounds.

The operator writes a TrainingJob's report into its ``status.failureReport`` (written through the
status subresource only) and any other object's into the `ANNOTATION`. Every reader (the operator
looking for a report it already wrote, the report page, ``podmortem report``, the demo) asks
`StoredReport.locate`, so they agree on where to look: a TrainingJob's report is never taken from
an annotation, which anyone who may edit the object can write. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from podmortem.reports import stored_bounds
from podmortem.reports.document import ReportDocument

#: The annotation a job of any kind but a TrainingJob keeps its report in.
ANNOTATION = "podmortem.io/failure-report"
#: The field of a TrainingJob's status its report is in.
STATUS_FIELD = "failureReport"
#: The API group and kind of the TrainingJob custom resource: the one kind with its report in its status.
TRAININGJOB_GROUP = "podmortem.io"
TRAININGJOB_KIND = "TrainingJob"

Where = Literal["status.failureReport", "annotation"]


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def is_trainingjob(obj: Mapping[str, Any] | None) -> bool:
    """Whether ``obj`` is a TrainingJob (its ``kind`` and the group of its ``apiVersion``)."""
    obj = _map(obj)
    api_version = obj.get("apiVersion")
    return obj.get("kind") == TRAININGJOB_KIND and isinstance(api_version, str) and api_version.startswith(
        TRAININGJOB_GROUP + "/"
    )


@dataclass(frozen=True)
class StoredReport:
    """A report as stored on an object (a JSON object within `stored_bounds`), and where it was."""

    where: Where
    raw: dict[str, Any]

    @classmethod
    def locate(cls, obj: Mapping[str, Any] | None) -> StoredReport | None:
        """The report stored on ``obj``: a TrainingJob's ``status.failureReport``, any other object's
        `ANNOTATION`; None when there is none there (absent, empty, or not an object or text).

        Raises `stored_bounds.Unreadable` when the one there is too big, too deep or not a JSON object.
        """
        obj = _map(obj)
        if is_trainingjob(obj):
            raw = _map(obj.get("status")).get(STATUS_FIELD)
            if not isinstance(raw, Mapping) or not raw:
                return None
            return cls("status.failureReport", stored_bounds.checked(dict(raw)))
        text = _map(_map(obj.get("metadata")).get("annotations")).get(ANNOTATION)
        if not isinstance(text, str) or not text:
            return None
        return cls("annotation", stored_bounds.parse_annotation(text))

    def document(self) -> ReportDocument:
        """The report read (`ReportDocument.parse`: leniently, whichever of the two forms it is in)."""
        return ReportDocument.parse(self.raw)
