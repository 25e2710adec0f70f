"""The operator's per-pod and per-job records, and the one way each is forgotten. Pure.

The operator's components each keep something per pod (its log facts, its reports, its projection
line, its job's pressure) or per job (its status conditions, its section, its followed target).
Each such part lives in a record here or in a collection whose owner registered a hook: a pod is
forgotten by `Records.forget_pod` alone, whether it was deleted, seen gone at a relist, or finished
longer ago than its log's retention (`Records.expire_finished`), so no component can be skipped by
one path and not by another. A job is forgotten by `Records.forget_job`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

#: Why a pod is forgotten: deleted (seen deleted, or missing from a relist), or expired (finished for
#: good longer ago than its log's retention and never deleted). A foreign job's section keeps a
#: deleted pod's report until the job goes; an expired pod's goes at once.
Reason = Literal["deleted", "expired"]

PodHook = Callable[[str, Reason], None]
JobHook = Callable[["JobRecord"], None]


@dataclass
class PodRecord:
    """One followed pod, from its first event until it is forgotten."""

    uid: str
    namespace: str
    name: str
    #: Terminations reported (or found reported), by termination key: reported once.
    reported: set[str] = field(default_factory=set)
    #: When the pod was first seen finished for good (wall-clock seconds); None while it may run again.
    finished_at: float | None = None


@dataclass
class JobRecord:
    """One object of a job kind: a TrainingJob, or a configured foreign kind (Job, JobSet, ...)."""

    uid: str
    namespace: str
    name: str
    #: "trainingjob" or "foreign" while followed; None for an object only known as some pod's ancestor.
    role: str | None = None
    #: Its owners' uids, watched or not: a pod's Job may belong to an annotated JobSet.
    parents: tuple[str, ...] = ()


class Records:
    """Per-pod and per-job records by uid, and the hooks called when one is forgotten."""

    def __init__(self) -> None:
        self.pods: dict[str, PodRecord] = {}
        self.jobs: dict[str, JobRecord] = {}
        self._pod_hooks: list[PodHook] = []
        self._job_hooks: list[JobHook] = []

    def on_forget_pod(self, hook: PodHook) -> None:
        """Call ``hook(uid, reason)`` whenever a pod is forgotten; hooks run in registration order."""
        self._pod_hooks.append(hook)

    def on_forget_job(self, hook: JobHook) -> None:
        """Call ``hook(record)`` whenever a job is forgotten."""
        self._job_hooks.append(hook)

    # --- pods ------------------------------------------------------------------------------------

    def pod(self, uid: str, *, namespace: str, name: str) -> PodRecord:
        """The pod's record, made the first time."""
        record = self.pods.get(uid)
        if record is None:
            record = self.pods[uid] = PodRecord(uid=uid, namespace=namespace, name=name)
        return record

    def reported(self, uid: str, key: str) -> bool:
        record = self.pods.get(uid)
        return record is not None and key in record.reported

    def note_reported(self, uid: str, key: str) -> None:
        """Remember that termination ``key`` of the pod is reported (nothing if already forgotten)."""
        record = self.pods.get(uid)
        if record is not None:
            record.reported.add(key)

    def note_phase(self, uid: str, *, finished: bool, now: float) -> None:
        """The pod's phase as last seen: finished for good (from ``now``, kept if earlier) or not."""
        record = self.pods.get(uid)
        if record is None:
            return
        if not finished:
            record.finished_at = None
        elif record.finished_at is None:
            record.finished_at = now

    def forget_pod(self, uid: str, reason: Reason = "deleted") -> None:
        """Drop the pod's record and call every pod hook: the one way a pod's state goes."""
        self.pods.pop(uid, None)
        for hook in self._pod_hooks:
            hook(uid, reason)

    def expire_finished(self, *, now: float, retention_s: float, ready: Callable[[str], bool]) -> int:
        """Forget each pod finished at least ``retention_s`` before ``now`` for which ``ready(uid)``
        (nothing of it still being written); the others wait for a later call. Returns how many went."""
        due = [r.uid for r in self.pods.values()
               if r.finished_at is not None and now - r.finished_at >= retention_s]
        gone = 0
        for uid in due:
            if ready(uid):
                self.forget_pod(uid, "expired")
                gone += 1
        return gone

    # --- jobs ------------------------------------------------------------------------------------

    def job(self, uid: str, *, namespace: str, name: str) -> JobRecord:
        """The job's record, made the first time (namespace and name kept current)."""
        record = self.jobs.get(uid)
        if record is None:
            record = self.jobs[uid] = JobRecord(uid=uid, namespace=namespace, name=name)
        else:
            record.namespace, record.name = namespace, name
        return record

    def parents_of(self, uid: str) -> tuple[str, ...]:
        record = self.jobs.get(uid)
        return record.parents if record is not None else ()

    def forget_job(self, uid: str) -> None:
        """Drop the job's record and call every job hook (with the record, or a bare one if none was kept)."""
        record = self.jobs.pop(uid, None) or JobRecord(uid=uid, namespace="", name="")
        for hook in self._job_hooks:
            hook(record)
