"""Fixtures for the Helm chart tests: the loaded chart, and each scenario rendered once."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import helm_python as helm
import pytest

from . import _render, _story


@pytest.fixture(scope="session")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(_render.CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def _rendered_cache() -> dict[str, _render.Rendered]:
    return {}


@pytest.fixture(params=_render.SCENARIOS)
def scenario(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def rendered(
    chart: helm.Chart, scenario: str, _rendered_cache: dict[str, _render.Rendered]
) -> _render.Rendered:
    """The scenario's manifests, rendered once per session (rendering is the slow part)."""
    if scenario not in _rendered_cache:
        _rendered_cache[scenario] = _render.render(chart, _render.scenario_values(scenario))
    return _rendered_cache[scenario]


@pytest.fixture(scope="session")
def default_rendered(chart: helm.Chart) -> _render.Rendered:
    return _render.render(chart, {})


@pytest.fixture(scope="session")
def story_of(chart: helm.Chart, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], _story.Story]:
    """A scenario's full story (``_story``), run once per session: the pods-start test and the
    RBAC test read the same run."""
    pytest.importorskip("cryptography")
    from podmortem_demo.emulated.tls import make_pki

    pki = make_pki()
    done: dict[str, _story.Story] = {}

    def story_of(scenario: str) -> _story.Story:
        # "defaults" and ci/default-values.yaml ({}) render the same: one story serves both.
        key = json.dumps(_story.scenario_values(scenario), sort_keys=True)
        if key not in done:
            done[key] = _story.run(chart, pki, scenario, tmp_path_factory.mktemp(f"story-{scenario}"))
        return done[key]

    return story_of
