"""Every record of the project's corpus gives its sidecar's answer, scored the way a reader scores it.

The corpus (tests/fixtures/corpus-new: kernel records, training logs and pod statuses posted
publicly, each with a sidecar written from reading it) is scored by ``bench/diagnose_corpus.py``,
which starts ``podmortem diagnose --json`` as a process per record. The held-out part is not
scored here: it is kept for measuring before and after a change, not for fitting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "corpus-new"


def test_every_corpus_record_gives_its_sidecars_answer() -> None:
    env = {**os.environ, "PODMORTEM_CLI": f"{sys.executable} -m podmortem.cli.main"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "diagnose_corpus.py"), str(CORPUS)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    scored = [line for line in proc.stdout.splitlines() if not line.startswith("#")]
    total = len(list(CORPUS.glob("*.json")))
    assert total >= 85
    misses = [line for line in scored[:-1] if not line.endswith(": ok")]
    assert not misses, "\n".join(misses)
    assert scored[-1] == f"corpus-new: {total}/{total} right (100%)"


def test_a_correction_says_what_it_removed_and_why() -> None:
    """An expectation taken back after reading again is kept in the sidecar, never silently dropped."""
    corrected = 0
    for sidecar in CORPUS.glob("*.json"):
        data = json.loads(sidecar.read_text(encoding="utf-8"))
        for correction in data.get("corrections", []):
            corrected += 1
            assert correction["removed_from_expect"] and len(correction["why"]) > 40, sidecar.name
            assert not set(correction["removed_from_expect"]) & set(data["expect"]), sidecar.name
    assert corrected >= 1
