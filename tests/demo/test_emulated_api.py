"""The emulated API's lists, watches, conflicts and Event checks, where the real control plane is not built.

The same checks run against kube-apiserver v1.36.3 too, in tests/controlplane/test_emulation_matches.py
(which holds them); here they run against the emulation alone, outside the ``controlplane`` marker.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tests.controlplane.test_emulation_matches import CHECKS, PODS, Cluster, create_pods, emulated_cluster

from podmortem_demo.emulated import watch_cache


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__.removeprefix("check_") for c in CHECKS])
def test_the_emulated_api(check: Callable[[Cluster], None], tmp_path: Path) -> None:
    with emulated_cluster(tmp_path) as cluster:
        check(cluster)


def test_the_watch_cache_keeps_75_s_of_changes_and_at_least_100() -> None:
    """The emulated watch cache forgets a change once it is older than 75 s and 100 newer ones are kept
    (the real cache's eventFreshDuration and its smallest size); a watch from before it gets 410."""
    feed = watch_cache.Feed(floor=0, latest=0)
    for rv in range(1, 201):
        feed.record(watch_cache.Change(rv=rv, namespace="ns", name=f"p{rv}", event={}, at=rv / 10))
    assert feed.floor == 0 and feed.start == 0  # 200 changes within 20 s: all kept
    feed.record(watch_cache.Change(rv=201, namespace="ns", name="late", event={}, at=200.0))
    # All 200 are older than 200 - 75 s now: they go, but for the newest 100 (102..201).
    assert feed.floor == 101 and [c.rv for c in feed.read(feed.start)][:2] == [102, 103]
    assert feed.after(150) - feed.start == 150 - 102 + 1


def test_a_quiet_watch_gets_no_bookmark(tmp_path: Path) -> None:
    """Where the real cluster's other writers may move the cache (the shared check allows a BOOKMARK
    then), the emulation's pods change only when the test changes them: a watch that starts at the
    cache's version and sees no change gets no BOOKMARK, even when it asked for them."""
    with emulated_cluster(tmp_path) as cluster:
        ns, other = cluster.namespaces
        create_pods(cluster, ns, ["quiet"])
        status, listed = cluster.request("GET", PODS.format(ns=ns))
        create_pods(cluster, other, ["before"])
        at = listed["metadata"]["resourceVersion"]
        status, events, _ = cluster.watch(PODS.format(ns=ns), resourceVersion=at, timeoutSeconds="3",
                                          allowWatchBookmarks="true")
        assert status == 200 and events == [], events
