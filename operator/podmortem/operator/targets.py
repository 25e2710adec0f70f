"""The operator's index of followed targets: owner uid -> target, and pod uid -> its owner's target.

One object, built before the services that read it (the store's sink, the early warning, the
reporter, the service), so none of them reaches into another for it.

Who changes what: `podmortem.operator.watching.service.OperatorService` adds and replaces owners and
pods, and a pod's rank; a pod or an owner goes only through `podmortem.operator.records.Records`,
whose hooks call `Targets.forget_pod` and `Targets.forget_owner`. Within a `WatchedTarget`, the
early warning (`podmortem.operator.watching.early_warning`) updates ``pressure``; the service and
the reporter update the job section's ``job_pods`` and ``job_root`` (the reporter when a pod's
report changes after it was written); the service alone ``announced``, ``job_dirty`` and
``job_task``. What the status holds is `podmortem.operator.status.StatusWriter`'s alone.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from podmortem.diagnosis import job_root_cause
from podmortem.operator import job_pressure, watch_options
from podmortem.operator.jobs import Target


@dataclass
class WatchedTarget:
    """What the operator keeps per followed target between events."""

    target: Target
    #: The early warning per pod and container (ranks' memory lines interleave), and the job's from them.
    pressure: job_pressure.JobPressure = field(default_factory=job_pressure.JobPressure)
    #: Pod uid -> rank (None: unknown), for naming the rank in MemoryPressure.
    ranks: dict[str, int | None] = field(default_factory=dict)
    #: Option problems already announced (so an Event is posted once, not at every event).
    announced: set[str] = field(default_factory=set)
    #: A foreign job's pods (uid -> facts), kept after a pod is deleted, for the job-level root cause.
    job_pods: dict[str, job_root_cause.PodFacts] = field(default_factory=dict)
    #: The root-cause pod, whether a guess, and its line, as last announced by a ``JobRootCause`` Event.
    job_root: tuple[str, bool, str] | None = None
    #: Pod facts changed since the job section was last computed; the task that will compute it.
    job_dirty: bool = False
    job_task: asyncio.Task[None] | None = None


class Targets:
    """Followed owners and pods. ``owners``: owner uid -> target; ``pods``: pod uid -> its owner's."""

    def __init__(self) -> None:
        self.owners: dict[str, WatchedTarget] = {}
        self.pods: dict[str, WatchedTarget] = {}

    def job_of(self, pod_uid: str) -> str | None:
        """The job a pod's log is filed under in the store (retention is per job); None for bare pods."""
        known = self.pods.get(pod_uid)
        return known.target.name if known is not None and known.target.role != "pod" else None

    def retention_of(self, pod_uid: str) -> watch_options.Retention | None:
        """The log retention the pod's job asked for (spec.logRetention or the annotation), if any."""
        known = self.pods.get(pod_uid)
        return known.target.options.log_retention if known is not None else None

    def forget_pod(self, pod_uid: str) -> None:
        """The pod is forgotten (`podmortem.operator.records.Records`): it leaves the index, its owner's
        pressure and ranks."""
        known = self.pods.pop(pod_uid, None)
        if known is not None:
            known.pressure.forget(pod_uid)
            known.ranks.pop(pod_uid, None)

    def forget_owner(self, uid: str) -> None:
        """The owner is forgotten (deleted): its target goes; pods still indexed under it go with their own
        forget (each pod is deleted too, and a relist sees it gone)."""
        self.owners.pop(uid, None)
