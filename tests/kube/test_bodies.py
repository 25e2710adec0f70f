"""The body views read any JSON without raising, and read the fields a real pod has."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from podmortem.kube.bodies import Body, PodBody

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
#: Bodies whose known fields hold any JSON value.
bodies = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries({}, optional={
            k: json_values for k in ("name", "namespace", "uid", "labels", "annotations", "ownerReferences",
                                      "deletionTimestamp", "resourceVersion")
        }) | json_values,
        "spec": st.fixed_dictionaries({}, optional={
            k: json_values for k in ("nodeName", "containers", "initContainers")
        }) | json_values,
        "status": st.fixed_dictionaries({}, optional={
            k: json_values
            for k in ("phase", "podIP", "containerStatuses", "initContainerStatuses", "conditions")
        }) | json_values,
    },
)


@given(bodies | json_values)
def test_any_body_reads_without_raising_and_with_the_declared_types(raw: Any) -> None:
    pod = PodBody(raw)
    texts = (pod.name, pod.namespace, pod.uid, pod.node_name, pod.phase, pod.pod_ip)
    assert all(isinstance(v, str) for v in texts)
    tags = {**pod.labels, **pod.annotations}
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items())
    for items in (pod.owner_references, pod.containers, pod.init_containers, pod.container_statuses,
                  pod.init_container_statuses, pod.conditions):
        assert all(isinstance(item, dict) for item in items)
    assert all(isinstance(n, str) and n for n in pod.container_names)
    assert isinstance(pod.being_deleted, bool) and isinstance(pod.has_started_containers(), bool)
    assert pod.resource_version is None or isinstance(pod.resource_version, str)


def test_a_real_pod_reads_as_it_is() -> None:
    raw = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u", "labels": {"a": "b", "n": 5},
                     "annotations": {"podmortem.io/watch": "true"}, "resourceVersion": "42",
                     "ownerReferences": [{"kind": "Job", "name": "j", "uid": "o"}, "junk"]},
        "spec": {"nodeName": "n1", "containers": [{"name": "trainer"}, {"image": "x"}],
                 "initContainers": [{"name": "sidecar", "restartPolicy": "Always"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1",
                   "containerStatuses": [{"name": "trainer", "state": {"running": {}}}]},
    }
    pod = PodBody(raw)
    assert (pod.name, pod.namespace, pod.uid, pod.node_name, pod.phase, pod.pod_ip) == (
        "p", "ml", "u", "n1", "Running", "10.0.0.1")
    assert pod.labels == {"a": "b"} and pod.annotations == {"podmortem.io/watch": "true"}
    assert pod.owner_references == [{"kind": "Job", "name": "j", "uid": "o"}]
    assert pod.container_names == ["trainer"] and len(pod.init_containers) == 1
    assert pod.has_started_containers() and not pod.being_deleted and pod.resource_version == "42"
    assert Body(None).name == "" and Body({"metadata": []}).labels == {}


statuses = st.lists(
    st.fixed_dictionaries({}, optional={
        "name": json_values, "containerID": json_values, "restartCount": json_values,
        "state": st.fixed_dictionaries(
            {}, optional={k: json_values for k in ("running", "terminated", "waiting")}
        ) | json_values,
        "lastState": st.fixed_dictionaries({}, optional={"terminated": json_values}) | json_values,
    }) | json_values,
    max_size=3,
)


@given(statuses)
def test_any_container_status_reads_without_raising_and_with_the_declared_types(items: Any) -> None:
    pod = PodBody({"status": {"containerStatuses": items, "initContainerStatuses": items,
                              "ephemeralContainerStatuses": items}})
    for cs in (*pod.statuses, *pod.init_statuses, *pod.ephemeral_statuses):
        assert all(isinstance(v, str) for v in (cs.name, cs.container_id, cs.running_since))
        assert isinstance(cs.restart_count, int) and cs.current in ("running", "terminated", "waiting")
        for term in cs.terminations():
            assert all(isinstance(v, str) for v in (term.reason, term.message, term.container_id,
                                                     term.started_at, term.finished_at))
            for number in (term.exit_code, term.signal):
                assert number is None or (isinstance(number, int) and not isinstance(number, bool))


def test_a_restarted_containers_status_reads_as_it_is() -> None:
    raw = {"status": {"containerStatuses": [
        {"name": "trainer", "containerID": "containerd://b", "restartCount": 1,
         "state": {"running": {"startedAt": "2026-03-01T12:00:09Z"}},
         "lastState": {"terminated": {
             "exitCode": 137, "reason": "OOMKilled", "containerID": "containerd://a", "message": "m",
             "signal": 9,
             "startedAt": "2026-03-01T11:00:00Z", "finishedAt": "2026-03-01T12:00:00Z"}}},
        {"name": "odd", "restartCount": True, "state": {"terminated": {"exitCode": "137", "reason": 5}},
         "lastState": {"terminated": []}},
    ]}}
    trainer, odd = PodBody(raw).statuses
    assert (trainer.name, trainer.container_id, trainer.restart_count, trainer.current) == (
        "trainer", "containerd://b", 1, "running")
    assert trainer.running_since == "2026-03-01T12:00:09Z"
    assert trainer.terminated is None and trainer.last_terminated is not None
    last = trainer.last_terminated
    assert (last.exit_code, last.signal, last.reason, last.container_id, last.message) == (
        137, 9, "OOMKilled", "containerd://a", "m")
    assert (last.started_at, last.finished_at) == ("2026-03-01T11:00:00Z", "2026-03-01T12:00:00Z")
    assert [t.container_id for t in trainer.terminations()] == ["containerd://a"]
    # what the API never sends is read as absent, not passed on
    assert odd.restart_count == 0 and odd.current == "terminated" and odd.last_terminated is None
    assert odd.terminated is not None and odd.terminated.exit_code is None and odd.terminated.reason == ""
