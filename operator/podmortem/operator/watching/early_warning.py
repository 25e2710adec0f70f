"""The early warning: memory lines from the trainers' logs, turned into status, conditions and Events.

Each followed pod's log passes its ``podmortem-memory`` lines here as they are stored. A
TrainingJob's status shows the last one; every target's job pressure is observed per pod and
container, with a ``MemoryPressure`` condition (TrainingJobs) and Events when it starts or ends;
the projection line a pod's report timeline draws is kept here and read by the reporter.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from podmortem import memory_line
from podmortem.kube.api import Kube, KubeError
from podmortem.memory_line import status as memory_status
from podmortem.operator import job_pressure, metrics
from podmortem.operator.followed_pods import PodLogFacts, log_status_fields
from podmortem.operator.job_pressure import ProjectionLine
from podmortem.operator.jobs import Target
from podmortem.operator.status import StatusWriter
from podmortem.operator.targets import Targets, WatchedTarget

logger = logging.getLogger(__name__)


class EarlyWarning:
    """Memory lines of followed pods: the last one in the status, the pressure, the projection."""

    def __init__(self, *, kube: Kube, status: StatusWriter, targets: Targets, log_url: str) -> None:
        self.kube = kube
        self.status = status
        self.targets = targets
        self.log_url = log_url
        #: Per pod: the projection line, for the report's timeline (`projection_of`).
        self.projections: dict[str, ProjectionLine] = {}
        self._epoch_times: dict[tuple[str, str], list[tuple[int, int]]] = {}

    def projection_of(self, pod_uid: str) -> ProjectionLine | None:
        return self.projections.get(pod_uid)

    def forget(self, pod_uid: str) -> None:
        """A deleted pod: its projection and epoch times go."""
        self.projections.pop(pod_uid, None)
        for key in [k for k in self._epoch_times if k[0] == pod_uid]:
            del self._epoch_times[key]

    async def on_memory_line(self, facts: PodLogFacts, container: str, ts_ns: int, text: bytes) -> None:
        known = self.targets.pods.get(facts.pod_uid)
        if known is None:
            return
        try:
            line = memory_line.parse(text.decode("utf-8", "replace"))
        except memory_line.MemoryLineError as exc:
            logger.warning("%s/%s: %s", facts.namespace, facts.pod, exc)
            return
        if line is None:
            return
        target = known.target
        if target.role == "trainingjob":
            fields = {"memory": memory_status.status_memory(line, observed_ns=ts_ns)}
            fields.update(log_status_fields(facts, log_url=self.log_url))
            await self.status.patch(namespace=target.namespace, name=target.name, fields=fields)
        peak = memory_status.epoch_peak(line)
        if peak is None or line.pod is None:
            return
        change = known.pressure.observe(
            pod_uid=facts.pod_uid,
            pod=facts.pod,
            container=container,
            rank=known.ranks.get(facts.pod_uid),
            peak=peak,
            limit_bytes=line.pod.limit_bytes,
            within_epochs=target.options.early_warning_epochs,
            warning_ratio=target.options.memory_warning_ratio,
        )
        self._note_projection(facts.pod_uid, container, known, peak.epoch, ts_ns)
        if change is None:
            return
        if change.started is not None:
            metrics.MEMORY_PRESSURE.labels(namespace=target.namespace).inc()
        await self._pressure_condition(target, change.on, change.reason, change.message)
        if change.started is not None:
            await self._event(target.involved(), "Warning", "MemoryPressure", change.started)
        elif not change.on and target.role != "trainingjob":  # no condition to show the end: an Event
            await self._event(target.involved(), "Normal", "MemoryPressureEnded", change.message)

    def _note_projection(
        self, pod_uid: str, container: str, known: WatchedTarget, epoch: int, ts_ns: int
    ) -> None:
        """Keep the pod's projection line for its report's timeline (None when it projects nothing)."""
        seen = self._epoch_times.setdefault((pod_uid, container), [])
        if not seen or seen[-1][0] != epoch:
            seen.append((epoch, ts_ns))
            del seen[:-2]
        pressure = known.pressure.pressure_of(pod_uid, container)
        line = None
        if pressure is not None:
            epoch_s = job_pressure.epoch_seconds(seen)
            line = job_pressure.projection_line(pressure, at_ns=ts_ns, epoch_s=epoch_s)
        if line is None:
            self.projections.pop(pod_uid, None)
        else:
            self.projections[pod_uid] = line

    async def _pressure_condition(self, target: Target, on: bool, reason: str, message: str) -> None:
        """The ``MemoryPressure`` condition, on TrainingJobs (other targets get Events only)."""
        if target.role == "trainingjob":
            await self.status.patch(
                namespace=target.namespace,
                name=target.name,
                conditions=[("MemoryPressure", on, reason, message)],
            )

    async def _event(self, involved: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            await self.kube.post_event(involved=involved, type_=type_, reason=reason, message=message)
        except (KubeError, OSError, TimeoutError) as exc:
            logger.warning("posting event %s failed: %s", reason, exc)
