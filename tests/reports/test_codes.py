"""The one list of verdict and finding codes is complete and agrees with the CRD."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from podmortem.diagnosis import categories
from podmortem.reports import codes

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "podmortem"


def written_codes() -> set[str]:
    """Every finding code a rule writes: the literal ``code="..."`` ones, and ``<category>-dominant``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        found |= set(re.findall(r'\bcode="([a-z0-9-]+)"', path.read_text()))
    found |= {f"{name}-dominant" for name in categories.CATEGORIES}
    return found


def test_every_code_a_rule_writes_is_listed() -> None:
    written = written_codes()
    assert written, "the scan found no codes: it is broken"
    assert written <= codes.ALL, f"not in reports/codes.py: {sorted(written - codes.ALL)}"


def test_every_listed_code_is_written_by_a_rule() -> None:
    written = written_codes()
    assert written >= codes.ALL, f"listed but never written: {sorted(codes.ALL - written)}"


def test_the_crd_describes_the_verdicts_in_the_list() -> None:
    crd = yaml.safe_load((ROOT / "charts" / "podmortem" / "crds" / "trainingjob.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    verdict = schema["properties"]["status"]["properties"]["failureReport"]["properties"]["verdict"]
    described = re.search(r"\((.*)\)", verdict["description"])
    assert described, verdict
    assert [c.strip() for c in described.group(1).split(",")] == list(codes.VERDICTS)


def test_the_verdict_is_the_first_cause() -> None:
    assert codes.verdict_of(["stale-log", "global-oom", "memcg-limit"]) == "global-oom"
    assert codes.verdict_of(["stale-log"]) is None
