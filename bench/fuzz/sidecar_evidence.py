"""Fuzz target: a sidecar's termination message, as the operator reads it back from the pod status.

`podmortem.reports.sidecar_evidence.parse` documents `EvidenceInvalid` for anything but valid evidence;
any other exception is a finding, and so is evidence that does not render back to a message that
parses to the same evidence.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness

SEEDS = ("tests/fixtures/fuzz/sidecar_evidence/seed-*",)


def check(data: bytes) -> None:
    from podmortem.reports import sidecar_evidence as evidence

    try:
        doc = evidence.parse(data)
    except evidence.EvidenceInvalid:
        return
    if evidence.parse(evidence.render(doc)) != doc:
        raise AssertionError("evidence does not survive its own rendering")


if __name__ == "__main__":
    _harness.main(check)
