"""The emulated API (``podmortem_demo.emulated``) and kube-apiserver v1.36.3 answer the same requests alike.

Each check below is one behaviour the emulation models, run with the same client code (urllib, raw
HTTP) against both: the ``cluster`` fixture gives the emulated cluster (plain HTTP) or the real control
plane (TLS, the admin's client certificate). ``tests/demo/test_emulated_api.py`` runs the same checks
against the emulation alone, so they run where the control plane is not built.

"Forgetting history" is, on the real server, etcd compacted at its current revision and the API server
restarted (its watch cache starts again at the newest revision); on the emulation,
``KubernetesApi.forget_history``.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.controlplane.cluster import ControlPlane

from podmortem_demo.harness import harness

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
#: Watches are checked on pods no scheduler takes: nothing but the test changes them. (Leases change
#: all the time in a real cluster, nodes' heartbeats, and each change moves the BOOKMARKs.)
PODS = "/api/v1/namespaces/{ns}/pods"
MERGE = "application/merge-patch+json"


@dataclass
class Cluster:
    """One API server as the checks see it: raw requests, whole watches, and a way to lose history."""

    kind: str
    url: str
    context: ssl.SSLContext | None
    namespaces: tuple[str, str]
    forget_history: Callable[[], None]

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json", timeout: float = 30) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json", "Content-Type": content_type}
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=timeout) as resp:
                raw, status = resp.read(), int(resp.status)
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), int(exc.code)
        return status, json.loads(raw) if raw else None

    def watch(self, path: str, **query: str) -> tuple[int, list[dict[str, Any]], float]:
        """A whole watch (it must end: give ``timeoutSeconds``): its HTTP status, events and duration."""
        url = f"{self.url}{path}?watch=1&" + "&".join(f"{k}={v}" for k, v in query.items())
        started = time.monotonic()
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=60) as resp:
                raw, status = resp.read(), int(resp.status)
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), int(exc.code)
        took = time.monotonic() - started
        if status != 200:
            return status, [json.loads(raw)], took
        return status, [json.loads(line) for line in raw.splitlines() if line.strip()], took


def lease(name: str, namespace: str, holder: str = "a") -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}}


def pod(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": "no-such-scheduler",
                     "containers": [{"name": "main", "image": "busybox"}]}}


def create_pods(cluster: Cluster, namespace: str, names: list[str]) -> list[dict[str, Any]]:
    made = []
    for name in names:
        status, body = cluster.request("POST", PODS.format(ns=namespace), pod(name, namespace))
        assert status == 201, body
        made.append(body)
    return made


def create_leases(cluster: Cluster, namespace: str, names: list[str]) -> list[dict[str, Any]]:
    made = []
    for name in names:
        status, body = cluster.request("POST", LEASES.format(ns=namespace), lease(name, namespace))
        assert status == 201, body
        made.append(body)
    return made


def names(items: list[dict[str, Any]]) -> list[str]:
    return [i["metadata"]["name"] for i in items]


# -- the checks --------------------------------------------------------------------------------------


def check_a_list_is_paged_by_limit_from_one_snapshot(cluster: Cluster) -> None:
    ns, _ = cluster.namespaces
    create_leases(cluster, ns, ["l-3", "l-1", "l-4", "l-0", "l-2"])
    path = LEASES.format(ns=ns)
    status, first = cluster.request("GET", f"{path}?limit=2")
    assert status == 200, first
    assert names(first["items"]) == ["l-0", "l-1"]
    assert first["metadata"]["remainingItemCount"] == 3 and first["metadata"]["continue"]
    listed_at = int(first["metadata"]["resourceVersion"])
    create_leases(cluster, ns, ["l-5"])  # after the first page: not in this list
    status, second = cluster.request("GET", f"{path}?limit=2&continue={first['metadata']['continue']}")
    assert status == 200, second
    assert names(second["items"]) == ["l-2", "l-3"]
    assert second["metadata"]["remainingItemCount"] == 1
    assert int(second["metadata"]["resourceVersion"]) == listed_at
    status, last = cluster.request("GET", f"{path}?limit=2&continue={second['metadata']['continue']}")
    assert status == 200, last
    assert names(last["items"]) == ["l-4"]
    assert "continue" not in last["metadata"] and "remainingItemCount" not in last["metadata"]
    status, whole = cluster.request("GET", path)
    assert names(whole["items"]) == ["l-0", "l-1", "l-2", "l-3", "l-4", "l-5"]
    assert "continue" not in whole["metadata"]


def check_an_old_continue_gets_410_with_a_fresh_token(cluster: Cluster) -> None:
    ns, _ = cluster.namespaces
    create_leases(cluster, ns, ["l-0", "l-1", "l-2"])
    path = LEASES.format(ns=ns)
    status, first = cluster.request("GET", f"{path}?limit=1")
    assert status == 200 and names(first["items"]) == ["l-0"], first
    create_leases(cluster, ns, ["l-3"])  # etcd is compacted past the list's version
    cluster.forget_history()
    status, expired = cluster.request("GET", f"{path}?limit=1&continue={first['metadata']['continue']}")
    assert status == 410, expired
    assert (expired["kind"], expired["reason"], expired["code"]) == ("Status", "Expired", 410), expired
    assert "too old to display a consistent list result" in expired["message"], expired
    fresh = expired["metadata"]["continue"]
    status, rest = cluster.request("GET", f"{path}?continue={fresh}")
    assert status == 200, rest
    assert names(rest["items"]) == ["l-1", "l-2", "l-3"]  # inconsistent: the newest state after l-0


def check_a_resource_version_that_is_not_a_number_is_refused(cluster: Cluster) -> None:
    ns, _ = cluster.namespaces
    path = LEASES.format(ns=ns)
    status, body = cluster.request("GET", f"{path}?resourceVersion=abc")
    assert (status, body["reason"]) == (400, "BadRequest"), body
    assert body["message"].startswith('invalid resource version: resourceVersion: Invalid value: "abc"'), body
    status, events, _ = cluster.watch(path, resourceVersion="-1", timeoutSeconds="1")
    assert status == 500 and "reason" not in events[0], events
    assert 'resourceVersion: Invalid value: "-1"' in events[0]["message"], events
    status, body = cluster.request("GET", f"{path}?limit=1&continue=garbage")
    assert (status, body["reason"]) == (400, "BadRequest"), body
    assert "invalid continue token" in body["message"], body


def check_a_watch_starts_after_its_version_and_bookmarks_before_its_timeout(cluster: Cluster) -> None:
    ns, other = cluster.namespaces
    create_pods(cluster, ns, ["quiet", "changed"])
    path = PODS.format(ns=ns)
    status, listed = cluster.request("GET", path)
    listed_at = int(listed["metadata"]["resourceVersion"])
    label = {"metadata": {"labels": {"changed": "yes"}}}
    status, patched = cluster.request("PATCH", f"{path}/changed", label, content_type=MERGE)
    assert status == 200, patched
    (before,) = create_pods(cluster, other, ["before"])
    # The cache moved (another namespace) before the watch began: it starts there, no BOOKMARK is due.
    status, events, took = cluster.watch(path, resourceVersion=str(listed_at), timeoutSeconds="3",
                                         allowWatchBookmarks="true")
    assert status == 200
    assert [e["type"] for e in events][:1] == ["MODIFIED"], events
    if len(events) > 1:
        # BOOKMARKs only if a pod changed during the watch (on a shared real cluster, the namespace
        # controller emptying earlier tests' namespaces moves the pods' cache too, once or more: a
        # full-suite run saw two), each past the last change before the watch, in order.
        assert {e["type"] for e in events[1:]} == {"BOOKMARK"}, events
        marks = [int(e["object"]["metadata"]["resourceVersion"]) for e in events[1:]]
        assert marks == sorted(marks) and marks[0] > int(before["metadata"]["resourceVersion"]), events
    assert events[0]["object"]["metadata"]["name"] == "changed"
    assert events[0]["object"]["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
    assert 2.5 <= took < 7, took
    # A change elsewhere during the watch: the BOOKMARK 2 s before the timeout carries it.
    during: list[dict[str, Any]] = []
    writer = threading.Timer(0.5, lambda: during.extend(create_pods(cluster, other, ["during"])))
    writer.start()
    try:
        status, events, took = cluster.watch(path, resourceVersion=str(listed_at), timeoutSeconds="5",
                                             allowWatchBookmarks="true")
    finally:
        writer.join()
    assert status == 200
    # One BOOKMARK on the emulation; the real one sends another if its cache moves once more.
    assert [e["type"] for e in events][:2] == ["MODIFIED", "BOOKMARK"], events
    assert {e["type"] for e in events[1:]} == {"BOOKMARK"}, events
    bookmark = events[-1]["object"]
    assert bookmark["kind"] == "Pod" and bookmark["apiVersion"] == "v1", bookmark
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(during[0]["metadata"]["resourceVersion"]), \
        (bookmark, during)
    assert 4.5 <= took < 9, took


def check_a_watch_from_zero_or_none_starts_with_an_added_per_object(cluster: Cluster) -> None:
    ns, _ = cluster.namespaces
    made = create_pods(cluster, ns, ["b", "a"])
    path = PODS.format(ns=ns)
    newest = max(int(m["metadata"]["resourceVersion"]) for m in made)
    for query in ({}, {"resourceVersion": "0"}):
        status, events, took = cluster.watch(path, timeoutSeconds="1", allowWatchBookmarks="true", **query)
        assert status == 200
        # The end of the initial events is bookmarked at once, even in a watch of 1 s.
        assert [e["type"] for e in events] == ["ADDED", "ADDED", "BOOKMARK"], events
        assert sorted(names([e["object"] for e in events[:2]])) == ["a", "b"]
        seen = [e["object"]["metadata"] for e in events[:2]]
        versions = {m["name"]: m["resourceVersion"] for m in seen}
        assert versions == {m["metadata"]["name"]: m["metadata"]["resourceVersion"] for m in made}
        assert int(events[2]["object"]["metadata"]["resourceVersion"]) >= newest, events[2]
        assert 0.8 <= took < 5, took
        status, events, _ = cluster.watch(path, timeoutSeconds="1", **query)
        assert [e["type"] for e in events] == ["ADDED", "ADDED"], events  # no BOOKMARK unless asked


def check_a_watch_from_a_forgotten_version_gets_one_410_error_event(cluster: Cluster) -> None:
    ns, _ = cluster.namespaces
    create_pods(cluster, ns, ["x"])
    path = PODS.format(ns=ns)
    status, listed = cluster.request("GET", path)
    old = int(listed["metadata"]["resourceVersion"])
    create_pods(cluster, ns, ["y"])
    cluster.forget_history()
    status, events, _ = cluster.watch(path, resourceVersion=str(old), timeoutSeconds="5")
    assert status == 200, events
    assert len(events) == 1 and events[0]["type"] == "ERROR", events
    error = events[0]["object"]
    assert (error["kind"], error["status"], error["reason"], error["code"]) == \
        ("Status", "Failure", "Expired", 410), error
    assert error["message"].startswith(f"too old resource version: {old} ("), error


def check_creating_an_existing_object_is_409_already_exists(cluster: Cluster) -> None:
    ns, _ = cluster.namespaces
    create_leases(cluster, ns, ["taken"])
    status, body = cluster.request("POST", LEASES.format(ns=ns), lease("taken", ns, holder="b"))
    assert status == 409, body
    assert body["reason"] == "AlreadyExists", body
    assert body["message"] == 'leases.coordination.k8s.io "taken" already exists', body
    assert body["details"] == {"name": "taken", "group": "coordination.k8s.io", "kind": "leases"}, body


def check_a_patch_with_a_stale_resource_version_is_409_conflict(cluster: Cluster) -> None:
    ns, _ = cluster.namespaces
    (made,) = create_leases(cluster, ns, ["held"])
    path = f"{LEASES.format(ns=ns)}/held"
    read_at = made["metadata"]["resourceVersion"]
    # A patch that changes nothing writes nothing: the version stays.
    status, same = cluster.request("PATCH", path, {"metadata": {"resourceVersion": read_at},
                                                   "spec": {"holderIdentity": "a"}}, content_type=MERGE)
    assert status == 200 and same["metadata"]["resourceVersion"] == read_at, same
    renewal = {"metadata": {"resourceVersion": read_at}, "spec": {"leaseDurationSeconds": 20}}
    status, renewed = cluster.request("PATCH", path, renewal, content_type=MERGE)
    assert status == 200, renewed
    assert int(renewed["metadata"]["resourceVersion"]) > int(read_at)
    status, body = cluster.request("PATCH", path, {"metadata": {"resourceVersion": read_at},
                                                   "spec": {"holderIdentity": "b"}}, content_type=MERGE)
    assert status == 409 and body["reason"] == "Conflict", body
    assert body["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "held": the object has been modified; '
        "please apply your changes to the latest version and try again"), body
    status, now = cluster.request("GET", path)
    assert now["spec"]["holderIdentity"] == "a", now
    missing = f"{LEASES.format(ns=ns)}/missing"
    status, body = cluster.request("PATCH", missing, {"spec": {}}, content_type=MERGE)
    assert (status, body["reason"]) == (404, "NotFound"), body
    assert body["message"] == 'leases.coordination.k8s.io "missing" not found', body


def check_an_update_with_a_stale_resource_version_is_409_conflict(cluster: Cluster) -> None:
    ns, _ = cluster.namespaces
    (made,) = create_leases(cluster, ns, ["replaced"])
    path = f"{LEASES.format(ns=ns)}/replaced"
    read_at = made["metadata"]["resourceVersion"]
    status, same = cluster.request("PUT", path, made)
    assert status == 200 and same["metadata"]["resourceVersion"] == read_at, same  # nothing changed
    changed = {**made, "spec": {**made["spec"], "holderIdentity": "b"}}
    status, updated = cluster.request("PUT", path, changed)
    assert status == 200 and int(updated["metadata"]["resourceVersion"]) > int(read_at), updated
    assert updated["metadata"]["uid"] == made["metadata"]["uid"]
    stale = {**changed, "spec": {**changed["spec"], "holderIdentity": "c"}}  # still carries read_at
    status, body = cluster.request("PUT", path, stale)
    assert status == 409 and body["reason"] == "Conflict", body
    conflict = 'Operation cannot be fulfilled on leases.coordination.k8s.io "replaced"'
    assert body["message"].startswith(conflict), body
    unconditional = {**changed, "metadata": {"name": "replaced", "namespace": ns},
                     "spec": {"holderIdentity": "d"}}
    status, body = cluster.request("PUT", path, unconditional)  # a Lease's update must be conditional
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert body["message"] == ('leases.coordination.k8s.io "replaced" is invalid: metadata.resourceVersion: '
                               "Invalid value: 0: must be specified for an update"), body
    # A Lease that is not there is created by an update (whatever version it names); a pod is not.
    missing = {**unconditional, "metadata": {"name": "missing", "namespace": ns, "resourceVersion": "5"}}
    status, body = cluster.request("PUT", f"{LEASES.format(ns=ns)}/missing", missing)
    assert status == 201 and body["spec"] == {"holderIdentity": "d"}, body
    status, body = cluster.request("PUT", f"{PODS.format(ns=ns)}/missing", pod("missing", ns))
    assert (status, body["reason"]) == (404, "NotFound"), body
    assert body["message"] == 'pods "missing" not found', body


def check_events_are_validated(cluster: Cluster) -> None:
    ns, other = cluster.namespaces
    events = f"/api/v1/namespaces/{ns}/events"

    def event(**fields: Any) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"e.{uuid.uuid4().hex[:10]}", "namespace": ns},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": ns,
                                   "uid": "u"},
                "type": "Warning", "reason": "Limits", "message": "m", "source": {"component": "t"}, **fields}

    status, body = cluster.request("POST", events, event(message="x" * 4096, reason="R" * 200))
    assert status == 201, body  # core/v1 without eventTime: no lengths checked
    elsewhere = event()
    elsewhere["involvedObject"]["namespace"] = other
    status, body = cluster.request("POST", events, elsewhere)
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert "involvedObject.namespace" in body["message"], body
    assert "does not match event.namespace" in body["message"], body
    timed = {"eventTime": "2026-01-01T00:00:00.000000Z", "reportingComponent": "podmortem-test",
             "reportingInstance": "t", "action": "Check"}
    status, body = cluster.request("POST", events, event(message="é" * 512, **timed))
    assert status == 201, body  # 1024 bytes
    status, body = cluster.request("POST", events, event(message="é" * 512 + "x", **timed))
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert "can have at most 1024 characters" in body["message"], body


CHECKS = [
    check_a_list_is_paged_by_limit_from_one_snapshot,
    check_an_old_continue_gets_410_with_a_fresh_token,
    check_a_resource_version_that_is_not_a_number_is_refused,
    check_a_watch_starts_after_its_version_and_bookmarks_before_its_timeout,
    check_a_watch_from_zero_or_none_starts_with_an_added_per_object,
    check_a_watch_from_a_forgotten_version_gets_one_410_error_event,
    check_creating_an_existing_object_is_409_already_exists,
    check_a_patch_with_a_stale_resource_version_is_409_conflict,
    check_an_update_with_a_stale_resource_version_is_409_conflict,
    check_events_are_validated,
]


# -- the clusters ------------------------------------------------------------------------------------


@contextlib.contextmanager
def emulated_cluster(tmp: Path) -> Iterator[Cluster]:
    """The demo's emulated cluster (the harness's: every resource the operator uses), plain HTTP."""
    with harness(tmp) as h:
        suffix = uuid.uuid4().hex[:6]
        yield Cluster(kind="emulated", url=h.url, context=None, namespaces=(f"a-{suffix}", f"b-{suffix}"),
                      forget_history=lambda: h.sync(h.api.forget_history))


@contextlib.contextmanager
def real_cluster(plane: ControlPlane, namespace: str) -> Iterator[Cluster]:
    """The real control plane, as its admin (client certificate); two namespaces of the test's own."""
    assert plane.pki is not None
    context = ssl.create_default_context(cafile=str(plane.pki.ca))
    cert, key = plane._admin_cert_files()
    context.load_cert_chain(cert, key)
    other = f"{namespace}-b"
    plane.create_namespace(other)

    def forget() -> None:
        plane.compact_etcd()
        plane.restart("kube-apiserver")

    try:
        yield Cluster(kind="real", url=plane.url, context=context, namespaces=(namespace, other),
                      forget_history=forget)
    finally:
        plane.run("kubectl", "delete", "namespace", other, "--wait=false", check=False)


@pytest.fixture(params=["emulated", "real"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "emulated":
        with emulated_cluster(tmp_path) as c:
            yield c
    else:
        plane = request.getfixturevalue("control_plane")
        with real_cluster(plane, request.getfixturevalue("namespace")) as c:
            yield c


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__.removeprefix("check_") for c in CHECKS])
def test_the_emulation_answers_as_the_real_server(cluster: Cluster, check: Callable[[Cluster], None]) -> None:
    check(cluster)
