"""The operator's pod watch (``operator/watching/pod_watch.py``) against the real API server's watch cache.

What the real server decides here: lists paged by ``limit`` and ``continue``, BOOKMARK events and
their resourceVersions, and ``410 Gone`` once etcd has compacted the version a watch resumes from (the
emulation now models each, checked against the real server by ``test_emulation_matches.py``).
Each test runs ``podmortem operator`` as a process with the chart's environment and RBAC (a
ServiceAccount token, :mod:`tests.controlplane._operators`), leader election off (one replica: the
pod watch is the point, and a SIGSTOP longer than the renew deadline would end a leader), and
watches one namespace. What the test sees: the operator's ``/metrics`` (``podmortem_watched_pods``:
the pods it keeps state for) and the API server's audit log of its requests.

Pods that no scheduler takes stay Pending: the operator keeps their watch state but has no log to
follow, so a thousand of them cost it little.
"""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tests.controlplane import _operators as ops
from tests.controlplane.cluster import ControlPlane

from podmortem.operator.watching.pod_watch import PodWatchSettings

#: The operator's list page (``limit``), as it is configured now.
PAGE = PodWatchSettings().page_size
WATCHED = "podmortem_watched_pods"
#: Leader election off: one replica, the pod watch alone.
SOLO = {"PODMORTEM_LEADER_ELECTION": "false"}


@dataclass(frozen=True)
class Request:
    """One of the operator's pod list or watch requests, as the API server's audit log has it."""

    verb: str
    query: dict[str, str]
    #: The response code (a watch still open: 200, from its ResponseStarted stage).
    code: int
    received: str

    @property
    def version(self) -> int | None:
        rv = self.query.get("resourceVersion")
        return int(rv) if rv else None


def pod_requests(plane: ControlPlane, user: str, namespace: str) -> list[Request]:
    """The pod lists and watches ``user`` made in ``namespace``, in the order the server received them."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    last: dict[str, dict[str, Any]] = {}
    for event in plane.audit(user=user):
        if event.get("verb") in ("list", "watch") and urllib.parse.urlsplit(event["requestURI"]).path == path:
            last[event["auditID"]] = event  # ResponseComplete comes after ResponseStarted
    requests = []
    for event in sorted(last.values(), key=lambda e: e["requestReceivedTimestamp"]):
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(event["requestURI"]).query))
        requests.append(Request(verb=event["verb"], query=query,
                                code=int(event.get("responseStatus", {}).get("code", 0)),
                                received=event["requestReceivedTimestamp"]))
    return requests


def describe(requests: list[Request]) -> str:
    """``verb(resourceVersion, limit, +continue)=code`` for each request, for a test's output."""
    return ", ".join(
        f"{r.verb}({r.query.get('resourceVersion', '')}"
        f"{', limit ' + r.query['limit'] if 'limit' in r.query else ''}"
        f"{', +continue' if r.query.get('continue') else ''})={r.code}" for r in requests)


def watch_lists(requests: list[Request]) -> list[Request]:
    """The pod watch's own lists (its page size); the readiness check lists too, with other limits."""
    return [r for r in requests if r.verb == "list" and r.query.get("limit") == str(PAGE)]


def create(plane: ControlPlane, objects: list[dict[str, Any]]) -> None:
    plane.kubectl("create", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                                             "items": objects}))


def watched(op: ops.Operator, count: int) -> float | None:
    value = op.metric(WATCHED)
    return value if value == count else None


def test_a_list_longer_than_a_page_is_read_page_by_page_and_every_pod_is_known(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    pods = 2 * PAGE + 1  # three pages: PAGE, PAGE, 1
    started = time.monotonic()
    create(control_plane, [ops.pod(f"p-{i:04d}", namespace, scheduled=False) for i in range(pods)])
    print(f"\ncreated {pods} pods in {time.monotonic() - started:.1f} s")
    with ops.install(control_plane, namespace) as release:
        op = ops.start(control_plane, release, tmp_path, "solo", **SOLO)
        try:
            started = time.monotonic()
            op.wait_ready("ready", timeout=180)
            ready_s = time.monotonic() - started
            ops.wait(lambda: watched(op, pods), what=f"{WATCHED} = {pods}", timeout=180, operators=(op,))
            known_s = time.monotonic() - started
            requests = pod_requests(control_plane, release.user, namespace)
            lists = watch_lists(requests)
            print(f"ready {ready_s:.1f} s, {pods} pods known {known_s:.1f} s after start; "
                  f"{len(lists)} list requests (limit {PAGE}) for {pods} pods, "
                  f"{len(requests)} pod list/watch requests in all")
            assert [(r.code, bool(r.query.get("continue"))) for r in lists] == \
                [(200, False), (200, True), (200, True)], lists
            # The watch starts from the list's resourceVersion, not from "any".
            watches = [r for r in requests if r.verb == "watch"]
            assert watches and watches[0].query.get("allowWatchBookmarks") == "true", watches
            assert watches[0].version, watches[0]
            assert op.metric(WATCHED) == pods
        finally:
            op.stop()


def test_the_watch_resumes_from_a_bookmarks_resource_version(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """A watch cut after a BOOKMARK resumes from the BOOKMARK's resourceVersion, without a list.

    Nothing changes in the watched namespace after the list, and a pod is created in another one:
    the pods' watch cache moves past the list's resourceVersion, and only a BOOKMARK can carry that
    version to the operator's watch. The API server sends one about a minute into a watch that asked
    for them (``allowWatchBookmarks``); the test cuts the watch's connection after 75 s (a relay in
    front of the API server) and reads, in the audit log, where the next watch started.
    """
    create(control_plane, [ops.pod("quiet", namespace, scheduled=False)])
    other = f"{namespace}-else"
    relay = ops.Relay(control_plane.apiserver_port)
    try:
        with ops.install(control_plane, namespace) as release:
            op = ops.start(control_plane, release, tmp_path, "solo", server=relay.url, **SOLO)
            try:
                op.wait_ready("ready", timeout=180)
                first = ops.wait(
                    lambda: next((r for r in pod_requests(control_plane, release.user, namespace)
                                  if r.verb == "watch"), None),
                    what="the pod watch", operators=(op,))
                watch_seen = time.monotonic()
                listed = first.version
                assert listed is not None and first.query.get("allowWatchBookmarks") == "true", first
                control_plane.create_namespace(other)
                status, elsewhere = control_plane.request(
                    "POST", f"/api/v1/namespaces/{other}/pods", ops.pod("elsewhere", other, scheduled=False))
                assert status == 201, elsewhere
                elsewhere_rv = int(elsewhere["metadata"]["resourceVersion"])
                assert elsewhere_rv > listed
                time.sleep(max(0.0, watch_seen + 75 - time.monotonic()))
                assert relay.cut() > 0
                resumed = ops.wait(
                    lambda: next((r for r in pod_requests(control_plane, release.user, namespace)
                                  if r.verb == "watch" and r.received > first.received), None),
                    what="the pod watch resumed", operators=(op,))
                requests = pod_requests(control_plane, release.user, namespace)
                print(f"\nlisted at {listed}; a pod elsewhere at {elsewhere_rv}; "
                      f"the watch resumed at {resumed.version}; requests: {describe(requests)}")
                assert resumed.version is not None and resumed.version >= elsewhere_rv, (listed, resumed)
                assert resumed.query.get("allowWatchBookmarks") == "true"
                assert len(watch_lists(requests)) == 1, "the cut watch was resumed by a list, not a watch"
                assert op.metric(WATCHED) == 1
            finally:
                op.stop()
    finally:
        relay.close()
        control_plane.run("kubectl", "delete", "namespace", other, "--wait=false", check=False)


def test_a_pod_deleted_while_the_watch_was_down_is_dropped_at_the_relist_after_410(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """SIGSTOP the operator and cut its connections, delete a pod, compact etcd and restart the API
    server, SIGCONT.

    The cut comes first so that the deletion's event cannot wait in the operator's socket (a SIGSTOP
    alone leaves the API server writing events into it). The watch's resume version is gone (410):
    the operator lists again, and the relist is a diff, as client-go's informers make it: the pod
    the list no longer has is handed out as deleted, and its state dropped
    (``podmortem_watched_pods`` from 3 to 2).
    """
    create(control_plane, [ops.pod(name, namespace, scheduled=False)
                           for name in ("keep-0", "keep-1", "doomed")])
    relay = ops.Relay(control_plane.apiserver_port)
    try:
        with ops.install(control_plane, namespace) as release:
            op = ops.start(control_plane, release, tmp_path, "solo", server=relay.url, **SOLO)
            try:
                op.wait_ready("ready", timeout=180)
                ops.wait(lambda: watched(op, 3), what=f"{WATCHED} = 3", operators=(op,))
                before = {r.received for r in pod_requests(control_plane, release.user, namespace)}
                op.pause()
                try:
                    relay.cut()
                    control_plane.kubectl("delete", "pod", "doomed", "-n", namespace, "--wait=true")
                    compacted = control_plane.compact_etcd()
                    control_plane.restart("kube-apiserver")
                finally:
                    op.resume()
                started = time.monotonic()
                ops.wait(lambda: watched(op, 2), what=f"{WATCHED} = 2 (the deleted pod dropped)",
                         timeout=180, operators=(op,))
                dropped_s = time.monotonic() - started
                after = [r for r in pod_requests(control_plane, release.user, namespace)
                         if r.received not in before]
                print(f"\ncompacted at {compacted}; dropped {dropped_s:.1f} s after SIGCONT; "
                      f"requests after: {describe(after)}")
                # The first watch after the restart asked for a version older than the compaction ...
                stale = [r for r in after
                         if r.verb == "watch" and r.version is not None and r.version < compacted]
                assert stale, after
                # ... and a list of the pod watch's came after it: a relist, not a resume.
                relists = [r for r in watch_lists(after) if r.received >= stale[0].received]
                assert relists, after
                assert op.metric(WATCHED) == 2
            finally:
                op.stop()
    finally:
        relay.close()
