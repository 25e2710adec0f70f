"""Fuzz target: a training log as ``podmortem diagnose`` reads it (a tail, kernel lines in it), then
its facts.

Neither the tail nor `podmortem.diagnosis.training_log.read` raises on any text; any exception is a finding.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness

SEEDS = ("tests/fixtures/training-logs/*.log",)


def check(data: bytes) -> None:
    from podmortem.cli import diagnose_inputs
    from podmortem.diagnosis import training_log

    tail, _ = diagnose_inputs.read_log(io.BytesIO(data), "fuzz", look_for_kernel=True)  # type: ignore[arg-type]
    training_log.read(tail.lines)
    training_log.read(data.decode("utf-8", "replace").splitlines(keepends=True))


if __name__ == "__main__":
    _harness.main(check)
