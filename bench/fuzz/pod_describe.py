"""Fuzz target: ``kubectl describe pod`` output (whole, a part, lines joined) as ``podmortem diagnose``
reads it.

`podmortem.diagnosis.pod_describe.pods_from_describe` documents `BadInput`; any other exception is
a finding.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

import _harness

SEEDS = ("tests/fixtures/corpus-new/*describe*.txt",)


def check(data: bytes) -> None:
    from podmortem.diagnosis import offline, pod_describe

    text = data.decode("utf-8", "replace")
    offline.sniff(text)
    with contextlib.suppress(offline.BadInput):
        pod_describe.pods_from_describe(text)


if __name__ == "__main__":
    _harness.main(check)
