"""The chart's pods start and work: the operator and the agent, run with the command, args and env rendered.

For the default values and every ``ci/`` scenario, the operator Deployment's and the
agent DaemonSet's container is started as a process against the emulated API over
TLS, logging in with the service account files that pod would have mounted (see
``_pods``), and taken through the whole story of ``_story``: the operator creates a
TrainingJob's pod, follows logs, writes failure reports where each kind keeps them and
serves a stored log; the agent lists its node's pods and finds the watched ones. A
flag, env var or port that the chart and the CLI disagree on fails here.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from podmortem import quantity

from . import _render, _story


@pytest.mark.parametrize("scenario", ["defaults", *_render.SCENARIOS])
def test_the_rendered_pods_start_and_work(story_of: Callable[[str], _story.Story], scenario: str) -> None:
    story = story_of(scenario)
    components = {w["metadata"]["labels"]["app.kubernetes.io/component"] for w in story.rendered.workloads()}
    expected = ["trainingjob-pod", "trainingjob-report", *(f"foreign-report:{k}" for k in story.foreign),
                "bare-pod-report", "logs-served"]
    if "agent" in components:
        expected.append("agent-watched")
    logs = {c: out[-3000:] for c, out in story.outputs.items()}
    assert story.reached == expected, logs
    assert story.exit_codes == {c: 0 for c in components}, logs



@pytest.mark.parametrize("scenario", ["defaults", *_render.SCENARIOS])
def test_each_process_stays_within_its_memory(story_of: Callable[[str], _story.Story], scenario: str) -> None:
    """The peak RSS of each process through the story stays under the rendered limit, and under the
    request where the chart's defaults set it (the defaults are sized from these figures)."""
    story = story_of(scenario)
    for workload in story.rendered.workloads():
        component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        resources = workload["spec"]["template"]["spec"]["containers"][0].get("resources", {})
        peak = story.peak_rss[component]
        limit = resources.get("limits", {}).get("memory")
        if limit is not None:
            assert peak < quantity.parse_bytes(limit), (component, peak, limit)
        if scenario == "defaults":
            assert peak < quantity.parse_bytes(resources["requests"]["memory"]), (component, peak)
