"""Fuzz target: kernel log text as ``podmortem diagnose`` reads it, and one ``/dev/kmsg`` record.

The parser never raises on input text (`podmortem.kernel.oom_parser`); any exception is a finding.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness

#: Seed inputs, relative to the repository root.
SEEDS = ("tests/fixtures/oom-records/*.log", "operator/podmortem/examples/*.log")


def check(data: bytes) -> None:
    from podmortem.cli import diagnose_inputs
    from podmortem.kernel import kmsg, oom_parser

    oom_parser.parse_lines(diagnose_inputs._kernel_lines(iter([data]), diagnose_inputs.Tail()))
    kmsg.parse_record(data[:8192])


if __name__ == "__main__":
    _harness.main(check)
