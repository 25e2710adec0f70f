"""Leader election over a coordination.k8s.io/v1 Lease, as a pure decision on plain data.

Two operator replicas must not both follow logs and write reports. The one
holding the Lease runs the kopf handlers; the other waits, ready, and takes the
Lease over when its holder stops renewing it. As in client-go, expiry is judged
on *this* replica's clock: a Lease is expired when its record (holder, renew
time, transitions) has not changed for ``leaseDurationSeconds`` since we first
saw it, so clock skew between nodes does not matter. The I/O (GET, POST, merge
patches conditional on ``resourceVersion``) lives in
``podmortem.operator.leadership``; everything here takes and returns dicts.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

LEASE_API_VERSION = "coordination.k8s.io/v1"


class Action(enum.Enum):
    """What to do with the Lease now."""

    #: There is no Lease: create it, held by us.
    CREATE = "create"
    #: The Lease is free (released) or expired: take it over (a write conditional on its resourceVersion).
    ACQUIRE = "acquire"
    #: We hold it: renew it (likewise conditional).
    RENEW = "renew"
    #: Someone else holds a live Lease: wait a retry period and look again.
    WAIT = "wait"


@dataclass(frozen=True)
class Observed:
    """The Lease record as we last saw it change, and our monotonic clock at that moment."""

    record: tuple[str, str, str, int]
    at: float


@dataclass(frozen=True)
class Decision:
    action: Action
    #: What to remember for the next decision.
    observed: Observed | None
    #: The holder we saw (for logs and the readiness text).
    holder: str
    #: Seconds until the current holder's Lease expires, by our clock (0 when free or ours).
    expires_in_s: float = 0.0


def _spec(lease: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (lease or {}).get("spec") or {}


def holder_of(lease: Mapping[str, Any] | None) -> str:
    return str(_spec(lease).get("holderIdentity") or "")


def _record(lease: Mapping[str, Any]) -> tuple[str, str, str, int]:
    spec = _spec(lease)
    return (
        holder_of(lease),
        str(spec.get("renewTime") or ""),
        str(spec.get("acquireTime") or ""),
        int(spec.get("leaseTransitions") or 0),
    )


def decide(
    *,
    now: float,
    lease: Mapping[str, Any] | None,
    me: str,
    duration_s: float,
    observed: Observed | None,
) -> Decision:
    """The next step for candidate ``me``, given the Lease as read (``None``: it does not exist).

    ``now`` is a monotonic clock; ``duration_s`` is ours, used when the Lease names none.
    """
    if lease is None:
        return Decision(Action.CREATE, None, "")
    record = _record(lease)
    if observed is None or observed.record != record:
        observed = Observed(record=record, at=now)
    holder = record[0]
    if holder == me:
        return Decision(Action.RENEW, observed, holder)
    if not holder:
        return Decision(Action.ACQUIRE, observed, holder)
    duration = float(_spec(lease).get("leaseDurationSeconds") or duration_s)
    left = observed.at + duration - now
    if left <= 0:
        return Decision(Action.ACQUIRE, observed, holder)
    return Decision(Action.WAIT, observed, holder, expires_in_s=left)


def micro_time(at: datetime) -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_lease(*, name: str, namespace: str, me: str, duration_s: float, wall: datetime) -> dict[str, Any]:
    """The Lease to create when there is none: held by ``me`` from ``wall``."""
    stamp = micro_time(wall)
    return {
        "apiVersion": LEASE_API_VERSION,
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "holderIdentity": me,
            "leaseDurationSeconds": max(1, round(duration_s)),
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        },
    }


def taken(lease: Mapping[str, Any], *, me: str, duration_s: float, wall: datetime) -> dict[str, Any]:
    """The Lease after ``me`` acquires or renews it; keeps ``metadata.resourceVersion`` for
    the conditional write."""
    spec = dict(_spec(lease))
    stamp = micro_time(wall)
    if holder_of(lease) != me:
        spec["acquireTime"] = stamp
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    spec["holderIdentity"] = me
    spec["leaseDurationSeconds"] = max(1, round(duration_s))
    spec["renewTime"] = stamp
    return {**lease, "spec": spec}


def released(lease: Mapping[str, Any], *, me: str, wall: datetime) -> dict[str, Any] | None:
    """The Lease given up by ``me`` on a graceful stop (free at once for the standby); ``None`` if
    it is not ours to release. Like client-go's ReleaseOnCancel: no holder, a 1 s duration."""
    if holder_of(lease) != me:
        return None
    spec = dict(_spec(lease))
    spec["holderIdentity"] = None
    spec["leaseDurationSeconds"] = 1
    spec["renewTime"] = micro_time(wall)
    return {**lease, "spec": spec}
