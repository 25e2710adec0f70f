"""``podmortem diagnose`` on a training log of another framework's GPU OOM, or a shell's Killed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podmortem.cli import main as cli_main


def _report(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert cli_main.main(["diagnose", "--json", str(path)]) == 0
    reports = json.loads(capsys.readouterr().out)["reports"]
    assert len(reports) == 1
    report: dict[str, object] = reports[0]
    return report


def test_tensorflow_oom_is_cuda_oom(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "Epoch 1/5\n"
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
        "shape[32,64,224,224] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator "
        "GPU_0_bfc\n"
    )
    assert _report(log, capsys)["verdict"] == "cuda-oom"


def test_a_shells_killed_after_a_progress_bar_is_sigkill_not_oom(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "train.log"
    log.write_text("Epoch 3/10\n 47%|####7     | 235/500 [01:10<01:20,  3.3it/s]\rKilled\n")
    assert _report(log, capsys)["verdict"] == "sigkill-not-oom"
