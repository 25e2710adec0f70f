"""The agent's pod listing against kmock: its node only, per-namespace RBAC, annotated foreign-kind owners.

kmock 0.8 ignores ``fieldSelector`` and has no RBAC; `NodeApi` adds both for
these tests (and records the list calls), so that a listing that forgot the
selector, or listed cluster-wide where only namespaces are granted, fails here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import kmock
import pytest
from tests.agent import trees

from podmortem.agent import pods
from podmortem.cgroups import cgroupfs
from podmortem.kube import owners
from podmortem.kube.label_selector import PodSelector, parse
from podmortem_demo.emulated.apiserver import KubernetesApi, write_kubeconfig

NODE = "node-1"
WATCH = "podmortem.io/watch"


@attrs.define(kw_only=True)
class NodeApi(KubernetesApi):
    """kmock with ``fieldSelector=spec.nodeName=`` honoured, namespace-scoped "RBAC", and failures."""

    #: (namespace or None, query) of every pod list call.
    pod_lists: list[tuple[str | None, dict[str, str]]] = attrs.field(factory=list, init=False)
    #: When set, lists outside these namespaces are forbidden, as with the chart's RoleBindings.
    granted: set[str] | None = attrs.field(default=None, init=False)
    failing: bool = attrs.field(default=False, init=False)

    async def _serve_list(self, request: kmock.Request) -> Any:
        if request.resource is not None and request.resource.plural == "pods":
            self.pod_lists.append((request.namespace, dict(request.params)))
        if self.failing:
            raise kmock.KubernetesError(status=503, reason="ServiceUnavailable", message="etcd is away")
        if self.granted is not None and request.namespace not in self.granted:
            raise kmock.KubernetesError(status=403, reason="Forbidden", message="cannot list pods here")
        payload = await super()._serve_list(request)
        selector = request.params.get("fieldSelector", "")
        key, _, value = selector.partition("=")
        if key == "spec.nodeName":
            value = value.lstrip("=")
            payload["items"] = [i for i in payload["items"] if (i.get("spec") or {}).get("nodeName") == value]
        elif selector:
            raise kmock.KubernetesError(status=400, reason="BadRequest", message=f"unsupported {selector}")
        return payload


@dataclass
class Cluster:
    api: NodeApi
    url: str
    kubeconfig: Path
    session: aiohttp.ClientSession

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(self.url + path, json=body) as response:
            # 201 Created, as the real API server answers a create.
            assert response.status == 201, await response.text()
            created: dict[str, Any] = await response.json()
            return created

    async def patch(self, path: str, body: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self.session.patch(self.url + path, json=body, headers=headers) as response:
            assert response.status == 200, await response.text()

    async def job(self, ns: str, name: str, *, annotated: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": ns}
        if annotated:
            meta["annotations"] = {WATCH: "true"}
        return await self.create(
            f"/apis/batch/v1/namespaces/{ns}/jobs",
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta},
        )

    async def pod(
        self,
        ns: str,
        name: str,
        *,
        node: str = NODE,
        owner: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None,
        uid: str | None = None,
    ) -> str:
        meta: dict[str, Any] = {"name": name, "namespace": ns}
        if owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ]
        if annotations:
            meta["annotations"] = annotations
        if uid:
            meta["uid"] = uid
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": node}}
        created = await self.create(f"/api/v1/namespaces/{ns}/pods", body)
        return str(created["metadata"]["uid"])


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    api = NodeApi()
    api.resources["batch/v1/jobs"] = kmock.ResourceInfo(kind="Job", namespaced=True)
    api.resources["kubeflow.org/v1/pytorchjobs"] = kmock.ResourceInfo(kind="PyTorchJob", namespaced=True)
    api.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", namespaced=True)
    async with api, kmock.Server(api) as server, aiohttp.ClientSession() as session:
        url = str(server.url).rstrip("/")
        yield Cluster(api, url, write_kubeconfig(tmp_path / "kubeconfig", server=url), session)


def _source(cluster: Cluster, **kwargs: Any) -> pods.KubernetesPods:
    defaults: dict[str, Any] = {
        "node_name": NODE,
        "hierarchy": None,
        "watch_annotation": WATCH,
        "refresh_s": 1e-9,  # every call lists again
        "foreign_kinds": owners.DEFAULT_FOREIGN_KINDS,
        "kubeconfig": cluster.kubeconfig,
    }
    return pods.KubernetesPods(**{**defaults, **kwargs})


async def test_watched_pods_on_this_node_by_annotation_training_job_and_annotated_owner(
    cluster: Cluster, tmp_path: Path
) -> None:
    watched_job = await cluster.job("ml", "train-a", annotated=True)
    plain_job = await cluster.job("ml", "etl", annotated=False)
    ptj = await cluster.create(
        "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "pointgroup", "namespace": "ml", "annotations": {WATCH: "true"}},
        },
    )
    tj = {
        "apiVersion": "podmortem.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "tj", "uid": "tj-uid"},
    }
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "uid": "rs-uid"}}
    # A pod whose owner reference names train-a but an older uid: that owner is gone.
    stale = {**watched_job, "metadata": {**watched_job["metadata"], "uid": "an-older-train-a"}}

    expected = {
        await cluster.pod("ml", "annotated", annotations={WATCH: "true"}): "annotated",
        await cluster.pod("ml", "tj-0", owner=tj): "tj-0",
        await cluster.pod("ml", "train-a-0", owner=watched_job): "train-a-0",
        await cluster.pod("ml", "train-a-1", owner=watched_job): "train-a-1",
        await cluster.pod("ml", "pointgroup-master-0", owner=ptj): "pointgroup-master-0",
    }
    await cluster.pod("ml", "etl-0", owner=plain_job)
    await cluster.pod("ml", "stale-0", owner=stale)
    await cluster.pod("ml", "web-0", owner=rs)
    await cluster.pod("ml", "opted-out", annotations={WATCH: "false"})
    await cluster.pod("ml", "elsewhere", node="node-2", annotations={WATCH: "true"})
    await cluster.pod("ml", "train-a-2", node="node-2", owner=watched_job)

    # The cgroup of one pod exists on this (fake) host: its path is found by the pod's uid.
    job_pod_uid = next(uid for uid, name in expected.items() if name == "train-a-0")
    trees.make_v1_root(tmp_path / "cg")
    trees.make_v1_cgroup(tmp_path / "cg", f"/kubepods/burstable/pod{job_pod_uid}")
    source = _source(cluster, hierarchy=cgroupfs.detect(tmp_path / "cg"))
    try:
        found = await source.current()
    finally:
        await source.close()
    assert {uid: pod.name for uid, pod in found.items()} == expected
    assert all(pod.namespace == "ml" for pod in found.values())
    assert found[job_pod_uid].cgroup_path == f"/kubepods/burstable/pod{job_pod_uid}"
    assert source.last_error is None
    assert cluster.api.pod_lists == [(None, {"fieldSelector": f"spec.nodeName={NODE}"})]


async def test_owner_answers_are_cached_and_refreshed(cluster: Cluster) -> None:
    job = await cluster.job("ml", "train-b", annotated=False)
    uids = [await cluster.pod("ml", f"train-b-{i}", owner=job) for i in range(3)]
    now = [0.0]
    source = _source(cluster, owner_cache_s=60.0, clock=lambda: now[0])
    try:
        assert await source.current() == {}
        resolver = source.owner_resolver
        assert resolver is not None and resolver.fetches == 1  # three pods, one job: one GET
        # Annotated later: within the cache time the old answer stands, after it the new one.
        await cluster.patch(
            "/apis/batch/v1/namespaces/ml/jobs/train-b", {"metadata": {"annotations": {WATCH: "true"}}}
        )
        now[0] = 30.0
        assert await source.current() == {} and resolver.fetches == 1
        now[0] = 61.0
        assert set(await source.current()) == set(uids) and resolver.fetches == 2
    finally:
        await source.close()


def _ref(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}


async def test_an_annotation_further_up_the_owner_chain_counts(cluster: Cluster) -> None:
    """pod → Job → annotated PyTorchJob (both configured kinds); a loop in the chain ends the walk."""
    top = await cluster.create(
        "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "top", "namespace": "ml", "annotations": {WATCH: "true"}},
        },
    )
    middle = await cluster.create(
        "/apis/batch/v1/namespaces/ml/jobs",
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "mid", "namespace": "ml",
                                                              "ownerReferences": [_ref(top)]}},
    )
    watched = await cluster.pod("ml", "mid-0", owner=middle)
    # Two plain Jobs that own each other: nothing up there is annotated, and the walk must end.
    a = await cluster.job("ml", "loop-a", annotated=False)
    b = await cluster.create(
        "/apis/batch/v1/namespaces/ml/jobs",
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "loop-b", "namespace": "ml",
                                                              "ownerReferences": [_ref(a)]}},
    )
    loop_a = "/apis/batch/v1/namespaces/ml/jobs/loop-a"
    await cluster.patch(loop_a, {"metadata": {"ownerReferences": [_ref(b)]}})
    await cluster.pod("ml", "loop-0", owner=b)
    source = _source(cluster)
    try:
        found = await source.current()
    finally:
        await source.close()
    assert set(found) == {watched}
    # mid, top; loop-b, loop-a, and no second round of the loop
    assert source.owner_resolver is not None and source.owner_resolver.fetches == 4


async def test_namespaces_are_listed_one_by_one_where_rbac_allows(cluster: Cluster) -> None:
    cluster.api.granted = {"team-a", "team-b"}
    a = await cluster.pod("team-a", "a", annotations={WATCH: "true"})
    b = await cluster.pod("team-b", "b", annotations={WATCH: "true"})
    await cluster.pod("team-c", "c", annotations={WATCH: "true"})
    source = _source(cluster, namespaces=("team-a", "team-b"))
    try:
        assert set(await source.current()) == {a, b}
    finally:
        await source.close()
    selector = {"fieldSelector": f"spec.nodeName={NODE}"}
    assert cluster.api.pod_lists == [("team-a", selector), ("team-b", selector)]
    assert source.last_error is None


async def test_a_failing_api_keeps_the_last_pods_and_says_why(cluster: Cluster) -> None:
    uid = await cluster.pod("ml", "annotated", annotations={WATCH: "true"})
    source = _source(cluster)
    try:
        assert set(await source.current()) == {uid}
        cluster.api.failing = True
        assert set(await source.current()) == {uid}
        assert source.last_error is not None and "503" in source.last_error and NODE in source.last_error
        cluster.api.failing = False
        assert set(await source.current()) == {uid} and source.last_error is None
    finally:
        await source.close()


async def test_an_unknown_kind_is_matched_by_a_plural_guess(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="podmortem.kube.owners")
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "uid": "w-uid"}}
    await cluster.pod("ml", "w-0", owner=widget)
    source = _source(cluster, foreign_kinds=(owners.ForeignKind("example.com", "widgets", "v1"),))
    try:
        assert await source.current() == {}  # guessed Widget → widgets; the object itself is absent
    finally:
        await source.close()
    assert any("API discovery failed" in r.getMessage() for r in caplog.records)
    assert source.owner_resolver is not None and source.owner_resolver.fetches == 1


def test_foreign_kinds_from_the_chart_and_the_command_line() -> None:
    chart = (
        '[{"group":"batch","resource":"jobs","version":"v1"},'
        '{"group":"kubeflow.org","resource":"pytorchjobs","version":""}]'
    )
    assert owners.parse_foreign_kinds(chart) == (
        owners.ForeignKind("batch", "jobs", "v1"),
        owners.ForeignKind("kubeflow.org", "pytorchjobs", ""),
    )
    assert owners.parse_foreign_kinds("[]") == ()
    assert owners.parse_foreign_kinds(None) == owners.parse_foreign_kinds("") == owners.DEFAULT_FOREIGN_KINDS
    assert owners.parse_foreign_kinds("jobs.batch, kubeflow.org/v1/pytorchjobs") == (
        owners.ForeignKind("batch", "jobs", ""),
        owners.ForeignKind("kubeflow.org", "pytorchjobs", "v1"),
    )
    for bad, words in (
        ("[{", "not valid JSON"),
        ('{"group": "batch"}', "RESOURCE.GROUP"),
        ('[{"group": "batch"}]', "'resource' is required"),
        ('["jobs"]', "a list of objects with string group, version and resource"),
        ("jobs", "RESOURCE.GROUP"),
    ):
        with pytest.raises(ValueError, match=words):
            owners.parse_foreign_kinds(bad)


def test_owner_reference_parts() -> None:
    assert owners.split_api_version("batch/v1") == ("batch", "v1")
    assert owners.split_api_version("v1") == ("", "v1")
    assert owners.guess_kind_matches("Job", "jobs")
    assert owners.guess_kind_matches("PyTorchJob", "pytorchjobs")
    assert owners.guess_kind_matches("Policy", "policies")
    assert not owners.guess_kind_matches("Job", "cronjobs")


async def test_every_pod_of_the_node_is_kept_for_oom_events_marked_or_not(cluster: Cluster) -> None:
    """With ``node_pod_labels`` (``--oom-events``) the listing keeps every pod of this node, not only the
    sampled ones, with the allowed labels alone; a failed listing keeps the last ones."""
    plain = await cluster.pod("web", "uwsgi-0")
    marked = await cluster.pod("ml", "trainer-0", annotations={WATCH: "true"})
    await cluster.pod("web", "elsewhere", node="node-2")
    await cluster.patch("/api/v1/namespaces/web/pods/uwsgi-0",
                        {"metadata": {"labels": {"app": "uwsgi", "pod-template-hash": "7c9d"}}})
    source = _source(cluster, node_pod_labels=("app",))
    plain_only = _source(cluster)
    try:
        assert set(await source.current()) == {marked}  # what is sampled does not change
        assert set(source.node_pods) == {plain, marked}
        assert source.node_pods[plain].labels == {"app": "uwsgi"}
        assert (source.node_pods[plain].namespace, source.node_pods[plain].name) == ("web", "uwsgi-0")
        cluster.api.failing = True
        await source.current()
        assert set(source.node_pods) == {plain, marked}
        await plain_only.current()
        assert plain_only.node_pods == {}
    finally:
        await source.close()
        await plain_only.close()


async def test_pods_the_follow_selector_picks_are_sampled_annotated_or_not(cluster: Cluster) -> None:
    """The operator's follow selector, given to the agent: the pods it reports by label get samples."""
    picked = await cluster.pod("ml", "trainer-0")
    await cluster.pod("ml", "web-0")
    await cluster.pod("other", "trainer-1")
    await cluster.pod("ml", "trainer-2", node="node-2")
    for ns, name in (("ml", "trainer-0"), ("other", "trainer-1"), ("ml", "trainer-2")):
        labels = {"metadata": {"labels": {"app": "trainer"}}}
        await cluster.patch(f"/api/v1/namespaces/{ns}/pods/{name}", labels)
    annotated = await cluster.pod("ml", "annotated", annotations={WATCH: "true"})
    follow = PodSelector(selector=parse("app=trainer"), namespaces=("ml",))
    source, without = _source(cluster, follow_selector=follow), _source(cluster)
    try:
        assert set(await source.current()) == {picked, annotated}
        assert set(await without.current()) == {annotated}
    finally:
        await source.close()
        await without.close()
