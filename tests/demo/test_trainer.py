"""The demo's trainer: progress lines, the runtime's memory line each epoch, and each loader policy."""

from __future__ import annotations

import subprocess
import sys

import pytest

from podmortem import memory_line
from podmortem.demo import trainer

SMALL = [
    "--epochs",
    "2",
    "--steps",
    "3",
    "--step-seconds",
    "0",
    "--scenes",
    "2",
    "--proposals",
    "1",
    "--mask-mib",
    "0.25",
    "--workers",
    "2",
]


def run_trainer(policy: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "podmortem.demo.trainer", "--val-policy", policy, *SMALL],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().splitlines()


@pytest.mark.parametrize(
    ("policy", "resolved"),
    [
        ("fresh-fork", "fresh-fork"),
        ("none", "none"),
        ("auto", "persistent"),
        ("forkserver", "forkserver"),
    ],
)
def test_each_policy_runs_and_prints_a_memory_line_per_epoch(policy: str, resolved: str) -> None:
    lines = run_trainer(policy)
    assert lines[1].startswith(f"validation loader: {resolved} (")
    parsed = [memory_line.parse(line) for line in lines if line.startswith(memory_line.MARKER)]
    memory = [m for m in parsed if m is not None]
    assert len(memory) == len(parsed)
    assert [m.epoch for m in memory] == [0, 1]
    assert memory[-1].rss_bytes > memory[0].rss_bytes  # the kept masks grow
    assert sum(line.startswith("eval epoch 1 scene") for line in lines) == 2
    assert lines[-1] == "training finished: 2 epochs"
    # Persistent workers stay alive (and show in the line); fresh-fork ones are gone by the epoch's end.
    assert (memory[-1].workers is not None and memory[-1].workers.count > 0) == (
        resolved in ("persistent", "forkserver")
    )


def test_options_are_checked() -> None:
    parser = trainer.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--val-policy", "sometimes"])
    args = parser.parse_args([])
    assert args.val_policy == trainer.FRESH_FORK and args.epochs == trainer.TrainerSettings.epochs
