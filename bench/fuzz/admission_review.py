"""Fuzz target: an AdmissionReview request body, through the webhook's own steps (`admission.mutate`).

The body is JSON (its errors are answered 'allowed'), then the namespace check, the decision and
the answer's own JSON; `admission.decide` never raises, so any exception there is a finding (the
handler would answer 'allowed' and log a traceback).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness

SEEDS = ("tests/fixtures/fuzz/admission_review/seed-*",)
_SETTINGS: list[object] = []


def check(data: bytes) -> None:
    from podmortem.operator import settings
    from podmortem.operator.watching import admission

    if not _SETTINGS:
        _SETTINGS.append(settings.SidecarInjectionSettings(image="ghcr.io/podmortem/podmortem:fuzz"))
    try:
        review = json.loads(data)
    except (ValueError, RecursionError):
        return
    admission.excluded(review, frozenset({"kube-system"}))
    admission._where(review)
    answer = admission.decide(review, _SETTINGS[0])  # type: ignore[arg-type]
    json.dumps(answer.review())


if __name__ == "__main__":
    _harness.main(check)
