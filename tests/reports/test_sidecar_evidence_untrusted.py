"""The evidence document read as what it is, text anyone in the pod may have written (issue 36).

Each case is one the security re-test made the operator accept: a key given twice, a time that
parses but cannot be turned into UTC, a pid no kernel gives.
"""

from __future__ import annotations

import json

import pytest

from podmortem.reports import sidecar_evidence as ev

BASE = {"v": 1, "podmortem": "0.1.0", "reason": "sigterm", "at": "2026-12-04T13:36:26Z"}


def _text(**changes: object) -> str:
    return json.dumps({**BASE, **changes})


def test_a_key_twice_is_refused() -> None:
    text = _text()[:-1] + ', "reason": "trainer-gone"}'
    assert json.loads(text)["reason"] == "trainer-gone"  # json.loads would take the last one
    with pytest.raises(ev.EvidenceInvalid, match="twice"):
        ev.parse(text)
    nested = _text(oom={"before": 0, "after": 1})[:-2] + ', "after": 9}}'
    with pytest.raises(ev.EvidenceInvalid, match="twice"):
        ev.parse(nested)


@pytest.mark.parametrize("at", [
    "0001-01-01T00:00:00+14:00",  # parses, then cannot be given in UTC (OverflowError downstream)
    "9999-12-31T23:59:59-12:00",
    "1970-01-01T00:00:00Z",
    "2201-01-01T00:00:00Z",
])
def test_times_outside_sane_years_are_refused(at: str) -> None:
    with pytest.raises(ev.EvidenceInvalid, match="at"):
        ev.parse(_text(at=at))
    kill = {"victim": {"pid": 5, "comm": "python", "role": "trainer"}, "gone": [5], "at": at}
    with pytest.raises(ev.EvidenceInvalid, match="kill"):
        ev.parse(_text(kill=kill))


def test_times_are_read_in_utc() -> None:
    doc = ev.parse(_text(at="2026-12-04T15:36:26+02:00"))
    assert doc.at.isoformat() == "2026-12-04T13:36:26+00:00"


def test_a_pid_no_kernel_gives_is_refused() -> None:
    victim = {"pid": ev.MAX_PID, "comm": "sshd", "role": "trainer"}
    with pytest.raises(ev.EvidenceInvalid, match="pid"):
        ev.parse(_text(kill={"victim": victim, "gone": [ev.MAX_PID], "at": BASE["at"]}))
