"""Two Lease candidates against the emulated API: one leads, the standby takes over on release or expiry.

kmock 0.8 has no resourceVersion handling (and no PUT): a patch carrying a stale
``metadata.resourceVersion`` is applied, where the apiserver answers 409. So the
optimistic concurrency that settles a race between two candidates for an
expired Lease is not exercised here; the candidates below take turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from podmortem.kube import api as kube_mod
from podmortem.operator.settings import LeaderElectionSettings
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
    async with ApiClient(configuration=Configuration(host=url)) as api:
        kube = kube_mod.Kube(api=api, timeout_s=5.0)
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
