"""The kind of an input is told by what the catalogue finds in it: the kernel's unstamped lines are
kernel text."""

from __future__ import annotations

import pytest

from podmortem.cli import diagnose_inputs


@pytest.mark.parametrize("text", [
    "Task in /kubepods/burstable/pod1f2e/abc killed as a result of limit of /kubepods/burstable/pod1f2e\n",
    "some note\nmemory: usage 1048576kB, limit 1048576kB, failcnt 12\nmore\nnotes\n",
    "node-7 | memory+swap: usage 1048576kB, limit 1048576kB, failcnt 0\n",
])
def test_unstamped_kernel_lines_are_kernel_text(text: str) -> None:
    assert diagnose_inputs.detect(text.encode()) == "kernel"


@pytest.mark.parametrize("text", [
    "epoch 1 loss 0.3\nRuntimeError: CUDA error: out of memory\n",
    "100%|##########| 10/10\nKilled\n",
    "Traceback (most recent call last):\n  File \"x.py\", line 1\nMemoryError\n",
])
def test_training_deaths_stay_logs(text: str) -> None:
    assert diagnose_inputs.detect(text.encode()) == "log"
