"""Hold the operator's Lease: wait for it as a standby, renew it as the leader, give it back on stop.

The decisions are ``podmortem.operator.lease.decide``; this module only reads
and writes the Lease. Acquisitions and renewals are merge patches that carry
the ``metadata.resourceVersion`` that was read: the apiserver treats it as a
precondition, so two candidates racing for an expired Lease cannot both win
(the slower one gets 409 Conflict).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

from podmortem.kube import api as kube_mod
from podmortem.operator import lease as leader
from podmortem.operator.settings import LeaderElectionSettings

logger = logging.getLogger(__name__)


class Elector:
    """One candidate. ``acquire`` until leader, then ``keep`` until lost or stopped, then ``release``."""

    def __init__(self, *, kube: kube_mod.Kube, settings: LeaderElectionSettings) -> None:
        self.kube = kube
        self.settings = settings
        self.is_leader = False
        #: The holder last seen, for the readiness text and logs.
        self.holder = ""
        self._observed: leader.Observed | None = None
        self._lease: dict[str, Any] | None = None
        self._path = kube_mod.resource_path(
            "coordination.k8s.io", "v1", "leases", settings.lease_namespace, settings.lease_name
        )
        self._collection = kube_mod.resource_path(
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
            decision = leader.decide(
                now=time.monotonic(),
                lease=lease,
                me=s.identity,
                duration_s=s.lease_duration_s,
                observed=self._observed,
            )
            self._observed = decision.observed
            self.holder = decision.holder
            wall = datetime.now(UTC)
            if decision.action is leader.Action.WAIT:
                return False
            if decision.action is leader.Action.CREATE:
                body = leader.new_lease(
                    name=s.lease_name,
                    namespace=s.lease_namespace,
                    me=s.identity,
                    duration_s=s.lease_duration_s,
                    wall=wall,
                )
                self._lease = await self.kube.create(self._collection, body)
            else:
                assert lease is not None
                body = leader.taken(lease, me=s.identity, duration_s=s.lease_duration_s, wall=wall)
                self._lease = await self.kube.merge_patch(self._path, _conditional(body))
            if not self.is_leader:
                logger.info("became the leader (lease %s/%s, was %s)", s.lease_namespace, s.lease_name,
                            decision.holder or "free")
            self.holder = s.identity
            return True
        except kube_mod.KubeError as exc:
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
        """Renew every retry period; when no renewal succeeds for the renew deadline, set ``lost``."""
        s = self.settings
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(s.retry_period_s)
            if await self.try_once():
                last_ok = time.monotonic()
            elif self.holder != s.identity or time.monotonic() - last_ok >= s.renew_deadline_s:
                logger.error("lost the lease %s/%s (holder now: %s); stopping the handlers",
                             s.lease_namespace, s.lease_name, self.holder or "unknown")
                self.is_leader = False
                lost.set()
                return

    async def release(self) -> None:
        """Give the Lease up so the standby takes over at once (after the cursors are persisted)."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            lease = await self.kube.get(self._path)
            body = leader.released(lease or {}, me=self.settings.identity, wall=datetime.now(UTC))
            if lease is not None and body is not None:
                await self.kube.merge_patch(self._path, _conditional(body))
                s = self.settings
                logger.info("released the lease %s/%s", s.lease_namespace, s.lease_name)
        except (kube_mod.KubeError, OSError, TimeoutError) as exc:
            logger.warning("releasing the lease failed (it expires on its own): %s", exc)


def _conditional(lease: dict[str, Any]) -> dict[str, Any]:
    """A merge patch of the Lease's spec that applies only to the resourceVersion it was read at."""
    version = (lease.get("metadata") or {}).get("resourceVersion")
    patch: dict[str, Any] = {"spec": lease.get("spec") or {}}
    if version:
        patch["metadata"] = {"resourceVersion": version}
    return patch
