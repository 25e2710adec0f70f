"""What is written is what is read back: a failure report at the bounds a stored report is read within
(`podmortem.reports.stored_bounds`) goes through the real API server's TrainingJob schema (structural,
``x-kubernetes-preserve-unknown-fields`` under ``failureReport``) and comes back unchanged; the
conditions and printer columns read as the CRD and docs/operator.md say.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from tests.chart import _render
from tests.controlplane.cluster import ControlPlane

from podmortem.diagnosis import from_record
from podmortem.kernel import oom_parser
from podmortem.operator.status import set_condition
from podmortem.reports import stored_bounds
from podmortem.reports.document import PodContext, ReportDocument

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"
TJ = "/apis/podmortem.io/v1alpha1/namespaces/{ns}/trainingjobs"


@pytest.fixture(scope="module")
def crd(control_plane: ControlPlane) -> None:
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(_render.CRD_FILE))
    control_plane.kubectl("wait", "--for=condition=Established", "crd/trainingjobs.podmortem.io",
                          "--timeout=60s")


def _richest_report() -> ReportDocument:
    reports = [from_record.diagnose(r) for path in sorted(RECORDS.glob("*.log"))
               for r in oom_parser.parse_text(path.read_text(errors="replace"))]
    report = max(reports, key=lambda r: len(json.dumps(r.model_dump(mode="json"))))
    pod = PodContext(namespace="ns", name="pointgroup-train", uid="u-1", node="kwok-node-0",
                     container="trainer", exit_code=137, reason="OOMKilled")
    return ReportDocument(report=report, pod=pod)


def _nest(depth: int) -> dict[str, Any]:
    """An object nested ``depth`` levels deep (counting itself), as stored_bounds counts them."""
    inner: dict[str, Any] = {"leaf": "bottom"}
    for level in range(depth - 1, 0, -1):
        inner = {f"level{level}": inner}
    return inner


def at_the_bounds() -> dict[str, Any]:
    """The operator's status form of a real report, grown to every bound stored_bounds reads within:
    nested MAX_DEPTH levels, integers at the int64 ends, the widest floats, text of every plane,
    and the whole at MAX_BYTES as ``checked`` measures it."""
    doc = _richest_report().to_status(max_bytes=stored_bounds.MAX_BYTES)
    doc["bounds"] = {
        # The document is level 1, "bounds" level 2: the nest adds MAX_DEPTH - 2 levels.
        "deep": _nest(stored_bounds.MAX_DEPTH - 2),
        "ints": [stored_bounds.MAX_INT - 1, -stored_bounds.MAX_INT, 0, -1],
        "floats": [1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 0.1],
        "text": "ascii é ß 中文 🙂 \u2028 \"quoted\" \\ back\tslash\n",
        "flags": [True, False, None, {"gone": None, "kept": [None]}],
    }
    # Pad to the byte bound: checked() counts a string as its characters plus 2 quotes.
    stored_bounds.checked(doc)
    used = _measured(doc)
    doc["bounds"]["padding"] = ""
    room = stored_bounds.MAX_BYTES - _measured(doc)
    doc["bounds"]["padding"] = ("0123456789abcdef" * (room // 16 + 1))[:room]
    assert used < stored_bounds.MAX_BYTES
    return doc


def _measured(doc: dict[str, Any]) -> int:
    """The size ``stored_bounds.checked`` gives ``doc`` (found as the largest bound it passes)."""
    low, high = 0, stored_bounds.MAX_BYTES * 4
    saved = stored_bounds.MAX_BYTES
    try:
        while low < high:
            mid = (low + high) // 2
            stored_bounds.MAX_BYTES = mid
            try:
                stored_bounds.checked(doc)
                high = mid
            except stored_bounds.Unreadable:
                low = mid + 1
    finally:
        stored_bounds.MAX_BYTES = saved
    return low


def merged(doc: Any) -> Any:
    """What the real API server keeps of ``doc`` written by a merge patch: every object member whose
    value is null is gone, at any depth, in objects inside arrays too (RFC 7386 alone would keep
    those); a null that is an array item stays."""
    if isinstance(doc, dict):
        return {k: merged(v) for k, v in doc.items() if v is not None}
    if isinstance(doc, list):
        return [merged(v) for v in doc]
    return doc


def _trainingjob(cp: ControlPlane, namespace: str, name: str) -> None:
    cp.apply({"apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
              "metadata": {"name": name, "namespace": namespace},
              "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}}})


def _write_status(cp: ControlPlane, namespace: str, name: str, status: dict[str, Any]) -> Any:
    """As the operator writes it (status.StatusWriter.patch): a merge patch of the status subresource."""
    code, body = cp.request("PATCH", f"{TJ.format(ns=namespace)}/{name}/status", {"status": status},
                            content_type="application/merge-patch+json", timeout=60)
    assert code == 200, (code, str(body)[:2000])
    return body


def test_the_document_is_at_every_bound() -> None:
    """The document used below is at the bounds, not under them: one more level or byte is refused."""
    doc = at_the_bounds()
    assert stored_bounds.checked(doc) is doc
    assert _measured(doc) == stored_bounds.MAX_BYTES
    deeper = copy.deepcopy(doc)
    leaf: dict[str, Any] = deeper["bounds"]["deep"]
    while isinstance(next(iter(leaf.values())), dict):
        leaf = next(iter(leaf.values()))
    leaf["leaf"] = {"one": "more"}
    with pytest.raises(stored_bounds.Unreadable, match="nested deeper"):
        stored_bounds.checked(deeper)
    longer = copy.deepcopy(doc)
    longer["bounds"]["padding"] += "x"
    with pytest.raises(stored_bounds.Unreadable, match="bytes"):
        stored_bounds.checked(longer)
    beyond = copy.deepcopy(doc)
    beyond["bounds"]["ints"][0] = stored_bounds.MAX_INT  # 2**63: past int64, the same size
    with pytest.raises(stored_bounds.Unreadable, match="64 bits"):
        stored_bounds.checked(beyond)


def test_a_report_at_the_bounds_reads_back_unchanged(control_plane: ControlPlane, crd: None,
                                                     namespace: str) -> None:
    cp = control_plane
    _trainingjob(cp, namespace, "bounds")
    doc = at_the_bounds()
    answered = _write_status(cp, namespace, "bounds", {"failureReport": doc})
    back = json.loads(cp.kubectl("get", "trainingjob", "bounds", "-n", namespace, "-o", "json"))
    stored = back["status"]["failureReport"]
    # Nothing pruned, nothing coerced (an int64 end stays an integer, not a float), no text changed;
    # only the members whose value is null are gone: a merge patch's null removes the member.
    assert stored == merged(doc)
    assert answered["status"]["failureReport"] == stored
    assert stored["bounds"]["ints"] == doc["bounds"]["ints"]
    pairs = zip(stored["bounds"]["ints"], doc["bounds"]["ints"], strict=True)
    assert all(type(a) is type(b) for a, b in pairs)
    # Read back, the report is the one written (the reader takes an absent member as null).
    assert ReportDocument.parse(stored_bounds.checked(stored)) == ReportDocument.parse(doc)


def test_an_integer_past_int64_does_not_read_back_as_written(control_plane: ControlPlane, crd: None,
                                                             namespace: str) -> None:
    """Why stored_bounds stops at int64: the API server keeps 2**63 as a float and writes it back as
    9223372036854776000, another number, which stored_bounds refuses."""
    cp = control_plane
    _trainingjob(cp, namespace, "past")
    _write_status(cp, namespace, "past", {"failureReport": {"verdict": "memcg-limit", "big": 1 << 63}})
    code, body = cp.request("GET", f"{TJ.format(ns=namespace)}/past")
    assert code == 200
    big = body["status"]["failureReport"]["big"]
    assert big != 1 << 63 and abs(big - (1 << 63)) < 1000, big
    with pytest.raises(stored_bounds.Unreadable, match="64 bits"):
        stored_bounds.checked(body["status"]["failureReport"])


def test_conditions_and_printer_columns_read_as_the_crd_defines(control_plane: ControlPlane, crd: None,
                                                                namespace: str) -> None:
    cp = control_plane
    _trainingjob(cp, namespace, "pointgroup")
    report = _richest_report().to_status(max_bytes=16 * 1024)
    now = "2026-01-01T12:00:00Z"
    conditions = set_condition([], type_="MemoryPressure", status=True, reason="PeakNearLimit",
                               message="epoch 4 peak 28Gi of 32Gi", now=now)
    conditions = set_condition(conditions, type_="Failed", status=True, reason="MemcgLimit",
                               message="trainer OOM-killed at its memory limit", now=now)
    _write_status(cp, namespace, "pointgroup", {
        "phase": "Failed", "podName": "pointgroup-train", "lastLogLineAt": now, "exitCode": 137,
        "memory": {"epoch": 4, "peakOfLimit": "28Gi/32Gi (88%)", "podPeakBytes": 28 << 30,
                   "podLimitBytes": 32 << 30},
        "conditions": conditions, "failureReport": report})
    table = cp.kubectl("get", "trainingjobs", "-n", namespace).splitlines()
    assert table[0].split() == ["NAME", "PHASE", "EPOCH", "PEAK/LIMIT", "VERDICT", "ROOT-CAUSE-POD", "AGE"]
    row = table[1].split()
    assert row[:7] == ["pointgroup", "Failed", "4", "28Gi/32Gi", "(88%)", report["verdict"],
                       "pointgroup-train"]
    wide = cp.kubectl("get", "tj", "-n", namespace, "-o", "wide").splitlines()
    # Wide adds the priority-1 columns where the CRD lists them: before Age.
    assert wide[0].split()[-3:] == ["POD", "LAST-LOG", "AGE"]
    assert "pointgroup-train" in wide[1].split()[-4:]
    stored = json.loads(cp.kubectl("get", "tj", "pointgroup", "-n", namespace, "-o", "json"))["status"]
    assert stored["conditions"] == conditions
    describe = cp.kubectl("describe", "trainingjob", "pointgroup", "-n", namespace)
    assert "Conditions:" in describe and "MemcgLimit" in describe and "PeakNearLimit" in describe
    assert "Failure Report:" in describe and report["verdict"] in describe
    # The listing's columns are the CRD's, in its order (docs/operator.md shows the same).
    defined = json.loads(cp.kubectl("get", "crd", "trainingjobs.podmortem.io", "-o", "json"))
    crd_columns = [c["name"].upper() for c in defined["spec"]["versions"][0]["additionalPrinterColumns"]
                   if not c.get("priority")]
    assert ["NAME", *crd_columns] == table[0].split()
