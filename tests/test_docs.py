"""The documentation says what the repository holds.

- the chart README's values table lists every leaf of ``values.yaml``, and nothing else;
- every relative link in README.md, docs/*.md and the chart README points to a file that exists;
- the README's two set-up commands are fenced blocks of their own, and CI runs the second verbatim;
- the quick start sits between its markers (tests/test_readme_quickstart.py runs it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CHART = ROOT / "charts" / "podmortem"
CHART_README = CHART / "README.md"
CI_RUN = ROOT / ".ci" / "run"

SETUP_TRY = "python3 -m venv .venv && .venv/bin/pip install -e '.[demo]' && .venv/bin/podmortem demo"
SETUP_TEST = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"

QUICK_START = re.compile(r"<!-- quick-start:begin[^>]*-->\n```bash\n(.*?)```\n<!-- quick-start:end -->", re.S)


def flatten(node: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted paths of the leaves: a map is descended into unless empty; lists and scalars are leaves."""
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from flatten(value, path + ".")
        else:
            yield path


def table_keys(text: str) -> list[str]:
    """The first column of the values table: rows that start with a backquoted key."""
    return re.findall(r"^\| `([^`]+)` \|", text, re.M)


def test_flatten_stops_at_leaves_and_empty_containers() -> None:
    values = {"a": {"b": 1, "c": {}, "d": [], "e": {"f": [1, 2]}}, "g": ""}
    assert list(flatten(values)) == ["a.b", "a.c", "a.d", "a.e.f", "g"]


def test_chart_values_table_matches_values_yaml() -> None:
    leaves = list(flatten(yaml.safe_load((CHART / "values.yaml").read_text())))
    rows = table_keys(CHART_README.read_text())
    assert rows, "charts/podmortem/README.md has no values table"
    missing = [k for k in leaves if k not in rows]
    unknown = [k for k in rows if k not in leaves]
    duplicated = sorted({k for k in rows if rows.count(k) > 1})
    assert not missing, f"values.yaml keys missing from the chart README's table: {missing}"
    assert not unknown, f"chart README table rows that are not values.yaml leaves: {unknown}"
    assert not duplicated, f"keys listed twice in the chart README's table: {duplicated}"


def documents() -> list[Path]:
    return [README, CHART_README, *sorted((ROOT / "docs").glob("*.md"))]


def relative_links(text: str) -> Iterator[str]:
    """Targets of Markdown links outside fenced code, without their #fragment; external ones skipped."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if path:
            yield path


def test_docs_exist() -> None:
    assert len(documents()) > 2, "docs/ holds no pages"


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = [t for t in relative_links(doc.read_text()) if not (doc.parent / t).exists()]
    assert not broken, f"{doc.relative_to(ROOT)} links to missing files: {broken}"


def test_relative_links_found() -> None:
    """The link finder sees what it should, so that the test above cannot pass by finding nothing."""
    text = "[a](docs/a.md#x) [b](https://x.org/y) [c](#top) ![d](img.png)\n```\n[e](code.md)\n```\n"
    assert list(relative_links(text)) == ["docs/a.md", "img.png"]
    assert "docs/operator.md" in list(relative_links(README.read_text()))


@pytest.mark.parametrize("command", [SETUP_TRY, SETUP_TEST], ids=["try-it", "test-suite"])
def test_readme_setup_command_is_a_fenced_block(command: str) -> None:
    block = f"\n```bash\n{command}\n```\n"
    assert block in README.read_text(), f"README.md lacks the fenced block: {command}"


def test_ci_runs_setup_command_2_verbatim() -> None:
    lines = CI_RUN.read_text().splitlines()
    assert SETUP_TEST in lines, f".ci/run does not run README set-up command 2 verbatim: {SETUP_TEST}"


def test_quick_start_is_between_its_markers() -> None:
    text = README.read_text()
    assert text.count("<!-- quick-start:begin") == 1 and text.count("<!-- quick-start:end -->") == 1
    match = QUICK_START.search(text)
    assert match, "README.md: the quick start is not one bash block between its markers"
    block = match.group(1)
    for command in (
        "helm install podmortem charts/podmortem",
        "kubectl apply -f examples/trainingjob.yaml",
        "podmortem logs pointgroup-train -n default",
    ):
        assert command in block, f"the quick start lost: {command}"
    set_up, quick_start = text.index("## Set up"), text.index("## Quick start on a cluster")
    assert set_up < quick_start < match.start() < text.index("## Reading a report")
