"""``podmortem diagnose`` on a pod whose sidecar left its evidence gives the operator's report for it.

Sidecar mode exists for clusters without the node agent: the pod's status holds the sidecar's
termination message, and the operator's report names the victim, the limit and the workers from
it. Off the cluster the same pod object must give the same report, not "deploy the node agent".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.diagnosis.test_sidecar_findings import SIDECAR_IMAGE, evidence, pod

from podmortem.cli import main as cli_main
from podmortem.diagnosis import sidecar_findings
from podmortem.diagnosis import termination as term_mod
from podmortem.diagnosis.in_pod_evidence import SidecarIdentity
from podmortem.reports.sidecar_evidence import render


def _diagnose(tmp_path: Path, body: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(body))
    assert cli_main.main(["diagnose", "--json", str(path)]) == 0
    (report,) = json.loads(capsys.readouterr().out)["reports"]
    result: dict[str, Any] = report
    return result


def test_the_sidecars_evidence_gives_the_operators_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = pod(render(evidence()))
    report = _diagnose(tmp_path, body, capsys)
    # The operator, knowing its image, reads the same evidence from the same pod.
    [t] = term_mod.find(body)
    identity = SidecarIdentity(image=SIDECAR_IMAGE, command=("podmortem", "sidecar"))
    assert sidecar_findings.read(t, identity).evidence is not None
    codes = [f["code"] for f in report["findings"]]
    assert report["verdict"] == "memcg-limit"
    assert report["kill"]["pid"] == 26707
    assert {"fork-copies", "sidecar-evidence"} <= set(codes)
    assert "Deploy the podmortem node agent" not in json.dumps(report)


def test_evidence_that_contradicts_the_kubelet_is_not_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The sidecar says it was written long before the trainer ended: the operator does not use it.
    body = pod(render(evidence(at="2026-12-04T10:00:00Z")))
    report = _diagnose(tmp_path, body, capsys)
    assert "sidecar-evidence" not in [f["code"] for f in report["findings"]]
