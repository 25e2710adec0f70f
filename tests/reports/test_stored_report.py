"""Where a report is stored: a TrainingJob's status, any other object's annotation, and nowhere else."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podmortem.reports import stored_bounds
from podmortem.reports.stored_report import ANNOTATION, StoredReport

REPORT = {"verdict": "memcg-limit", "pod": {"namespace": "ml", "name": "trainer-0", "uid": "u1"}}


def _obj(
    kind: str, api_version: str, *, status: Any = None, annotation: str | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "j"}}
    if status is not None:
        obj["status"] = {"failureReport": status}
    if annotation is not None:
        obj["metadata"]["annotations"] = {ANNOTATION: annotation}
    return obj


def test_a_trainingjobs_report_is_its_status() -> None:
    stored = StoredReport.locate(_obj("TrainingJob", "podmortem.io/v1alpha1", status=REPORT))
    assert stored is not None and stored.where == "status.failureReport" and stored.raw == REPORT
    assert stored.document().report.verdict == "memcg-limit"


def test_a_trainingjobs_annotation_is_never_its_report() -> None:
    # anyone who may edit the object writes annotations; only the operator writes the status
    planted = json.dumps({**REPORT, "verdict": "node-pressure"})
    assert StoredReport.locate(_obj("TrainingJob", "podmortem.io/v1alpha1", annotation=planted)) is None
    tj = _obj("TrainingJob", "podmortem.io/v1alpha1", status=REPORT, annotation=planted)
    both = StoredReport.locate(tj)
    assert both is not None and both.raw == REPORT


@pytest.mark.parametrize(("kind", "api_version"), [
    ("PyTorchJob", "kubeflow.org/v1"), ("Pod", "v1"), ("TrainingJob", "example.com/v1"), ("", ""),
])
def test_any_other_objects_report_is_its_annotation(kind: str, api_version: str) -> None:
    obj = _obj(kind, api_version, status={"verdict": "from-status"}, annotation=json.dumps(REPORT))
    stored = StoredReport.locate(obj)
    assert stored is not None and stored.where == "annotation" and stored.raw == REPORT


@pytest.mark.parametrize("obj", [
    None, {}, {"metadata": None}, _obj("TrainingJob", "podmortem.io/v1alpha1", status={}),
    _obj("TrainingJob", "podmortem.io/v1alpha1", status="text"), _obj("Pod", "v1", annotation=""),
    {"kind": "Pod", "metadata": {"annotations": {ANNOTATION: 5}}},
])
def test_no_report_where_there_is_none(obj: Any) -> None:
    assert StoredReport.locate(obj) is None


def test_a_report_out_of_bounds_is_unreadable() -> None:
    with pytest.raises(stored_bounds.Unreadable):
        StoredReport.locate(_obj("Pod", "v1", annotation="[1, 2]"))
    deep: Any = {}
    for _ in range(stored_bounds.MAX_DEPTH + 1):
        deep = {"x": deep}
    with pytest.raises(stored_bounds.Unreadable):
        StoredReport.locate(_obj("TrainingJob", "podmortem.io/v1alpha1", status=deep))
