"""`podmortem.cli.diagnose_inputs`: the kind of an input told by its content, and read as that kind.

A pod status pasted in part (describe's ``State:`` lines, a grep'ed ``lastState:``, describe whose
indentation was lost, the 2014 kubelet's JSON) is a pod status, not a training log; kernel text and
training logs keep their kinds; a text that only looked like a part of a pod status and holds none is
read as a log, not refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podmortem.cli import diagnose_inputs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = FIXTURES / "corpus-new"
LOGS = FIXTURES / "training-logs"
RECORDS = FIXTURES / "oom-records"

#: The corpus's pod statuses: their sidecars' ``kind`` (pod-status, describe-pod) is what is told.
STATUSES = sorted(
    next(p for p in CORPUS.glob(sidecar.stem + ".*") if p.suffix != ".json" or p.name.endswith(".json.txt"))
    for sidecar in CORPUS.glob("*.json")
    if json.loads(sidecar.read_text()).get("kind") in ("pod-status", "describe-pod")
)


def kind_of(path: Path) -> str:
    return diagnose_inputs.detect(path.read_bytes()[: diagnose_inputs.HEAD_BYTES])


def test_the_corpus_has_pod_statuses() -> None:
    assert len(STATUSES) >= 11


@pytest.mark.parametrize("path", STATUSES, ids=lambda p: p.name[:40])
def test_pasted_pod_statuses_are_not_training_logs(path: Path) -> None:
    sidecar = json.loads(next(CORPUS.glob(path.name.split(".")[0] + ".json")).read_text())
    assert kind_of(path) == {"pod-status": "pod", "describe-pod": "describe"}[sidecar["kind"]]


@pytest.mark.parametrize("path", sorted(LOGS.glob("*.log")), ids=lambda p: p.name)
def test_training_logs_stay_logs(path: Path) -> None:
    assert kind_of(path) == "log"


@pytest.mark.parametrize("path", sorted(RECORDS.glob("*.log"))[:40], ids=lambda p: p.name)
def test_kernel_text_stays_kernel_text(path: Path) -> None:
    assert kind_of(path) in ("kernel", "log")  # as before: a few records are console captures
    assert kind_of(path) not in ("pod", "describe")


def test_a_text_that_only_looked_like_a_part_of_a_pod_is_read_as_a_log(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text('"reason": "Evicted", "note": [}\n')
    assert kind_of(path) == "pod"
    read = diagnose_inputs.read_one(diagnose_inputs.Source(label="notes.txt", path=str(path)))
    assert read.kinds == ["log"] and read.pods == []
    # named a pod object by --kind, it is refused as one
    with pytest.raises(diagnose_inputs.InputError, match="not valid JSON"):
        diagnose_inputs.read_one(diagnose_inputs.Source(label="notes.txt", path=str(path), kind="pod"))
