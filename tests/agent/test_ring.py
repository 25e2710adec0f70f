from __future__ import annotations

from podmortem.agent.ring import PodRings


def test_ring_keeps_the_newest_and_counts_drops() -> None:
    rings: PodRings[int, str] = PodRings(ring_size=3, records_per_pod=2)
    for i in range(5):
        rings.add_sample("a", i)
    for r in "xyz":
        rings.add_record("a", r)
    h = rings.get("a")
    assert h is not None
    assert list(h.samples) == [2, 3, 4] and h.samples_dropped == 2
    assert list(h.records) == ["y", "z"] and h.records_dropped == 1
    assert rings.get("b") is None


def test_gone_pods_are_kept_for_a_grace_period_then_forgotten() -> None:
    rings: PodRings[int, str] = PodRings(ring_size=3, records_per_pod=2)
    rings.add_sample("a", 1)
    rings.add_sample("b", 1)
    rings.mark_present(["a", "b"], now=0.0)
    rings.mark_present(["a"], now=10.0)
    assert rings.forget_gone(now=50.0, after_s=60.0) == []
    assert rings.forget_gone(now=71.0, after_s=60.0) == ["b"]
    assert rings.uids() == ["a"]


def test_a_pod_that_returns_is_not_forgotten() -> None:
    rings: PodRings[int, str] = PodRings(ring_size=3, records_per_pod=2)
    rings.add_sample("a", 1)
    rings.mark_present([], now=0.0)
    rings.mark_present(["a"], now=5.0)
    assert rings.forget_gone(now=1000.0, after_s=60.0) == []
