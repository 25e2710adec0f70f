"""The reports the operator holds: every report of a pod still known, the latest per pod and per target.

What a restart count, a foreign job's page and its section read. A pod's reports go with the pod
(`forget_pod`, or `drop_pod` past its log's retention) or with its job (`forget_target`); nothing
else removes them, so a pod gone either way leaves nothing here.
"""

from __future__ import annotations

import asyncio

from podmortem.operator.reporting.job_view import JobView
from podmortem.operator.reporting.outcome import Outcome


class Reports:
    """The reports kept, by pod uid and by target; the job sections; one write lock per target."""

    def __init__(self) -> None:
        #: Every report of a pod still known, by pod uid, in the order written.
        self._of_pod: dict[str, list[Outcome]] = {}
        #: The latest outcome per pod uid (a job's report shows its root-cause pod's).
        self.by_pod: dict[str, Outcome] = {}
        #: The latest outcome of each target that is not a TrainingJob, by (namespace, name): its page.
        self._latest: dict[tuple[str, str], Outcome] = {}
        #: Target uid -> its job-level root cause, for foreign jobs with more than one pod.
        self.jobs: dict[str, JobView] = {}
        #: One annotation write at a time per target, each composed from the state at its turn.
        self.target_locks: dict[str, asyncio.Lock] = {}
        self._written = 0

    @property
    def outcomes(self) -> list[Outcome]:
        """Every report still kept, in the order written (for tests, the bench and the page)."""
        return sorted((o for kept in self._of_pod.values() for o in kept), key=lambda o: o.order)

    def of_pod(self, pod_uid: str) -> list[Outcome]:
        """The pod's reports, oldest first (empty when none is kept)."""
        return list(self._of_pod.get(pod_uid, ()))

    def latest_of(self, namespace: str, name: str) -> Outcome | None:
        """The latest report of a target that is not a TrainingJob (its page), if still kept."""
        return self._latest.get((namespace, name))

    def keep(self, outcome: Outcome, *, latest: bool = True) -> None:
        """Hold a report just made; ``latest``: it is now its pod's latest (a resumed one may not be)."""
        self._written += 1
        outcome.order = self._written
        uid = outcome.termination.pod_uid
        self._of_pod.setdefault(uid, []).append(outcome)
        if latest:
            self.by_pod[uid] = outcome
        else:
            self.by_pod.setdefault(uid, outcome)
        if outcome.target.role != "trainingjob":
            self._latest[(outcome.target.namespace, outcome.target.name)] = outcome

    def lock_of(self, target_uid: str) -> asyncio.Lock:
        """The target's annotation-write lock."""
        return self.target_locks.setdefault(target_uid, asyncio.Lock())

    def forget_pod(self, pod_uid: str) -> None:
        """The pod is deleted: drop its reports, unless a foreign job's section and page still show them
        (they go with the job, `forget_target`). A TrainingJob's report stays in its status."""
        if any(o.target.role == "foreign" for o in self._of_pod.get(pod_uid, ())):
            return
        self.drop_pod(pod_uid)

    def drop_pod(self, pod_uid: str) -> None:
        """The pod finished long ago and nobody deletes it: drop its reports, whatever its job."""
        for outcome in self._of_pod.pop(pod_uid, []):
            key = (outcome.target.namespace, outcome.target.name)
            if self._latest.get(key) is outcome:
                del self._latest[key]
        self.by_pod.pop(pod_uid, None)
        lock = self.target_locks.get(pod_uid)  # a bare pod is its own target
        if lock is not None and not lock.locked():
            del self.target_locks[pod_uid]

    def forget_target(self, target_uid: str) -> None:
        """The job (TrainingJob or a foreign one) is deleted: drop its section and all its pods' reports."""
        self.jobs.pop(target_uid, None)
        self.target_locks.pop(target_uid, None)
        pods = [uid for uid, kept in self._of_pod.items() if any(o.target.uid == target_uid for o in kept)]
        for uid in pods:
            self.drop_pod(uid)

    def kept(self) -> dict[str, int]:
        """How much per-pod and per-job state is held (for tests and the soak bench)."""
        return {"pods": len(self._of_pod), "reports": sum(map(len, self._of_pod.values())),
                "latest": len(self._latest), "jobs": len(self.jobs), "locks": len(self.target_locks)}
