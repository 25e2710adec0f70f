"""The operator's pod watch against the emulated API, which pages lists and answers 410 as the real one does.

The emulation pages a list by ``limit`` with ``continue`` tokens and, once its history is forgotten (an
API server restarted after etcd compacted), answers a watch from an older resourceVersion with one
ERROR event holding a 410 Status in an HTTP 200 stream (both checked against kube-apiserver in
tests/controlplane/test_emulation_matches.py). The real operator reads a list of three pages, and after
a pod is deleted unseen (its event gone with the history) it relists on the ERROR event and drops the
pod, as tests/controlplane/test_pod_watch_real.py shows on the real server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podmortem.operator.watching.pod_watch import PodWatchSettings
from podmortem_demo.harness import Harness, harness

PAGE = PodWatchSettings().page_size
PODS_PATH = "/api/v1/pods"


def _pod(h: Harness, i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{i:04d}", "namespace": "default", "uid": f"uid-{i:04d}",
                         "resourceVersion": h.api.next_resource_version(),
                         "annotations": {"podmortem.io/watch": "true"}},
            "spec": {"containers": [{"name": "trainer", "image": "x"}]}, "status": {"phase": "Pending"}}


def _known(h: Harness) -> int:
    return int(h.sync(lambda: len(h.running[0].service.targets.pods)))


def _wait(what: str, probe: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _pod_requests(h: Harness) -> list[tuple[str, dict[str, str]]]:
    """("list" or "watch", query) of every cluster-wide pod list and watch, in order."""
    out = []
    for request in h.sync(lambda: list(h.api)):
        if request.method == "GET" and request.url.path == PODS_PATH:
            params = dict(request.params)
            out.append(("watch" if params.get("watch") == "true" else "list", params))
    return out


def test_a_paged_list_then_a_relist_on_the_410_error_event_drops_a_pod_deleted_unseen(tmp_path: Path) -> None:
    pods = 2 * PAGE + 1  # three pages: PAGE, PAGE, 1
    with harness(tmp_path) as h:
        def seed() -> None:
            for i in range(pods):
                h.api.objects["v1/pods", "default", f"p-{i:04d}"] = _pod(h, i)
        h.sync(seed)
        h.start_operator(h.settings())
        _wait(f"{pods} pods known", lambda: _known(h) == pods)
        lists = [q for verb, q in _pod_requests(h) if verb == "list" and q.get("limit") == str(PAGE)]
        assert [bool(q.get("continue")) for q in lists] == [False, True, True], lists
        _wait("the pod watch", lambda: any(verb == "watch" for verb, _ in _pod_requests(h)))
        before = len(_pod_requests(h))

        def delete_unseen_and_forget() -> int:
            del h.api.objects["v1/pods", "default", "p-0000"]  # no event: as if lost to compaction
            h.api.forget_history()
            return h.api.resource_version

        floor = h.sync(delete_unseen_and_forget)
        _wait(f"{pods - 1} pods known (the deleted one dropped)", lambda: _known(h) == pods - 1)
        after = _pod_requests(h)[before:]
        stale = [i for i, (verb, q) in enumerate(after)
                 if verb == "watch" and q.get("resourceVersion") and int(q["resourceVersion"]) < floor]
        assert stale, after  # the watch resumed from a version the history no longer has ...
        assert any(verb == "list" for verb, _ in after[stale[0] + 1:]), after  # ... and listed again
