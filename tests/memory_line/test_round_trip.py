"""The runtime's formatter and the operator's parser agree, at the printed precision.

podmortem_runtime must not import podmortem, so this test is what ties the two
ends of the contract together.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem import memory_line
from podmortem_runtime import memory

GIB = 1024**3
sizes = st.one_of(
    st.integers(0, 4096),
    st.integers(0, 2 * 1024**4),
    st.sampled_from([1023, 1024, 1024**2 - 1, 1024**2, 1024**3 - 5000, 64 * GIB, 2**62]),
)


def close(parsed: int, original: int) -> bool:
    """Within half of the last printed digit: 0.005 of the printed unit, or exact below 1 KiB."""
    if original < 1024:
        return parsed == original
    unit = max(u for u in (1024, 1024**2, 1024**3, 1024**4) if u <= max(original, parsed))
    return abs(parsed - original) <= unit * 0.005 + 1


@st.composite
def snapshots(draw: st.DrawFn) -> memory.MemorySnapshot:
    pod = None
    if draw(st.booleans()):
        pod = memory.PodMemory(
            usage_bytes=draw(sizes),
            limit_bytes=draw(st.none() | sizes),
            peak_bytes=draw(sizes),
            peak_is_sampled=draw(st.booleans()),
            epoch_peak_bytes=draw(st.none() | sizes),
        )
    cuda = draw(st.none() | st.tuples(sizes, sizes))
    workers = draw(st.none() | st.tuples(st.integers(0, 64), sizes))
    return memory.MemorySnapshot(
        rss_bytes=draw(sizes),
        rss_peak_bytes=draw(sizes),
        pod=pod,
        cuda_reserved_bytes=cuda[0] if cuda else None,
        cuda_peak_allocated_bytes=cuda[1] if cuda else None,
        workers=workers[0] if workers else None,
        workers_pss_bytes=workers[1] if workers else None,
    )


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**6), snapshots())
def test_round_trip(epoch: int, snap: memory.MemorySnapshot) -> None:
    text = memory.format_line(epoch, snap)
    parsed = memory_line.parse(f"[2024-05-01 10:00:00,000 INFO misc.py line 1 7] {text}")
    assert parsed is not None
    assert parsed.epoch == epoch
    assert close(parsed.rss_bytes, snap.rss_bytes)
    assert close(parsed.rss_peak_bytes, snap.rss_peak_bytes)
    if snap.pod is None:
        assert parsed.pod is None
    else:
        assert parsed.pod is not None
        assert close(parsed.pod.usage_bytes, snap.pod.usage_bytes)
        assert close(parsed.pod.peak_bytes, snap.pod.peak_bytes)
        assert parsed.pod.peak_is_sampled == snap.pod.peak_is_sampled
        assert (parsed.pod.limit_bytes is None) == (snap.pod.limit_bytes is None)
        if snap.pod.limit_bytes is not None and parsed.pod.limit_bytes is not None:
            assert close(parsed.pod.limit_bytes, snap.pod.limit_bytes)
        assert (parsed.pod.epoch_peak_bytes is None) == (snap.pod.epoch_peak_bytes is None)
    assert (parsed.cuda is None) == (snap.cuda_reserved_bytes is None)
    if parsed.cuda is not None and snap.cuda_reserved_bytes is not None and snap.cuda_peak_allocated_bytes:
        assert close(parsed.cuda.peak_allocated_bytes, snap.cuda_peak_allocated_bytes)
    assert (parsed.workers is None) == (snap.workers is None)
    if parsed.workers is not None and snap.workers_pss_bytes is not None:
        assert parsed.workers.count == snap.workers
        assert close(parsed.workers.pss_bytes, snap.workers_pss_bytes)


@settings(max_examples=200, deadline=None)
@given(sizes)
def test_printing_the_parsed_value_prints_the_same_text(value: int) -> None:
    """What the operator re-prints from parsed bytes is what the trainer printed."""
    text = memory.format_bytes(value)
    assert memory.format_bytes(memory_line.size_bytes(text)) == text


def test_contract_example_is_what_the_formatter_prints() -> None:
    snap = memory.MemorySnapshot(
        rss_bytes=3 * GIB,
        rss_peak_bytes=36 * GIB,
        pod=memory.PodMemory(
            usage_bytes=5 * GIB, limit_bytes=64 * GIB, peak_bytes=40 * GIB, peak_is_sampled=False
        ),
        cuda_reserved_bytes=8 * GIB,
        cuda_peak_allocated_bytes=6 * GIB,
        workers=2,
        workers_pss_bytes=round(1.2 * GIB),
    )
    assert memory.format_line(30, snap) == (
        "-> memory epoch 30: rss 3.00GiB (peak 36.00GiB), pod 5.00GiB of 64.00GiB (peak 40.00GiB), "
        "cuda reserved 8.00GiB (peak allocated 6.00GiB), workers 2 pss 1.20GiB"
    )
