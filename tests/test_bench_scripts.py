"""Every benchmark under bench/ starts as docs/benchmarks.md runs it, as far as its ``--help``.

The benches are run by hand, so nothing else notices when a refactoring moves a module they
import: bench/logs_soak.py and bench/logs_scale.py both failed at import for a while after the
logs package was split. ``--help`` imports the whole script and parses its arguments, without
the minutes of work behind them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHES = sorted(p for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_"))


def test_the_benches_are_found() -> None:
    assert len(BENCHES) >= 20, BENCHES


@pytest.mark.parametrize("script", BENCHES, ids=lambda p: p.name)
def test_bench_answers_help(script: Path) -> None:
    command = [sys.executable, str(script), "--help"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout, done.stdout[-500:]
