"""The page renderer takes any stored report: a TZ that is no zone, fields of the wrong type."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from podmortem.render import page
from podmortem.reports.document import ReportDocument

from .test_page import stored_report


@pytest.mark.parametrize(
    "tz",
    ["Europe", "Etc", "America", "../../etc/passwd", "/etc/passwd", "x" * 10240, "Europe/" + "x" * 300,
     "Europe/Ber\x00lin", "", "UTC", "tzdata.zi", "zone1970.tab", "__init__.py", "Europe/", "a/b/c/d/e",
     None, 5, ["Europe/Berlin"]],
)
def test_a_tz_that_is_no_zone_is_none(tz: object) -> None:
    assert page.pod_zone(ReportDocument.parse({"pod": {"timeZone": tz}})) is None


def test_zones_still_read() -> None:
    for name in ("Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+1", "Asia/Kolkata"):
        zone = page.pod_zone(ReportDocument.parse({"pod": {"timeZone": name}}))
        assert zone is not None and zone.key == name


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc[:2]) if isinstance(doc, list) else []
    for key, value in items:
        out.append((*at, key))
        out.extend(_paths(value, (*at, key)))
    return out


def test_any_field_of_the_wrong_type_renders() -> None:
    """Every field of a real report, in turn, set to a value of another JSON type."""
    base = stored_report(
        job={"pods": 2, "rows": [{"rank": 0, "pod": "a", "logUrl": "/x"}], "rootCause": {"pod": "a"}},
        dropped=["the tasks"],
        errors=["prometheus: down"],
    )
    odd: list[Any] = ["x", 5, -1, 2**63, 1.5e308, None, True, [], {}, [1, "a"], {"a": 1}]
    for path in _paths(base):
        for value in odd:
            doc = copy.deepcopy(base)
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = value
            html = page.render(page.PageInput(title="ns/job", report=ReportDocument.parse(doc)))
            assert html.endswith("</body></html>"), (path, value)


def test_a_huge_title_is_cut() -> None:
    html = page.render(page.PageInput(title="t" * 100_000, report=ReportDocument.parse({})))
    # one word longer than the limit: cut inside it, the ellipsis within the limit
    assert "t" * (page.TITLE_MAX_CHARS - 1) + "…" in html and "t" * page.TITLE_MAX_CHARS not in html
