"""The Lease decision on plain data: who creates, renews, waits, takes over, releases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from podmortem.operator.log_links import log_url
from podmortem.operator.settings import LeaderElectionSettings
from podmortem.operator.watching import leadership as leader
from podmortem.operator.watching.leadership import Action

WALL = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


def lease_of(
    holder: str | None,
    *,
    renew: str = "2024-05-01T12:00:00.000000Z",
    duration: int = 15,
    transitions: int = 0,
) -> dict[str, object]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "podmortem-operator", "namespace": "podmortem", "resourceVersion": "7"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "renewTime": renew,
            "acquireTime": renew,
            "leaseTransitions": transitions,
        },
    }


def test_no_lease_is_created_and_the_new_one_is_ours() -> None:
    d = leader.decide(now=0.0, lease=None, me="a", duration_s=15, observed=None)
    assert d.action is Action.CREATE
    body = leader.new_lease(name="l", namespace="ns", me="a", duration_s=15, wall=WALL)
    assert (
        body["spec"]["holderIdentity"] == "a" and body["spec"]["renewTime"] == "2024-05-01T12:00:00.123456Z"
    )
    assert leader.decide(now=1.0, lease=body, me="a", duration_s=15, observed=None).action is Action.RENEW


def test_a_live_lease_of_another_is_waited_for_until_it_stops_changing_for_its_duration() -> None:
    lease = lease_of("b", duration=15)
    d = leader.decide(now=100.0, lease=lease, me="a", duration_s=10, observed=None)
    assert d.action is Action.WAIT and d.holder == "b" and d.expires_in_s == 15
    # Judged on our clock from when we first saw this record, not on the lease's renewTime.
    d = leader.decide(now=114.9, lease=lease, me="a", duration_s=10, observed=d.observed)
    assert d.action is Action.WAIT
    d2 = leader.decide(now=115.0, lease=lease, me="a", duration_s=10, observed=d.observed)
    assert d2.action is Action.ACQUIRE


def test_a_renewal_seen_restarts_the_expiry_clock() -> None:
    d = leader.decide(now=0.0, lease=lease_of("b"), me="a", duration_s=15, observed=None)
    renewed = lease_of("b", renew="2024-05-01T12:00:10.000000Z")
    d = leader.decide(now=14.0, lease=renewed, me="a", duration_s=15, observed=d.observed)
    assert d.action is Action.WAIT and d.observed is not None and d.observed.at == 14.0
    assert (
        leader.decide(now=28.0, lease=renewed, me="a", duration_s=15, observed=d.observed).action
        is Action.WAIT
    )
    assert (
        leader.decide(now=29.0, lease=renewed, me="a", duration_s=15, observed=d.observed).action
        is Action.ACQUIRE
    )


def test_a_released_lease_is_taken_at_once() -> None:
    released = leader.released(lease_of("b"), me="b", wall=WALL)
    assert released is not None and released["spec"]["holderIdentity"] is None
    assert released["spec"]["leaseDurationSeconds"] == 1
    assert (
        leader.decide(now=0.0, lease=released, me="a", duration_s=15, observed=None).action is Action.ACQUIRE
    )


def test_only_the_holder_may_release() -> None:
    assert leader.released(lease_of("b"), me="a", wall=WALL) is None


def test_taking_over_counts_a_transition_and_keeps_the_resource_version() -> None:
    taken = leader.taken(lease_of("b", transitions=3), me="a", duration_s=15, wall=WALL)
    assert taken["spec"]["holderIdentity"] == "a" and taken["spec"]["leaseTransitions"] == 4
    assert taken["spec"]["acquireTime"] == taken["spec"]["renewTime"] == "2024-05-01T12:00:00.123456Z"
    assert taken["metadata"]["resourceVersion"] == "7"  # the write is conditional on what was read
    renewed = leader.taken(taken, me="a", duration_s=15, wall=datetime(2024, 5, 1, 12, 0, 5, tzinfo=UTC))
    assert renewed["spec"]["leaseTransitions"] == 4
    assert renewed["spec"]["acquireTime"] == taken["spec"]["acquireTime"]


def test_election_settings_must_be_ordered_and_named() -> None:
    with pytest.raises(ValueError, match="identity"):
        LeaderElectionSettings(identity="")
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaderElectionSettings(identity="a", lease_duration_s=10, renew_deadline_s=10)


def test_log_urls() -> None:
    assert log_url("", namespace="ml", pod="p-1") == "/logs/ml/p-1"
    assert (
        log_url("http://podmortem.podmortem.svc:8080/", namespace="ml", pod="p", container="trainer")
        == "http://podmortem.podmortem.svc:8080/logs/ml/p?container=trainer"
    )
