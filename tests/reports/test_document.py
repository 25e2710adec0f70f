"""`ReportDocument`: the status and annotation forms written and read back, whatever was edited in them.

Round trips run over every report the parser makes of the shared kernel records, with pods, times
and evidence drawn by hypothesis; the lenient reader is shown on documents with any part replaced
by any JSON value. The CRD's ``status.failureReport`` schema is checked against the model.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from podmortem.diagnosis import from_record
from podmortem.kernel import oom_parser
from podmortem.reports.document import (
    Evidence,
    JobRow,
    JobSection,
    KernelRecordEvidence,
    KernelRecordState,
    LogEvidence,
    LogGap,
    PodContext,
    ReportDocument,
    WorkingSetEvidence,
    merge_patch,
)
from podmortem.reports.failure import FailureReport
from podmortem.reports.times import rfc3339
from podmortem_demo.emulated import merge_patch as apiserver_merge

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "tests" / "fixtures" / "oom-records"
CRD = ROOT / "charts" / "podmortem" / "crds" / "trainingjob.yaml"


def _reports() -> list[FailureReport]:
    out = []
    for path in sorted(RECORDS.glob("*.log")):
        out += [from_record.diagnose(r) for r in oom_parser.parse_text(path.read_text(errors="replace"))]
    return out


REPORTS = _reports()

texts = st.text(max_size=40)
names = st.none() | st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=30)
#: Whole seconds: reports keep times so.
times = st.none() | st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
).map(lambda at: at.replace(microsecond=0))
counts = st.none() | st.integers(min_value=0, max_value=1 << 40)

pods = st.builds(
    PodContext, namespace=names, name=names, uid=names, node=names, container=names, container_id=names,
    exit_code=st.none() | st.integers(0, 255), reason=names, pod_reason=names, pod_message=st.none() | texts,
    started_at=times, finished_at=times, time_zone=st.none() | st.sampled_from(["Europe/Berlin", "UTC"]),
)
evidence = st.builds(
    Evidence,
    agent=st.none() | st.sampled_from(["ok", "unavailable"]),
    kernel_records=counts,
    samples=counts,
    kernel_record=st.builds(
        KernelRecordEvidence, state=st.none() | st.sampled_from(KernelRecordState), note=st.none() | texts,
        requests=st.none() | st.integers(0, 100),
    ),
    working_set=st.builds(
        WorkingSetEvidence, source=st.none() | texts, peak_bytes=counts, peak_at=times,
        note=st.none() | texts,
        points=st.lists(st.tuples(times.filter(lambda t: t is not None), st.integers(0, 1 << 40)),
                        max_size=60),
        pending=st.booleans(),
    ),
    log=st.builds(
        LogEvidence, location=st.none() | texts, url=st.none() | texts, last_line_at=times, lines=counts,
        gaps=st.lists(st.builds(LogGap, reason=st.none() | texts, after=times, before=times), max_size=3),
    ),
    errors=st.lists(texts, max_size=3),
)
documents = st.builds(
    ReportDocument,
    report=st.sampled_from(REPORTS),
    pod=pods,
    reported_at=times,
    updated_at=times,
    evidence=evidence,
    report_url=st.none() | texts,
)

#: Any JSON value, to put anywhere in a stored document.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), 1 << 63) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


def _through_status(doc: dict[str, Any]) -> dict[str, Any]:
    """As the API server hands the status back once a merge patch wrote it: JSON, and every object
    member whose value was null gone, at any depth (measured on kube-apiserver, test_status_schema)."""
    stored: dict[str, Any] = apiserver_merge.pruned(json.loads(json.dumps(doc)))
    return stored


def _through_annotation(doc: dict[str, Any]) -> dict[str, Any]:
    """As an annotation hands it back: a JSON string, which the API server keeps as written."""
    value: dict[str, Any] = json.loads(json.dumps(doc))
    return value


def test_the_corpus_gives_reports_to_round_trip() -> None:
    assert len(REPORTS) >= 50 and any(r.tasks for r in REPORTS) and any(r.cgroup for r in REPORTS)


def _null_evidence_dropped(doc: ReportDocument) -> ReportDocument:
    """``doc`` less its findings' evidence members that are null: the API server drops a null member
    inside the findings array too, and a reader takes an absent one as null (unknown)."""
    findings = [f.model_copy(update={"evidence": {k: v for k, v in f.evidence.items() if v is not None}})
                for f in doc.report.findings]
    return doc.model_copy(update={"report": doc.report.model_copy(update={"findings": findings})})


@given(documents)
def test_the_status_form_reads_back_as_written(doc: ReportDocument) -> None:
    stored = _through_status(doc.to_status(max_bytes=1 << 20))
    back = ReportDocument.parse(stored)
    assert back == _null_evidence_dropped(doc)
    # Written again (as the operator's rewrite does), the server keeps the same object.
    assert _through_status(back.to_status(max_bytes=1 << 20)) == stored


@given(documents, st.integers(min_value=2048, max_value=32 << 10))
def test_the_status_form_fits_its_budget_and_keeps_the_verdict(doc: ReportDocument, budget: int) -> None:
    """A budget of 2 KiB or more: what the operator accepts for ``--status-report-max-bytes`` is 4 KiB up."""
    stored = doc.to_status(max_bytes=budget)
    back = ReportDocument.parse(_through_status(stored))
    minimal = ReportDocument.parse(_through_status(doc.to_status(max_bytes=0)))
    if len(json.dumps(minimal.to_status(max_bytes=0), separators=(",", ":")).encode()) <= budget:
        assert len(json.dumps(stored, separators=(",", ":")).encode()) <= budget
    assert back.report.verdict == doc.report.verdict
    assert [f.message for f in back.report.findings] == [f.message for f in doc.report.findings]
    assert back.pod == doc.pod and back.kernel_record_state == doc.kernel_record_state


@given(documents, st.integers(min_value=256, max_value=8 << 10))
def test_the_annotation_form_keeps_what_it_says_and_reads_back(doc: ReportDocument, budget: int) -> None:
    summary = _through_annotation(doc.to_annotation(max_bytes=1 << 20))
    back = ReportDocument.parse(summary)
    assert back.form == "annotation"
    assert back.report.verdict == doc.report.verdict
    assert [(f.code, f.severity, f.message) for f in back.report.findings] == [
        (f.code, f.severity, f.message) for f in doc.report.findings
    ]
    assert back.kernel_record_state == doc.kernel_record_state
    assert back.evidence.log.last_line_at == doc.evidence.log.last_line_at
    assert back.evidence.working_set.peak_bytes == doc.evidence.working_set.peak_bytes
    assert back.pod.uid == doc.pod.uid and back.pod.finished_at == doc.pod.finished_at
    if doc.report.kill is not None:
        assert back.report.kill is not None and back.report.kill.pid == doc.report.kill.pid
    assert back.to_annotation(max_bytes=1 << 20) == summary  # written again, the same
    cut = doc.to_annotation(max_bytes=budget)
    assert ReportDocument.parse(_through_annotation(cut)).report.verdict == doc.report.verdict


@given(documents, st.data())
def test_any_part_replaced_by_any_json_reads_as_absent_and_the_rest_stays(
    doc: ReportDocument, data: st.DataObject
) -> None:
    for stored in (_through_status(doc.to_status(max_bytes=1 << 20)),
                   _through_annotation(doc.to_annotation(max_bytes=1 << 20))):
        paths = list(_paths(stored))
        path = data.draw(st.sampled_from(paths))
        edited = copy.deepcopy(stored)
        _put(edited, path, data.draw(json_values))
        back = ReportDocument.parse(edited)  # never raises
        if path[0] != "pod":  # an edit elsewhere leaves the pod as it was
            assert back.pod.uid == doc.pod.uid
        if path[0] not in ("verdict", "findings") and (path[0] != "evidence" or len(path) < 2):
            assert back.report.verdict == doc.report.verdict or path[0] == "verdict"


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Any:
    if prefix:
        yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _paths(value, (*prefix, i))


def _put(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        doc = doc[step]
    doc[path[-1]] = value


@pytest.mark.parametrize(
    "stored",
    [
        {"pod": "p", "errors": 5, "evidence": "x"},
        {"pod": [1, 2], "errors": "abc", "evidence": [], "kernelRecord": 7},
        {"pod": None, "errors": None, "evidence": {"kernelRecord": "x", "log": "y", "errors": 3}},
        {"evidence": {"log": {"lastLineAt": 5}, "kernelRecord": {"state": {}}}},
        {"verdict": 5, "findings": "no", "tasks": [{"pid": "x"}, {"pid": 3, "name": "ok"}]},
        {"evidence": {"workingSet": {"points": [["2026-01-01T00:00:00Z", 5], ["no", 1], [1], "x"]}}},
    ],
)
def test_odd_types_read_as_absent(stored: dict[str, Any]) -> None:
    doc = ReportDocument.parse(stored)
    assert doc.pod.name is None and doc.last_line_ns() is None and not doc.pending_record
    assert all(isinstance(e, str) for e in doc.evidence.errors)
    if "tasks" in stored:  # the bad row goes, the good one stays
        assert [t.pid for t in doc.report.tasks] == [3]
    if "workingSet" in stored.get("evidence", {}):
        assert [v for _, v in doc.evidence.working_set.points] == [5]


def test_both_forms_name_the_kernel_record_state() -> None:
    assert ReportDocument.parse({"kernelRecord": "pending"}).pending_record
    status_form = {"evidence": {"kernelRecord": {"state": "attached"}}}
    assert ReportDocument.parse(status_form).kernel_record_state == KernelRecordState.ATTACHED
    assert ReportDocument.parse({}).kernel_record_state is None


def test_a_job_section_reads_back_in_the_annotation() -> None:
    job = JobSection(pods=2, roles={"root-cause": 1, "consequence": 1},
                     root_cause=JobRow(pod="a", rank=0, role="root-cause", verdict="memcg-limit"),
                     rows=[JobRow(pod="a", rank=0, role="root-cause"),
                           JobRow(pod="b", rank=1, role="consequence")])
    summary = ReportDocument().to_annotation(max_bytes=4096) | {"job": job.to_json()}
    assert ReportDocument.parse(_through_annotation(summary)).job == job


def test_a_merge_patch_removes_what_the_new_report_no_longer_has() -> None:
    old = {"evidence": {"kernelRecord": {"state": "pending", "note": "asked again"}}, "verdict": "x"}
    new = {"evidence": {"kernelRecord": {"state": "attached"}}, "verdict": "x"}
    assert merge_patch(old, new) == {"evidence": {"kernelRecord": {"state": "attached", "note": None}},
                                     "verdict": "x"}


def test_times_are_written_as_the_api_writes_them() -> None:
    at = datetime(2026, 12, 2, 10, 0, 0, 750000, tzinfo=UTC)
    doc = ReportDocument(reported_at=at, pod=PodContext(finished_at=at))
    stored = doc.to_status(max_bytes=1 << 20)
    assert stored["reportedAt"] == rfc3339(at) == "2026-12-02T10:00:00Z" == stored["pod"]["finishedAt"]


# --- the CRD's schema and the model ---------------------------------------------------------------------


def _crd_report_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    version = crd["spec"]["versions"][0]
    return version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["failureReport"]


def _model_schema() -> dict[str, Any]:
    """The status form's JSON schema: the FailureReport's fields and the context's, side by side."""
    report = FailureReport.model_json_schema(mode="serialization")
    context = ReportDocument.model_json_schema(by_alias=True, mode="serialization")
    defs = {**report.get("$defs", {}), **context.get("$defs", {})}
    props = dict(report["properties"])
    props.update({k: v for k, v in context["properties"].items() if k != "report"})
    return {"type": "object", "properties": props, "$defs": defs}


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while True:
        if "$ref" in schema:
            schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
        elif "anyOf" in schema:  # X | None
            schema = next(s for s in schema["anyOf"] if s.get("type") != "null")
        else:
            return schema


def _check(crd: dict[str, Any], model: dict[str, Any], defs: dict[str, Any], where: str) -> list[str]:
    model = _resolve(model, defs)
    problems = []
    if crd.get("type") and model.get("type") and crd["type"] != model["type"]:
        problems.append(f"{where}: the CRD says {crd['type']}, the model {model['type']}")
    for name, sub in (crd.get("properties") or {}).items():
        if name not in (model.get("properties") or {}):
            problems.append(f"{where}.{name}: in the CRD, not in the model")
            continue
        problems += _check(sub, model["properties"][name], defs, f"{where}.{name}")
    return problems


def test_the_crd_status_schema_agrees_with_the_model() -> None:
    model = _model_schema()
    assert _check(_crd_report_schema(), model, model["$defs"], "failureReport") == []


def test_the_schema_check_fails_on_a_field_the_model_lacks() -> None:
    model = _model_schema()
    crd = copy.deepcopy(_crd_report_schema())
    crd["properties"]["pod"]["properties"]["nodeName"] = {"type": "string"}
    crd["properties"]["verdict"]["type"] = "integer"
    assert sorted(_check(crd, model, model["$defs"], "failureReport")) == [
        "failureReport.pod.nodeName: in the CRD, not in the model",
        "failureReport.verdict: the CRD says integer, the model string",
    ]
