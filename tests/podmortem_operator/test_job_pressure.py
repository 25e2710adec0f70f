"""The early warning per rank: two ranks' memory lines interleave, each keeps its own projection.

Kept per job (as it was), the ranks' peaks were one list: with rank 1's line arriving first in
each epoch and rank 0's flat line last, the fit saw only rank 0 and rank 1 grew unwarned.
"""

from __future__ import annotations

from podmortem.memory_line import projection
from podmortem.operator.job_pressure import Change, JobPressure

GIB = 2**30
LIMIT = 32 * GIB


def peak(epoch: int, gib: float) -> projection.EpochPeak:
    return projection.EpochPeak(epoch=epoch, peak_bytes=int(gib * GIB), pod_peak_bytes=int(gib * GIB))


def feed(
    jp: JobPressure, uid: str, rank: int | None, epoch: int, gib: float, container: str = "trainer"
) -> Change | None:
    return jp.observe(
        pod_uid=uid, pod=f"ddp-{uid}", container=container, rank=rank, peak=peak(epoch, gib),
        limit_bytes=LIMIT, within_epochs=3, warning_ratio=0.9,
    )


def test_interleaved_ranks_are_projected_each_on_its_own_peaks() -> None:
    jp = JobPressure()
    grows = [20.0, 23.0, 26.0]
    changes = []
    for epoch, gib in enumerate(grows):
        changes.append(feed(jp, "w0", 1, epoch, gib))  # rank 1 first...
        changes.append(feed(jp, "m0", 0, epoch, 8.0))  # ...then rank 0, flat
    assert jp.pressure_of("m0", "trainer") is None
    rank1 = jp.pressure_of("w0", "trainer")
    assert rank1 is not None and rank1.growth_bytes_per_epoch == 3 * GIB
    assert rank1.epochs_to_limit == 2.0 and rank1.crossing_epoch == 4
    started = [c for c in changes if c is not None]
    assert len(started) == 1 and started[0].on and started[0].reason == "ProjectedToCrossLimit"
    assert started[0].started is not None
    assert started[0].started.startswith("ddp-w0 (rank 1): epoch 2: epoch peak 26Gi")
    assert started[0].message == started[0].started
    # What one list of both ranks' peaks would have said: nothing.
    mixed = [peak(e, g) for e, gib in enumerate(grows) for g in (gib, 8.0)]
    assert projection.assess(mixed, limit_bytes=LIMIT, within_epochs=3, warning_ratio=0.9) is None


def test_the_job_is_under_pressure_while_any_rank_is_and_names_the_most_urgent() -> None:
    jp = JobPressure()
    for epoch in range(3):
        feed(jp, "a", 0, epoch, 10.0 + 2 * epoch)  # 14 GiB at epoch 2, 9 epochs to go: not yet
        feed(jp, "b", 3, epoch, 22.0 + 3 * epoch)  # 28 GiB, 1.3 epochs to go
    assert jp.on and jp.pressure_of("a", "trainer") is None
    change = feed(jp, "c", 2, 0, 30.0)  # above 0.9 of the limit already: the most urgent
    assert change is not None and change.on and change.reason == "PeakNearLimit"
    assert change.started is not None
    assert change.started.startswith("ddp-c (rank 2): epoch 0: epoch peak 30Gi")
    assert change.message.startswith("ddp-c (rank 2): ")
    assert change.message.endswith("; also projected over: ddp-b (rank 3)")
    # Rank 2 drops back: rank 3 is still projected, the job stays under pressure, named by rank 3.
    change = feed(jp, "c", 2, 1, 12.0)
    assert change is not None and change.on and change.started is None
    assert change.message.startswith("ddp-b (rank 3): epoch 2:") and "also" not in change.message
    # The same state again changes nothing.
    assert feed(jp, "c", 2, 2, 11.0) is None
    change = feed(jp, "b", 3, 3, 15.0)
    assert change == Change(
        on=False,
        reason="NoProjectedCrossing",
        message="epoch 3: ddp-b (rank 3) is no longer projected to cross its limit, and no other rank is",
    )
    assert not jp.on


def test_a_single_pod_keeps_its_message_and_two_containers_are_told_apart() -> None:
    jp = JobPressure()
    for epoch in range(3):
        change = feed(jp, "p", None, epoch, 26.0 + 2 * epoch)
    assert change is not None and change.message.startswith("ddp-p: epoch 2: epoch peak 30Gi")
    change = feed(jp, "p", None, 3, 10.0)
    assert change is not None
    assert change.message == "epoch 3: the peak is no longer projected to cross the limit"
    side = feed(jp, "p", None, 0, 29.0, container="sidecar")  # above 0.9 of the limit at once
    assert side is not None and side.message.startswith("ddp-p/sidecar: epoch 0: epoch peak 29Gi")
    assert feed(jp, "p", None, 1, 29.0, container="sidecar") is None  # still so: nothing new


def test_a_deleted_pod_is_forgotten() -> None:
    jp = JobPressure()
    for epoch in range(3):
        feed(jp, "old", 1, epoch, 29.0)
    assert jp.pressure_of("old", "trainer") is not None
    jp.forget("old")
    assert jp.pressure_of("old", "trainer") is None
    change = feed(jp, "new", 1, 0, 29.5)  # the restarted rank's first line starts afresh
    assert change is not None and change.started is not None


def test_the_projection_line_runs_from_the_last_peak_to_the_limit_in_epoch_time() -> None:
    from podmortem.memory_line.projection import MemoryPressure
    from podmortem.operator.job_pressure import epoch_seconds, projection_line

    assert epoch_seconds([(3, 100 * 10**9)]) is None
    assert epoch_seconds([(3, 100 * 10**9), (5, 500 * 10**9)]) == 200.0  # two epochs in 400 s
    pressure = MemoryPressure(epoch=5, peak_bytes=30 << 30, limit_bytes=40 << 30,
                              growth_bytes_per_epoch=float(4 << 30), epochs_to_limit=2.5,
                              over_ratio=False, warning_ratio=0.9)
    line = projection_line(pressure, at_ns=500 * 10**9, epoch_s=200.0)
    assert line is not None
    start_ns, start_bytes, end_ns, end_bytes, text = line
    assert (start_ns, start_bytes, end_bytes) == (500 * 10**9, 30 << 30, 40 << 30)
    assert end_ns == 500 * 10**9 + 500 * 10**9  # 2.5 epochs of 200 s
    assert "2.5 epochs" in text and "epoch 8" in text
    flat = MemoryPressure(epoch=5, peak_bytes=39 << 30, limit_bytes=40 << 30, growth_bytes_per_epoch=0.0,
                          epochs_to_limit=None, over_ratio=True, warning_ratio=0.9)
    assert projection_line(flat, at_ns=1, epoch_s=200.0) is None
    assert projection_line(pressure, at_ns=1, epoch_s=None) is None
