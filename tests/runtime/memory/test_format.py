"""How sizes and the optional fields are written."""

from __future__ import annotations

import pytest

from podmortem_runtime import memory

MIB, GIB = 1024**2, 1024**3


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0B"),
        (1023, "1023B"),
        (1024, "1.00KiB"),
        (1536, "1.50KiB"),
        (5 * MIB, "5.00MiB"),
        (GIB - 1, "1.00GiB"),  # rounds to 1024.00MiB, so it scales up
        (round(1.2 * GIB), "1.20GiB"),
        (64 * GIB, "64.00GiB"),
        (3 * 1024**5, "3072.00TiB"),
    ],
)
def test_format_bytes(value: int, text: str) -> None:
    assert memory.format_bytes(value) == text


def test_small_values_are_not_zero_gib() -> None:
    assert memory.format_bytes(3 * MIB) == "3.00MiB"


def test_negative_size_is_an_error() -> None:
    with pytest.raises(ValueError, match="negative"):
        memory.format_bytes(-1)


def _snap(pod: memory.PodMemory | None, **kw: int | None) -> memory.MemorySnapshot:
    return memory.MemorySnapshot(rss_bytes=GIB, rss_peak_bytes=2 * GIB, pod=pod, **kw)  # type: ignore[arg-type]


def test_unlimited_and_sampled_peak() -> None:
    pod = memory.PodMemory(
        usage_bytes=GIB, limit_bytes=None, peak_bytes=3 * GIB, peak_is_sampled=True, epoch_peak_bytes=2 * GIB
    )
    assert memory.format_line(4, _snap(pod)) == (
        "-> memory epoch 4: rss 1.00GiB (peak 2.00GiB), pod 1.00GiB of unlimited "
        "(seen peak 3.00GiB, epoch peak 2.00GiB)"
    )


def test_unknown_pod_and_no_cuda_or_workers() -> None:
    assert memory.format_line(1, _snap(None)) == "-> memory epoch 1: rss 1.00GiB (peak 2.00GiB), pod unknown"


def test_cuda_needs_both_numbers() -> None:
    line = memory.format_line(1, _snap(None, cuda_reserved_bytes=GIB, cuda_peak_allocated_bytes=None))
    assert "cuda" not in line
