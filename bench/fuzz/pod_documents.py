"""Fuzz target: a pod object (YAML or JSON, whole or a part) as ``podmortem diagnose`` reads it.

`podmortem.diagnosis.pod_documents.pods_from_document` documents `BadInput` for a whole document
that parses neither as JSON nor as YAML; any other exception is a finding.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

import _harness

SEEDS = ("tests/fixtures/corpus-new/*.yaml", "tests/fixtures/corpus-new/*json.txt")


def check(data: bytes) -> None:
    from podmortem.diagnosis import offline, pod_documents

    text = data.decode("utf-8", "replace")
    offline.sniff(text)
    with contextlib.suppress(offline.BadInput):
        pod_documents.pods_from_document(text)


if __name__ == "__main__":
    _harness.main(check)
