"""The operator's index of followed targets: owner uid -> target, and pod uid -> its owner's target.

One object, built before the services that read it (the store's sink, the early warning, the
service), so none of them reaches into another for it. The kopf handlers change it only through
`podmortem.operator.watching.service.OperatorService`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from podmortem.diagnosis import job_root_cause
from podmortem.operator import annotations as opts
from podmortem.operator import job_pressure
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
    #: The last status fields written, to skip writes that change nothing.
    written: dict[str, Any] = field(default_factory=dict)
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

    def retention_of(self, pod_uid: str) -> opts.Retention | None:
        """The log retention the pod's job asked for (spec.logRetention or the annotation), if any."""
        known = self.pods.get(pod_uid)
        return known.target.options.log_retention if known is not None else None
