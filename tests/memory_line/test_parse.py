"""podmortem.memory_line.parse: the contract's example, older lines, logger prefixes, bad lines."""

from __future__ import annotations

import pytest

from podmortem import memory_line

GIB = 1024**3
EXAMPLE = (
    "-> memory epoch 30: rss 3.00GiB (peak 36.00GiB), pod 5.00GiB of 64.00GiB (peak 40.00GiB), "
    "cuda reserved 8.00GiB (peak allocated 6.00GiB), workers 2 pss 1.20GiB"
)


def test_contract_example_in_bytes() -> None:
    line = memory_line.parse(EXAMPLE)
    assert line == memory_line.MemoryLine(
        epoch=30,
        rss_bytes=3 * GIB,
        rss_peak_bytes=36 * GIB,
        pod=memory_line.PodMemory(usage_bytes=5 * GIB, limit_bytes=64 * GIB, peak_bytes=40 * GIB),
        cuda=memory_line.CudaMemory(reserved_bytes=8 * GIB, peak_allocated_bytes=6 * GIB),
        workers=memory_line.WorkerMemory(count=2, pss_bytes=round(1.2 * GIB)),
    )


@pytest.mark.parametrize(
    "prefix",
    [
        "[2024-05-01 10:00:00,123 INFO misc.py line 118 4242] ",  # Pointcept's logger
        "2024-05-01T10:00:00.123456789Z stdout F ",  # a CRI log file line
        "INFO:podmortem_runtime:",
    ],
)
def test_found_after_a_logger_prefix(prefix: str) -> None:
    assert memory_line.parse(prefix + EXAMPLE + "\n") == memory_line.parse(EXAMPLE)


def test_old_line_without_workers_field() -> None:
    line = memory_line.parse(
        "-> memory epoch 3: rss 1.00GiB (peak 2.00GiB), pod 1.50GiB of 8.00GiB (peak 2.50GiB)"
    )
    assert line is not None
    assert line.workers is None
    assert line.pod is not None and line.pod.limit_bytes == 8 * GIB


def test_no_cuda_field_is_none() -> None:
    line = memory_line.parse(
        "-> memory epoch 1: rss 300.00MiB (peak 310.50MiB), pod 1.00GiB of unlimited "
        "(peak 1.25GiB), workers 0 pss 0B"
    )
    assert line is not None
    assert line.cuda is None
    assert line.pod is not None and line.pod.limit_bytes is None
    assert line.rss_peak_bytes == round(310.5 * 1024**2)
    assert line.workers == memory_line.WorkerMemory(count=0, pss_bytes=0)


def test_sampled_and_epoch_peaks() -> None:
    line = memory_line.parse(
        "-> memory epoch 7: rss 1.00GiB (peak 1.00GiB), "
        "pod 2.00GiB of 4.00GiB (seen peak 3.00GiB, epoch peak 3.50GiB)"
    )
    assert line is not None and line.pod is not None
    assert line.pod.peak_is_sampled
    assert line.pod.peak_bytes == 3 * GIB
    assert line.pod.epoch_peak_bytes == round(3.5 * GIB)


def test_pod_unknown() -> None:
    line = memory_line.parse("-> memory epoch 2: rss 1.00KiB (peak 512B), pod unknown, workers 1 pss 4.00KiB")
    assert line is not None
    assert line.pod is None
    assert line.rss_peak_bytes == 512
    assert line.workers == memory_line.WorkerMemory(count=1, pss_bytes=4096)


def test_later_fields_are_ignored() -> None:
    line = memory_line.parse(EXAMPLE + ", swap 0B")
    assert line == memory_line.parse(EXAMPLE)


@pytest.mark.parametrize("text", ["", "epoch 30 done", "-> memory usage is fine", "Test: [1/10] Loss 0.1"])
def test_lines_without_the_marker_are_none(text: str) -> None:
    assert memory_line.parse(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "-> memory epoch 30: rss 3GB (peak 36GB)",
        "-> memory epoch x: rss 3.00GiB (peak 36.00GiB)",
        "-> memory epoch 30: rss 3.00GiB (peak 36.00GiB), pod 5.00GiB of 64.00GiB",
        EXAMPLE + " trailing words",
        EXAMPLE.replace("workers 2", "workers two"),
        EXAMPLE.replace("epoch 30", "epoch ٣0"),  # an Arabic-Indic digit is no number of ours
        EXAMPLE.replace("workers 2", "workers ２"),
    ],
)
def test_malformed_lines_raise(text: str) -> None:
    with pytest.raises(memory_line.MemoryLineError, match="expected format"):
        memory_line.parse(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0B", 0),
        ("1023B", 1023),
        ("1.00KiB", 1024),
        ("1.20GiB", 1288490189),
        ("0.01MiB", 10486),
        ("2.50TiB", int(2.5 * 1024**4)),
    ],
)
def test_size_bytes_rounds_the_printed_value(text: str, expected: int) -> None:
    assert memory_line.size_bytes(text) == expected


def test_size_bytes_rejects_other_units() -> None:
    with pytest.raises(memory_line.MemoryLineError):
        memory_line.size_bytes("1.00GB")
    with pytest.raises(memory_line.MemoryLineError):
        memory_line.size_bytes("١.00GiB")


@pytest.mark.parametrize("field", ["epoch", "size", "workers"])
def test_a_number_no_runtime_prints_is_a_format_error_with_a_short_message(field: str) -> None:
    huge = "9" * 4300  # past Python's int() digit limit: a bare ValueError before
    line = {
        "epoch": f"-> memory epoch {huge}: rss 1.0GiB (peak 1.0GiB)",
        "size": f"-> memory epoch 3: rss {huge}GiB (peak 1.0GiB)",
        "workers": f"-> memory epoch 3: rss 1.0GiB (peak 1.0GiB), workers {huge} pss 1.0GiB",
    }[field]
    with pytest.raises(memory_line.MemoryLineError) as info:
        memory_line.parse(line)
    assert len(str(info.value)) < 500
