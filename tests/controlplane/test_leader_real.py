"""Leader election (``operator/watching/leadership.py``) with real coordination.k8s.io Leases.

Two ``podmortem operator`` processes with the chart's environment (leader election on, the chart's
Lease: 15 s duration, 10 s renew deadline, 2 s retry), its RBAC (a ServiceAccount token; the Role
that allows ``create`` on Leases and ``get``/``patch`` on its own) and one log store folder between
them, as a ReadWriteMany volume would be. Who leads is read from the Lease and from each process's
``/readyz`` ("leader (lease ...)" or "standby (leader: ...)"); the 409s from the API server's audit log.

The conflicts are made by the API server itself: a validating webhook (:class:`_operators.LeaseHold`)
holds the operator's Lease write between the server's read of the Lease and its write, while another
write lands; the server's compare-and-swap then fails and it answers ``409 Conflict``.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

from tests.controlplane import _operators as ops
from tests.controlplane.cluster import ControlPlane

#: How often the tests look at who leads while they check that no two processes do.
LOOK_EVERY_S = 0.25


def duration_s(release: ops.Release) -> int:
    """The Lease duration the chart gives the operator."""
    return int(release.env["PODMORTEM_LEADER_ELECTION_LEASE_DURATION_SECONDS"])


def leaders(*operators: ops.Operator) -> list[str]:
    """The processes whose /readyz says they lead now."""
    return [o.identity for o in operators if "leader (lease" in o.readyz()[1]]


def lease_409s(plane: ControlPlane, release: ops.Release) -> list[tuple[str, str]]:
    """(verb, message) of each Lease request of the release's ServiceAccount answered 409."""
    return [(e["verb"], e.get("responseStatus", {}).get("message", ""))
            for e in plane.audit(user=release.user)
            if e.get("objectRef", {}).get("resource") == "leases" and e.get("stage") == "ResponseComplete"
            and e.get("responseStatus", {}).get("code") == 409]


def watch_for_two_leaders(seconds: float, *operators: ops.Operator) -> int:
    """Look at every process's /readyz for ``seconds``: fail at once if two lead; how many looks."""
    looks = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        leading = leaders(*operators)
        assert len(leading) <= 1, f"two leaders at once: {leading}"
        for o in operators:
            assert o.process.alive(), \
                f"{o.identity} exited {o.process.proc.returncode}:\n{o.output()[-3000:]}"
        looks += 1
        time.sleep(LOOK_EVERY_S)
    return looks


def test_the_standby_holds_the_lease_within_its_duration_plus_10_s_after_the_leader_is_sigkilled(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    with ops.install(control_plane, namespace) as release, ExitStack() as stack:
        duration = duration_s(release)
        store = tmp_path / "shared-store"
        a = ops.start(control_plane, release, tmp_path, "replica-a", store=store)
        stack.callback(a.stop)
        a.wait_ready("leader (lease", timeout=180)
        b = ops.start(control_plane, release, tmp_path, "replica-b", store=store)
        stack.callback(b.stop)
        b.wait_ready("standby (leader: replica-a)", timeout=180)
        assert ops.holder(control_plane, release) == "replica-a"
        before = (ops.lease(control_plane, release) or {})["spec"]
        a.kill()
        killed = time.monotonic()
        ops.wait(lambda: ops.holder(control_plane, release) == "replica-b" or None,
                 what="replica-b holding the Lease", timeout=duration + 60, every=0.1, operators=(b,))
        took = time.monotonic() - killed
        b.wait_ready("leader (lease", timeout=120)
        after = (ops.lease(control_plane, release) or {})["spec"]
        print(f"\nthe standby held the Lease {took:.1f} s after the leader's SIGKILL "
              f"(lease {duration} s; the bound is {duration + 10} s); "
              f"leaseTransitions {before.get('leaseTransitions')} -> {after.get('leaseTransitions')}")
        assert took <= duration + 10, f"took {took:.1f} s"
        assert after["leaseDurationSeconds"] == duration
        assert int(after.get("leaseTransitions") or 0) == int(before.get("leaseTransitions") or 0) + 1


def test_two_replicas_racing_to_create_the_lease_make_one_leader_and_a_409(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Both see no Lease and both create it, at the same moment (the webhook lets both creates go
    together): the API server answers one 201 and the other 409 AlreadyExists; the loser waits as a
    standby, never a second leader."""
    with ops.install(control_plane, namespace) as release, ExitStack() as stack:
        hold = ops.LeaseHold(control_plane, release, tmp_path)
        stack.callback(hold.close)
        hold.arm("CREATE", 2, together=True)
        store = tmp_path / "shared-store"
        a = ops.start(control_plane, release, tmp_path, "replica-a", store=store)
        stack.callback(a.stop)
        b = ops.start(control_plane, release, tmp_path, "replica-b", store=store)
        stack.callback(b.stop)
        held = hold.wait_held(2, timeout=180)
        assert sorted(h for _, h in held) == ["replica-a", "replica-b"], held
        winner = ops.wait(lambda: ops.holder(control_plane, release) or None, what="a Lease holder",
                          operators=(a, b))
        loser = b if winner == "replica-a" else a
        ops.wait(lambda: 1 if leaders(a, b) == [winner] else None, what=f"{winner} ready as the leader",
                 timeout=180, operators=(a, b))
        loser.wait_ready(f"standby (leader: {winner})", timeout=120)
        conflicts = ops.wait(lambda: lease_409s(control_plane, release) or None,
                             what="the 409 in the audit log", operators=(a, b))
        print(f"\n{winner} won; 409s: {conflicts}")
        assert [verb for verb, _ in conflicts] == ["create"], conflicts
        assert "already exists" in conflicts[0][1]
        looks = watch_for_two_leaders(2 * duration_s(release), a, b)
        assert leaders(a, b) == [winner] and ops.holder(control_plane, release) == winner, looks
        # The loser never believed it led, not even before its first renewal (/readyz would not say
        # so then: it is not ready until its handlers run).
        assert "became the leader" not in loser.output(), loser.output()[-3000:]


def test_a_renewal_answered_409_is_retried_and_the_leader_keeps_the_lease(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The Lease changes behind its holder's back between the holder's read and its write: the
    renewal gets 409 Conflict. The leader reads it again and renews on its next try, and stays the
    only leader; it does not exit, and the standby does not take over."""
    with ops.install(control_plane, namespace) as release, ExitStack() as stack:
        hold = ops.LeaseHold(control_plane, release, tmp_path)
        stack.callback(hold.close)
        store = tmp_path / "shared-store"
        a = ops.start(control_plane, release, tmp_path, "replica-a", store=store)
        stack.callback(a.stop)
        a.wait_ready("leader (lease", timeout=180)
        b = ops.start(control_plane, release, tmp_path, "replica-b", store=store)
        stack.callback(b.stop)
        b.wait_ready("standby (leader: replica-a)", timeout=180)
        assert lease_409s(control_plane, release) == []
        hold.arm("UPDATE")
        try:
            assert hold.wait_held(1, timeout=60) == [("UPDATE", "replica-a")]
            # Behind the holder's back: a change that keeps the holder, as another client's write.
            control_plane.kubectl("annotate", "lease", release.lease, "-n", namespace,
                                  "podmortem.test/touched=behind-the-holders-back")
        finally:
            hold.release()
        conflicts = ops.wait(lambda: lease_409s(control_plane, release) or None, what="the renewal's 409",
                             operators=(a, b))
        print(f"\n409s: {conflicts}")
        assert [verb for verb, _ in conflicts] == ["patch"], conflicts
        assert "the object has been modified" in conflicts[0][1]
        renewed = (ops.lease(control_plane, release) or {})["spec"]["renewTime"]
        ops.wait(lambda: (ops.lease(control_plane, release) or {})["spec"]["renewTime"] != renewed or None,
                 what="a renewal after the 409", operators=(a, b))
        watch_for_two_leaders(2 * duration_s(release), a, b)
        assert leaders(a, b) == ["replica-a"] and ops.holder(control_plane, release) == "replica-a"
        assert "lost the lease" not in a.output()
