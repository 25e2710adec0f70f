"""MemoryPressure tells the same figures as status.memory, names them, and ends when the job succeeds.

A demo run once showed the pod's peak as "0.19 GiB (76%)" in the condition and
"227Mi (89%)" in status.memory at the same epoch: the condition quoted the
epoch's own peak (what the projection is fitted to) but called it the pod peak,
in other units. And a job that succeeded kept ``MemoryPressure True``.
"""

from __future__ import annotations

import re
from typing import Any, cast

from podmortem import memory_line
from podmortem.kube.api import Kube
from podmortem.memory_line import projection
from podmortem.memory_line import status as memory_status
from podmortem.operator.status import MEMORY_PRESSURE, SUCCEEDED_REASON, StatusWriter, settle_on_success

MIB = 2**20
LINES = [
    "-> memory epoch 0: rss 76.92MiB (peak 76.92MiB), pod 58.93MiB of 256.00MiB "
    "(peak 65.20MiB, epoch peak 58.93MiB), workers 0 pss 0B",
    "-> memory epoch 1: rss 116.92MiB (peak 117.33MiB), pod 99.21MiB of 256.00MiB "
    "(peak 146.49MiB, epoch peak 136.24MiB), workers 0 pss 0B",
    "-> memory epoch 2: rss 157.09MiB (peak 157.51MiB), pod 139.71MiB of 256.00MiB "
    "(peak 226.59MiB, epoch peak 194.59MiB), workers 0 pss 0B",
]


def pressure_from(lines: list[str]) -> tuple[projection.MemoryPressure, dict[str, Any]]:
    parsed = [memory_line.parse(text) for text in lines]
    peaks = [memory_status.epoch_peak(line) for line in parsed if line is not None]
    last = parsed[-1]
    assert last is not None and last.pod is not None
    pressure = projection.assess(
        [p for p in peaks if p is not None],
        limit_bytes=last.pod.limit_bytes,
        within_epochs=3,
        warning_ratio=0.9,
    )
    assert pressure is not None
    return pressure, memory_status.status_memory(last, observed_ns=0)


def test_the_condition_quotes_status_memory_peak_and_names_the_epoch_peak() -> None:
    pressure, status = pressure_from(LINES)
    message = pressure.message()
    # status.memory says "227Mi/256Mi (89%, memory line)" (and where from, in peakSource); the condition
    # says the same pod peak, in the same units.
    assert status["peakOfLimit"] == "227Mi/256Mi (89%, memory line)"
    assert status["peakSource"] == "the trainer's memory line (epoch 2)"
    assert "pod peak so far 227Mi (89%)" in message
    # The figure the line is fitted to is called what it is: the epoch's own peak.
    assert message.startswith("epoch 2: epoch peak 195Mi of the 256Mi limit (76%), ")
    assert "growing 67.8Mi/epoch" in message
    assert "GiB" not in message and not re.search(r"\d\.\d\d ", message)


def test_without_an_epoch_peak_the_pod_peak_is_tracked_and_called_so() -> None:
    lines = [re.sub(r", epoch peak [0-9.]+MiB", "", text) for text in LINES]
    pressure, status = pressure_from(lines)
    assert pressure.pod_peak_bytes is None
    assert pressure.message().startswith("epoch 2: pod peak 227Mi of the 256Mi limit (89%), growing")
    assert status["peakOfLimit"].startswith("227Mi/256Mi (89%")


def test_above_the_ratio_message_uses_the_same_units() -> None:
    peaks = [
        projection.EpochPeak(epoch=e, peak_bytes=240 * MIB, pod_peak_bytes=250 * MIB) for e in range(3)
    ]
    pressure = projection.assess(peaks, limit_bytes=256 * MIB, within_epochs=3, warning_ratio=0.9)
    assert pressure is not None and pressure.over_ratio
    assert pressure.message() == (
        "epoch 2: epoch peak 240Mi of the 256Mi limit (94%), pod peak so far 250Mi (98%), "
        "above the warning ratio 0.9"
    )


def test_short_size_is_the_one_status_memory_uses() -> None:
    assert memory_status.short_size is projection.short_size
    assert memory_status.short_size(31242766336) == "29.1Gi"
    assert memory_status.peak_of_limit(268435456, 268435456) == "256Mi/256Mi (100%)"


class PatchingKube:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body["status"])
        return body


def writer() -> tuple[StatusWriter, PatchingKube]:
    kube = PatchingKube()
    return StatusWriter(kube=cast(Kube, kube)), kube


def pressure_condition(conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return next(c for c in conditions if c["type"] == MEMORY_PRESSURE)


async def test_a_succeeded_job_has_memory_pressure_false() -> None:
    w, kube = writer()
    w.seed(namespace="ns", name="tj", status={"phase": "Running"})
    warned = "tj-train: epoch 2: epoch peak 154Mi of the 256Mi limit (60%), ..."
    await w.patch(
        namespace="ns", name="tj", conditions=[(MEMORY_PRESSURE, True, "ProjectedToCrossLimit", warned)]
    )
    assert pressure_condition(kube.bodies[-1]["conditions"])["status"] == "True"
    await w.patch(namespace="ns", name="tj", fields={"phase": "Succeeded", "exitCode": 0})
    body = kube.bodies[-1]
    assert body["phase"] == "Succeeded"
    cond = pressure_condition(body["conditions"])
    assert (cond["status"], cond["reason"]) == ("False", SUCCEEDED_REASON)
    assert warned in cond["message"]  # what was warned is kept
    # Later patches (the log counters) leave the conditions alone.
    await w.patch(namespace="ns", name="tj", fields={"log": {"lines": 3}})
    assert "conditions" not in kube.bodies[-1]


async def test_a_warning_that_arrives_after_success_is_settled_in_the_same_patch() -> None:
    w, kube = writer()
    w.seed(namespace="ns", name="tj", status={"phase": "Succeeded"})
    await w.patch(namespace="ns", name="tj", conditions=[(MEMORY_PRESSURE, True, "PeakNearLimit", "late")])
    assert len(kube.bodies) == 1
    assert pressure_condition(kube.bodies[0]["conditions"])["status"] == "False"


async def test_a_failed_job_keeps_the_warning_that_came_true() -> None:
    w, kube = writer()
    await w.patch(
        namespace="ns", name="tj", conditions=[(MEMORY_PRESSURE, True, "ProjectedToCrossLimit", "m")]
    )
    await w.patch(namespace="ns", name="tj", fields={"phase": "Failed"})
    assert "conditions" not in kube.bodies[-1]
    assert pressure_condition(w.conditions(namespace="ns", name="tj"))["status"] == "True"


def test_settle_on_success_leaves_other_phases_and_conditions_alone() -> None:
    conditions = [
        {"type": MEMORY_PRESSURE, "status": "True", "message": "m"},
        {"type": "X", "status": "True"},
    ]
    assert settle_on_success(conditions, phase="Running", now="t") is conditions
    settled = settle_on_success(conditions, phase="Succeeded", now="t")
    assert settled[1] == {"type": "X", "status": "True"}
    assert settled[0]["lastTransitionTime"] == "t"
    assert settle_on_success(settled, phase="Succeeded", now="t2") is settled
