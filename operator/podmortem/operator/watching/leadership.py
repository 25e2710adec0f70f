"""Leader election over a coordination.k8s.io/v1 Lease: the decision, and the candidate that acts on it.

Two operator replicas must not both follow logs and write reports. The one
holding the Lease runs the kopf handlers; the other waits, ready, and takes the
Lease over when its holder stops renewing it. As in client-go, expiry is judged
on *this* replica's clock: a Lease is expired when its record (holder, renew
time, transitions) has not changed for ``leaseDurationSeconds`` since we first
saw it, so clock skew between nodes does not matter.

:func:`decide` and the Lease builders are pure (dicts in, dicts out);
:class:`Elector` reads and writes the Lease. Acquisitions and renewals are merge
patches that carry the ``metadata.resourceVersion`` that was read: the apiserver
treats it as a precondition, so two candidates racing for an expired Lease
cannot both win (the slower one gets 409 Conflict).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from podmortem.kube.api import Kube, KubeError, resource_path
from podmortem.kube.bodies import Body
from podmortem.operator.settings import LeaderElectionSettings

logger = logging.getLogger(__name__)

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
    return Body(lease).spec


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


class Elector:
    """One candidate. ``acquire`` until leader, then ``keep`` until lost or stopped, then ``release``."""

    def __init__(self, *, kube: Kube, settings: LeaderElectionSettings) -> None:
        self.kube = kube
        self.settings = settings
        self.is_leader = False
        #: The holder last seen, for the readiness text and logs.
        self.holder = ""
        self._observed: Observed | None = None
        self._lease: dict[str, Any] | None = None
        self._path = resource_path(
            "coordination.k8s.io", "v1", "leases", settings.lease_namespace, settings.lease_name
        )
        self._collection = resource_path(
            "coordination.k8s.io", "v1", "leases", settings.lease_namespace
        )

    def describe(self) -> str:
        if self.is_leader:
            return f"leader (lease {self.settings.lease_namespace}/{self.settings.lease_name})"
        return f"standby (leader: {self.holder or 'none'})"

    async def try_once(self) -> bool:
        """One look at the Lease, and the write it calls for. True when we hold it afterwards."""
        s = self.settings
        try:
            lease = await self.kube.get(self._path)
            decision = decide(
                now=time.monotonic(),
                lease=lease,
                me=s.identity,
                duration_s=s.lease_duration_s,
                observed=self._observed,
            )
            self._observed = decision.observed
            self.holder = decision.holder
            wall = datetime.now(UTC)
            if decision.action is Action.WAIT:
                return False
            if decision.action is Action.CREATE:
                body = new_lease(
                    name=s.lease_name,
                    namespace=s.lease_namespace,
                    me=s.identity,
                    duration_s=s.lease_duration_s,
                    wall=wall,
                )
                self._lease = await self.kube.create(self._collection, body)
            else:
                assert lease is not None
                body = taken(lease, me=s.identity, duration_s=s.lease_duration_s, wall=wall)
                self._lease = await self.kube.merge_patch(self._path, _conditional(body))
            if not self.is_leader:
                logger.info("became the leader (lease %s/%s, was %s)", s.lease_namespace, s.lease_name,
                            decision.holder or "free")
            self.holder = s.identity
            return True
        except KubeError as exc:
            level = logging.DEBUG if exc.status == 409 else logging.WARNING
            logger.log(level, "lease %s/%s: %s %s", s.lease_namespace, s.lease_name, exc.status, exc.reason)
            return False
        except (OSError, TimeoutError) as exc:
            logger.warning("lease %s/%s: the API is unreachable: %r", s.lease_namespace, s.lease_name, exc)
            return False

    async def acquire(self, *, stop: asyncio.Event) -> bool:
        """Wait, as a ready standby, until we hold the Lease (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if await self.try_once():
                self.is_leader = True
                return True
            try:
                async with asyncio.timeout(self.settings.retry_period_s):
                    await stop.wait()
            except TimeoutError:
                pass
        return False

    async def keep(self, *, lost: asyncio.Event) -> None:
        """Renew every retry period, as client-go's renew loop does, until a renewal fails: then set ``lost``.

        A renewal is tried every retry period until it succeeds or the renew deadline, counted from
        the start of *that* renewal, has passed, or until the Lease is seen held by another. Counting
        from the start of each renewal, not from the last success, keeps a leader that was paused
        (SIGSTOP, a long GC, a stalled node) for longer than the deadline but less than the Lease's
        duration: it still holds the Lease, and one failed try after it resumes (a 409 Conflict
        because another writer touched the Lease) is retried, as client-go retries it.
        """
        s = self.settings
        while True:
            await asyncio.sleep(s.retry_period_s)
            if not await self._renew():
                logger.error("lost the lease %s/%s (holder now: %s); stopping the handlers",
                             s.lease_namespace, s.lease_name, self.holder or "unknown")
                self.is_leader = False
                lost.set()
                return

    async def _renew(self) -> bool:
        """One renewal: tries every retry period within the renew deadline (client-go's
        ``PollImmediateUntil`` under a ``RenewDeadline`` timeout). False once it is lost."""
        s = self.settings
        deadline = time.monotonic() + s.renew_deadline_s
        while True:
            left = deadline - time.monotonic()
            try:
                async with asyncio.timeout(max(left, 0.0)):
                    if await self.try_once():
                        return True
            except TimeoutError:
                return False  # the try itself outlasted the deadline
            if self.holder != s.identity:
                return False  # another holds it: no retry can win it back
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(s.retry_period_s, left))

    async def release(self) -> None:
        """Give the Lease up so the standby takes over at once (after the cursors are persisted)."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            lease = await self.kube.get(self._path)
            body = released(lease or {}, me=self.settings.identity, wall=datetime.now(UTC))
            if lease is not None and body is not None:
                await self.kube.merge_patch(self._path, _conditional(body))
                s = self.settings
                logger.info("released the lease %s/%s", s.lease_namespace, s.lease_name)
        except (KubeError, OSError, TimeoutError) as exc:
            logger.warning("releasing the lease failed (it expires on its own): %s", exc)


def _conditional(lease: dict[str, Any]) -> dict[str, Any]:
    """A merge patch of the Lease's spec that applies only to the resourceVersion it was read at."""
    body = Body(lease)
    version = body.resource_version
    patch: dict[str, Any] = {"spec": dict(body.spec)}
    if version:
        patch["metadata"] = {"resourceVersion": version}
    return patch
