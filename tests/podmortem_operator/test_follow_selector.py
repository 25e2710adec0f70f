"""The follow selector: pods picked by namespace and labels are followed and reported as if annotated."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from podmortem.kube.api import Kube
from podmortem.kube.label_selector import PodSelector, parse
from podmortem.operator.reporting.reporter import Reporter
from podmortem.operator.settings import OperatorSettings
from podmortem.operator.status import StatusWriter
from podmortem.operator.targets import Targets
from podmortem.operator.watching.early_warning import EarlyWarning
from podmortem.operator.watching.handlers import maybe_followed, pod_filter
from podmortem.operator.watching.service import OperatorService
from podmortem_demo.harness import Harness, harness, kill, run_pod


class FakeKube:
    """What `resolve` may ask of the API: nothing is there; Events are kept."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    async def get(self, path: str) -> dict[str, Any] | None:
        return None

    async def post_event(self, *, involved: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


def service(follow: PodSelector | None) -> tuple[OperatorService, FakeKube]:
    fake = FakeKube()
    kube = cast(Kube, fake)
    targets = Targets()
    status = StatusWriter(kube=kube)
    svc = OperatorService(
        kube=kube,
        settings=OperatorSettings(follow_selector=follow),
        following=None,
        reporter=cast(Reporter, object()),  # resolve reports nothing
        status=status,
        targets=targets,
        early_warning=EarlyWarning(kube=kube, status=status, targets=targets, log_url=""),
    )
    return svc, fake


def pod(name: str, *, namespace: str = "team-a", labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                            "labels": labels or {}, "annotations": annotations or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "trainer"}]}}


SELECTED = PodSelector(selector=parse("app=trainer,tier in (gpu,tpu)"), namespaces=("team-a",))


async def test_a_matching_pod_is_followed_as_a_bare_pod_with_default_options() -> None:
    svc, _ = service(SELECTED)
    known = await svc.resolve(pod("p", labels={"app": "trainer", "tier": "gpu"}))
    assert known is not None
    assert (known.target.role, known.target.name, known.target.namespace) == ("pod", "p", "team-a")
    assert known.target.options == svc.defaults


async def test_a_pod_that_does_not_match_is_not_followed() -> None:
    svc, _ = service(SELECTED)
    assert await svc.resolve(pod("p", labels={"app": "trainer", "tier": "cpu"})) is None
    assert await svc.resolve(pod("q", labels={"app": "web"})) is None


async def test_a_matching_pod_in_another_namespace_is_not_followed() -> None:
    svc, _ = service(SELECTED)
    assert await svc.resolve(pod("p", namespace="team-b", labels={"app": "trainer", "tier": "gpu"})) is None


async def test_no_namespaces_means_every_watched_one() -> None:
    svc, _ = service(PodSelector(selector=parse("app=trainer")))
    assert await svc.resolve(pod("p", namespace="anywhere", labels={"app": "trainer"})) is not None


async def test_without_the_setting_a_labelled_pod_is_not_followed() -> None:
    svc, _ = service(None)
    assert await svc.resolve(pod("p", labels={"app": "trainer", "tier": "gpu"})) is None


async def test_the_pods_own_annotations_still_apply_and_a_bad_one_is_told() -> None:
    svc, fake = service(SELECTED)
    annotations = {"podmortem.io/follow-logs": "false", "podmortem.io/memory-warning-ratio": "7"}
    known = await svc.resolve(pod("p", labels={"app": "trainer", "tier": "tpu"}, annotations=annotations))
    assert known is not None
    assert known.target.options.follow_logs is False
    assert known.target.options.memory_warning_ratio == svc.defaults.memory_warning_ratio
    assert [reason for reason, _ in fake.events] == ["InvalidOption"]


def test_the_pod_watch_lets_selected_pods_through_and_only_those() -> None:
    accept = pod_filter(OperatorSettings(follow_selector=SELECTED))
    assert accept(pod("p", labels={"app": "trainer", "tier": "gpu"}))
    assert not accept(pod("p", namespace="team-b", labels={"app": "trainer", "tier": "gpu"}))
    assert not accept(pod("p", labels={"app": "trainer"}))
    assert accept(pod("p", annotations={"podmortem.io/watch": "true"}))  # the opted-in still come
    assert pod_filter(OperatorSettings()) is maybe_followed


# --- end to end in the emulated cluster ------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with harness(tmp_path_factory.mktemp("follow-selector")) as h:
        h.add_agent_pod()
        follow = PodSelector(selector=parse("app=trainer"), namespaces=("default",))
        h.start_operator(h.settings(log_http_auth=False, follow_selector=follow))
        yield h
        assert h.operator_error is None, h.operator_error


def labelled_pod(h: Harness, name: str, labels: dict[str, str]) -> None:
    h.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "trainer", "image": "x"}]},
    })


def report_of(h: Harness, name: str) -> str | None:
    meta = (h.stored("v1/pods", "default", name) or {}).get("metadata", {})
    return cast("str | None", (meta.get("annotations") or {}).get("podmortem.io/failure-report"))


def test_an_unannotated_pod_with_matching_labels_is_reported_and_others_are_not(cluster: Harness,
                                                                                  tmp_path: Path) -> None:
    h = cluster
    labelled_pod(h, "picked", {"app": "trainer"})
    labelled_pod(h, "left-alone", {"app": "web"})
    for name in ("picked", "left-alone"):
        run_pod(h, name=name)
        kill(h, name=name)
    report = h.wait(lambda: report_of(h, "picked"), what="the report annotation of the selected pod")
    assert '"exitCode":137' in report.replace(" ", "")
    h.wait(lambda: next((e for e in h.events_for("picked") if e["type"] == "Warning"), None),
           what="the report's Event on the selected pod")
    assert report_of(h, "left-alone") is None
    assert h.events_for("left-alone") == []
