"""The line's cuda fields against torch.cuda itself. Needs a CUDA device; skips with the reason elsewhere.

Self-contained so that it can be run alone on a GPU machine:
``python -m pytest tests/runtime/memory/test_cuda.py``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from podmortem import memory_line  # noqa: E402
from podmortem_runtime import memory  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False here)"
)


def _close(parsed: int, actual: int) -> bool:
    """Equal at the printed precision: half of the last printed digit of the printed unit."""
    if actual < 1024:
        return parsed == actual
    unit = max(u for u in (1024, 1024**2, 1024**3, 1024**4) if u <= max(parsed, actual))
    return abs(parsed - actual) <= unit * 0.005 + 1


def test_cuda_fields_match_torch() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    kept = torch.empty(300 * 1024**2, dtype=torch.uint8, device=device)
    transient = torch.empty(200 * 1024**2, dtype=torch.uint8, device=device)
    del transient  # the peak allocated stays above what is allocated now
    torch.cuda.synchronize()
    line = memory_line.parse(memory.memory_line(1))
    reserved, peak = torch.cuda.memory_reserved(device), torch.cuda.max_memory_allocated(device)
    assert line is not None and line.cuda is not None, "a CUDA-using process must print the cuda field"
    assert _close(line.cuda.reserved_bytes, reserved), (line.cuda, reserved)
    assert _close(line.cuda.peak_allocated_bytes, peak), (line.cuda, peak)
    assert peak >= 500 * 1024**2
    del kept
