"""Two Lease candidates against the emulated API: one leads, the standby takes over on release or expiry.

The emulated API answers a patch carrying a stale ``metadata.resourceVersion`` with 409 Conflict, as
the apiserver does (checked against the real one in tests/controlplane/test_emulation_matches.py), so a
renewal that conflicts is exercised here; the race of two candidates for one expired Lease is in
tests/controlplane/test_leader_real.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.logs.stored import run_sync

from podmortem.kube.api import Kube, KubeError
from podmortem.kube.config import ClusterAccess
from podmortem.kube.session import ApiSession
from podmortem.logs.storage import layout
from podmortem.operator.settings import LeaderElectionSettings
from podmortem.operator.watching import run as runtime
from podmortem.operator.watching.leadership import Elector
from podmortem_demo.harness import Harness, harness

LEASE = "/apis/coordination.k8s.io/v1/namespaces/podmortem/leases/podmortem-operator"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with harness(tmp_path_factory.mktemp("lease")) as h:
        yield h


def election(me: str) -> LeaderElectionSettings:
    return LeaderElectionSettings(
        lease_namespace="podmortem",
        identity=me,
        lease_duration_s=1.0,
        renew_deadline_s=0.5,
        retry_period_s=0.1,
    )


async def _scenario(url: str) -> list[str]:
    seen: list[str] = []
    async with ApiSession(ClusterAccess(server=url)) as api:
        kube = Kube(api=api, timeout_s=5.0)
        a, b = Elector(kube=kube, settings=election("a")), Elector(kube=kube, settings=election("b"))
        stop = asyncio.Event()
        assert await a.acquire(stop=stop)
        assert not await b.try_once() and b.holder == "a" and b.describe() == "standby (leader: a)"
        # A graceful stop releases: the standby need not wait for the Lease to expire.
        await a.release()
        assert await b.try_once()
        b.is_leader = True
        seen.append("b took over a released lease")
        # b dies without releasing (no renewals): a waits out the duration on its own clock, then leads.
        took = asyncio.get_running_loop().time()
        assert await a.acquire(stop=stop)
        waited = asyncio.get_running_loop().time() - took
        seen.append(f"a took over an expired lease after {waited:.1f} s")
        # b comes back and finds the Lease gone to a: its renewal loop reports the loss.
        lost = asyncio.Event()
        await b.keep(lost=lost)
        assert lost.is_set() and not b.is_leader and b.holder == "a"
        seen.append("b saw it lost the lease")
    return seen


def test_standby_takes_over_on_release_and_on_expiry(cluster: Harness) -> None:
    seen = cluster.call(_scenario(cluster.url))
    assert seen[0] == "b took over a released lease"
    assert seen[2] == "b saw it lost the lease"
    lease = cluster.get(LEASE)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseTransitions"] == 2


class RacingKube(Kube):
    """The operator's client, with a second writer that touches the Lease between our read and our
    conditional write when ``race_next`` is set: our write then carries a stale resourceVersion."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.race_next = False
        self.conflicts = 0

    async def get(self, path: str) -> dict[str, Any] | None:
        lease = await super().get(path)
        if self.race_next and lease is not None:
            self.race_next = False
            await super().merge_patch(path, {"metadata": {"labels": {"touched-by": "someone-else"}}})
        return lease

    async def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return await super().merge_patch(path, patch)
        except KubeError as exc:
            self.conflicts += exc.status == 409
            raise


def test_a_leader_paused_past_the_renew_deadline_retries_a_renewal_that_conflicts(cluster: Harness) -> None:
    """As client-go: the renew deadline counts from the start of each renewal, not from the last success.

    The leader's process stalls (the whole loop blocked) for 1 s: past its 0.5 s renew deadline, well
    within the Lease's 10 s. Its first renewal after that gets a real 409 Conflict (another writer
    touched the Lease between its read and its write); it retries within the deadline and stays leader.
    Counted from the last success, the deadline had passed: the leader gave up on that one 409."""
    settings = LeaderElectionSettings(lease_namespace="paused", identity="a", lease_duration_s=10.0,
                                      renew_deadline_s=0.5, retry_period_s=0.1)

    async def scenario() -> tuple[int, bool, bool]:
        async with ApiSession(ClusterAccess(server=cluster.url)) as api:
            kube = RacingKube(api=api, timeout_s=5.0)
            a = Elector(kube=kube, settings=settings)
            assert await a.acquire(stop=asyncio.Event())
            lost = asyncio.Event()
            keeper = asyncio.create_task(a.keep(lost=lost))
            await asyncio.sleep(0.3)  # a few renewals
            kube.race_next = True
            time.sleep(1.0)  # noqa: ASYNC251 (the process stalls: no renewal for twice the renew deadline)
            await asyncio.sleep(1.0)
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            return kube.conflicts, lost.is_set(), a.is_leader

    conflicts, lost, leader = run_sync(scenario())
    assert conflicts == 1, "the renewal after the pause did not meet a 409 Conflict"
    assert not lost and leader, "one conflicting renewal after a pause ended the leadership"
    lease = cluster.get("/apis/coordination.k8s.io/v1/namespaces/paused/leases/podmortem-operator")
    assert lease is not None and lease["spec"]["holderIdentity"] == "a"


def test_a_new_leader_waiting_for_the_store_lock_exits_when_it_loses_the_lease(tmp_path: Path) -> None:
    """The replica that won the Lease waits for the old leader's store lock (the old leader still
    writes); meanwhile another replica takes the Lease. The waiting one stops waiting and exits
    (LeadershipLost: the Deployment restarts it as a standby), rather than waiting on with no Lease."""
    with harness(tmp_path) as h:
        settings = h.settings(leader_election=LeaderElectionSettings(
            lease_namespace="podmortem", identity="b", lease_duration_s=3.0, renew_deadline_s=1.0,
            retry_period_s=0.2))
        settings.store_dir.mkdir(parents=True, exist_ok=True)
        lock = os.open(settings.store_dir / layout.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(lock, fcntl.LOCK_EX)  # the old leader, still writing the store
        try:
            h.start_operator(settings)
            deadline = time.monotonic() + 30
            while (h.get(LEASE) or {}).get("spec", {}).get("holderIdentity") != "b":
                assert time.monotonic() < deadline, "the operator did not take the Lease"
                time.sleep(0.05)
            time.sleep(0.5)  # it waits for the lock now
            assert h.operator_error is None
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            h.patch(LEASE, {"spec": {"holderIdentity": "c", "renewTime": now, "acquireTime": now}})
            while h.operator_error is None:
                assert time.monotonic() < deadline + 30, "the replica kept waiting for the store lock"
                time.sleep(0.05)
            assert isinstance(h.operator_error, runtime.LeadershipLost), h.operator_error
            assert "waiting for the log store's lock" in str(h.operator_error)
        finally:
            os.close(lock)
