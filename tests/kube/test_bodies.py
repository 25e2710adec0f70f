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
