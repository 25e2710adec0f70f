"""The Events podmortem posts, as the real API server validates, stores and shows them.

Every Event goes through ``podmortem.kube.api.Kube.post_event`` (a core/v1 Event, no ``eventTime``, its
message cut at a word within ``EVENT_MESSAGE_MAX_BYTES`` = 1024 bytes). Here it is posted to the real
server with the operator's own ServiceAccount token (the chart's ClusterRole grants ``events create``),
and the operator run from the chart (``_operator``) posts one of its own (a bad option on a TrainingJob).
What is checked is what a person sees: ``kubectl get events``, ``kubectl describe``, and the same object
through events.k8s.io/v1 (``note``, ``regarding``), and what the real validation
(pkg/apis/core/validation/events.go, ``ValidateEventCreate``) accepts and refuses.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.chart import _render
from tests.cli import entrypoints as ep
from tests.controlplane import _operator
from tests.controlplane.cluster import ControlPlane
from tests.logs.stored import run_sync

from podmortem.kube.api import COMPONENT, connect

SCENARIO = "minimal-agent-off"
#: The size the issue behind the cap saw: an annotation quoted whole, 360,317 characters.
HUGE = "podmortem.io/containers='" + "trainer, " * 40_035 + "' is invalid"


@dataclass
class Setup:
    plane: ControlPlane
    release: _operator.Release
    namespace: str
    operator: ep.Process
    #: A kubeconfig holding a token of the operator's ServiceAccount.
    operator_kubeconfig: Path


@pytest.fixture(scope="module")
def setup(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("events-real")
    suffix = uuid.uuid4().hex[:5]
    namespace, release_ns = f"events-{suffix}", f"podmortem-{suffix}"
    control_plane.create_namespace(namespace)
    values = _render.scenario_values(SCENARIO)
    values["operator"] = {**values["operator"], **_operator.free_ports()}
    values["watchNamespaces"] = [namespace]
    try:
        with _operator.installed(control_plane, tmp, name=_operator.release_name("ev"),
                                 namespace=release_ns, values=values) as release, \
                _operator.operator(control_plane, release, tmp) as (process, _):
            kubeconfig = control_plane.service_account_kubeconfig(
                tmp / "operator.kubeconfig", namespace=release_ns, name=release.operator_service_account)
            yield Setup(control_plane, release, namespace, process, kubeconfig)
    finally:
        control_plane.run("kubectl", "delete", "namespace", namespace, "--wait=false", check=False)


def post(setup: Setup, involved: dict[str, Any], *, message: str, reason: str = "OOMKilled") -> None:
    """``Kube.post_event`` as the operator's ServiceAccount (its RBAC is the chart's)."""
    async def go() -> None:
        kube = await connect(setup.operator_kubeconfig)
        try:
            await kube.post_event(involved=involved, type_="Warning", reason=reason, message=message)
        finally:
            await kube.close()
    run_sync(go())


def events_of(plane: ControlPlane, namespace: str, name: str, *, api: str = "core") -> list[dict[str, Any]]:
    """podmortem's Events about ``name`` as ``kubectl get events`` lists them (core/v1), or through
    events.k8s.io/v1 (the scheduler's own about the same pod left out)."""
    if api == "core":
        out = plane.kubectl("get", "events", "-n", namespace, "-o", "json",
                            f"--field-selector=involvedObject.name={name}")
        items = json.loads(out)["items"]
        return [e for e in items if e.get("reportingComponent") == COMPONENT]
    path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events?fieldSelector=regarding.name={name}"
    body = plane.get(path)
    assert body is not None
    return [e for e in body["items"] if e.get("reportingController") == COMPONENT]


def a_pod(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    name = f"trainer-{uuid.uuid4().hex[:5]}"
    plane.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                 "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    pod = plane.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    assert pod is not None
    return pod


def test_a_huge_message_is_stored_cut_within_1024_bytes(setup: Setup) -> None:
    """The operator's Event with a 360 KB message is accepted, and stored cut at a word within 1024 UTF-8
    bytes; the same object read through events.k8s.io/v1 has it as its ``note``."""
    pod = a_pod(setup.plane, setup.namespace)
    name = pod["metadata"]["name"]
    post(setup, pod, message=HUGE)
    (event,) = events_of(setup.plane, setup.namespace, name)
    message = event["message"]
    assert message.endswith("…") and 1024 - 32 < len(message.encode()) <= 1024, len(message.encode())
    assert HUGE.startswith(message.removesuffix("…"))
    (new,) = events_of(setup.plane, setup.namespace, name, api="events.k8s.io")
    assert new["note"] == message

    # Multi-byte text: the cap is bytes (the API's limits are Go's len), not characters.
    wide = "ошибка памяти " * 200
    post(setup, pod, message=wide, reason="Cyrillic")
    (cyrillic,) = [e for e in events_of(setup.plane, setup.namespace, name) if e["reason"] == "Cyrillic"]
    assert cyrillic["message"].endswith("…") and len(cyrillic["message"].encode()) <= 1024
    assert len(cyrillic["message"]) < 600  # two bytes a letter: a cut by characters would keep 1,024


def test_what_the_operator_posts_reads_back_as_intended(setup: Setup) -> None:
    """Every field the operator sets, as kubectl and events.k8s.io/v1 read it back."""
    pod = a_pod(setup.plane, setup.namespace)
    meta = pod["metadata"]
    post(setup, pod, message="container main was OOM-killed at 1.0 GiB (limit 1 GiB)")
    (event,) = events_of(setup.plane, setup.namespace, meta["name"])
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                       "namespace": setup.namespace, "uid": meta["uid"]}
    assert (event["type"], event["reason"]) == ("Warning", "OOMKilled")
    assert event["source"] == {"component": COMPONENT}
    assert event["reportingComponent"] == COMPONENT
    assert event["count"] == 1 and event["firstTimestamp"] == event["lastTimestamp"]
    assert event.get("reportingInstance", "") == "" and event.get("eventTime") is None
    (new,) = events_of(setup.plane, setup.namespace, meta["name"], api="events.k8s.io")
    assert new["regarding"] == event["involvedObject"]
    assert (new["type"], new["reason"], new["note"]) == ("Warning", "OOMKilled", event["message"])
    assert new["reportingController"] == COMPONENT
    assert new["deprecatedCount"] == 1 and new["deprecatedSource"] == {"component": COMPONENT}
    assert "series" not in new

    described = setup.plane.kubectl("describe", "pod", meta["name"], "-n", setup.namespace)
    events = described[described.index("Events:"):]
    assert "Warning  OOMKilled" in events and COMPONENT in events, events
    assert "container main was OOM-killed at 1.0 GiB (limit 1 GiB)" in events, events


def test_a_repeat_is_a_second_event_not_a_count(setup: Setup) -> None:
    """The real server merges nothing: dedup and ``series`` are a client's (client-go's EventCorrelator),
    and podmortem posts each Event under a new name, so a repeat is a second object, count 1 each."""
    pod = a_pod(setup.plane, setup.namespace)
    for _ in range(2):
        post(setup, pod, message="the same words twice")
    events = events_of(setup.plane, setup.namespace, pod["metadata"]["name"])
    assert len(events) == 2 and len({e["metadata"]["name"] for e in events}) == 2
    assert [e["count"] for e in events] == [1, 1]
    table = setup.plane.kubectl("get", "events", "-n", setup.namespace,
                                f"--field-selector=involvedObject.name={pod['metadata']['name']}")
    assert table.count("the same words twice") == 2, table


def test_the_operators_invalid_option_event_is_on_the_pod(setup: Setup) -> None:
    """The operator process itself: a followed pod (``podmortem.io/watch``) with a bad option gets a
    Warning InvalidOption Event about it (its uid), which ``kubectl describe pod`` shows."""
    name = f"annotated-{uuid.uuid4().hex[:5]}"
    setup.plane.apply({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "namespace": setup.namespace,
                                    "annotations": {"podmortem.io/watch": "true",
                                                    "podmortem.io/log-retention": "forever"}},
                       "spec": {"containers": [{"name": "trainer", "image": "t:1"}]}})
    pod = setup.plane.get(f"/api/v1/namespaces/{setup.namespace}/pods/{name}")
    assert pod is not None

    def invalid_option() -> dict[str, Any] | None:
        found = [e for e in events_of(setup.plane, setup.namespace, name) if e["reason"] == "InvalidOption"]
        return found[0] if found else None

    event = setup.plane.wait(invalid_option, timeout=120,
                             what=f"the InvalidOption Event (operator log: {setup.operator.log})")
    assert event["type"] == "Warning"
    assert "podmortem.io/log-retention='forever' is invalid" in event["message"], event["message"]
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": name,
                                       "namespace": setup.namespace, "uid": pod["metadata"]["uid"]}
    described = setup.plane.kubectl("describe", "pod", name, "-n", setup.namespace)
    assert "Warning  InvalidOption" in described and "log-retention" in described, described


# -- the real server's own limits, which the cap is measured against ---------------------------------


def _core_event(namespace: str, involved: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"limits.{uuid.uuid4().hex[:10]}", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": involved["metadata"]["name"],
                               "namespace": namespace, "uid": involved["metadata"]["uid"]},
            "type": "Warning", "reason": "Limits", "message": "m", "source": {"component": "t"}, **fields}


def test_the_real_limits_core_v1_has_none_events_k8s_io_has_1024(setup: Setup) -> None:
    """core/v1 without ``eventTime`` (what podmortem posts) validates no length of message or reason;
    events.k8s.io/v1 (and core/v1 with ``eventTime``) refuse a note over 1024 bytes and a reason over 128.
    So the cap is podmortem's choice, matched to the newer API's limit, not a requirement of the one it
    uses; and an Event's namespace must be its object's."""
    plane, ns = setup.plane, setup.namespace
    pod = a_pod(plane, ns)
    core = f"/api/v1/namespaces/{ns}/events"
    status, body = plane.request("POST", core, _core_event(ns, pod, message="x" * 4096, reason="R" * 200))
    assert status == 201, body
    assert len(body["message"]) == 4096

    now = "2026-01-01T00:00:00.000000Z"
    with_time = {"eventTime": now, "reportingComponent": "podmortem-test", "reportingInstance": "t",
                 "action": "Check"}
    status, body = plane.request("POST", core, _core_event(ns, pod, message="x" * 1025, **with_time))
    assert status == 422 and "can have at most 1024 characters" in body["message"], body

    def new_event(note: str, reason: str = "Limits") -> dict[str, Any]:
        return {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": f"limits.{uuid.uuid4().hex[:10]}", "namespace": ns},
                "eventTime": now, "reportingController": "podmortem.io/test", "reportingInstance": "t",
                "action": "Check", "reason": reason, "type": "Warning", "note": note,
                "regarding": {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                              "namespace": ns, "uid": pod["metadata"]["uid"]}}

    events = f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
    assert plane.request("POST", events, new_event("é" * 512))[0] == 201  # 1024 bytes
    status, body = plane.request("POST", events, new_event("é" * 512 + "x"))  # 1025 bytes, 513 characters
    # The error names the internal field, ``message``, though the request said ``note``.
    assert status == 422 and "can have at most 1024 characters" in body["message"], body
    status, body = plane.request("POST", events, new_event("n", reason="R" * 129))
    assert status == 422 and "reason" in body["message"], body

    elsewhere = _core_event(ns, pod)
    elsewhere["involvedObject"]["namespace"] = "default"
    status, body = plane.request("POST", core, elsewhere)
    assert status == 422 and "does not match event.namespace" in body["message"], body
