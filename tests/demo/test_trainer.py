"""The demo's trainer: progress lines, the runtime's memory line each epoch, and each loader policy."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from podmortem import memory_line
from podmortem_demo import trainer, watchdog
from podmortem_runtime import own_cgroup

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


def run_trainer(policy: str, env: dict[str, str] | None = None) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != watchdog.PSS_LIMIT_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "podmortem_demo.trainer", "--val-policy", policy, *SMALL],
        capture_output=True,
        timeout=60,
        check=False,
        env={**environ, **(env or {})},
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


def test_without_a_cgroup_the_pod_figures_are_the_trees_pss_against_the_kubelets_limit() -> None:
    """Recorded mode: the memory line must not present the host's cgroup (``of unlimited``) as the pod's."""
    lines = run_trainer("auto", env={watchdog.PSS_LIMIT_ENV: str(768 * 2**20)})
    assert lines[2].startswith(
        "pod memory: no memory cgroup holds this pod; its figures are the summed charged"
    )
    memory = [memory_line.parse(line) for line in lines if line.startswith(memory_line.MARKER)]
    for m in memory:
        assert m is not None and m.pod is not None
        assert m.pod.limit_bytes == 768 * 2**20 and m.pod.peak_is_sampled
        assert m.pod.epoch_peak_bytes is not None and m.pod.peak_bytes >= m.pod.usage_bytes
        # The tree's PSS: at least the trainer's own anonymous memory, far below a host cgroup's.
        assert m.rss_bytes // 2 < m.pod.usage_bytes < 2 * m.rss_bytes
    assert " of unlimited" not in "\n".join(lines)


def test_tree_pss_reads_like_a_cgroup() -> None:
    assert trainer.TreePss.from_env({}) is None
    assert trainer.TreePss.from_env({watchdog.PSS_LIMIT_ENV: ""}) is not None
    account = trainer.TreePss.from_env({watchdog.PSS_LIMIT_ENV: "1024"})
    assert account is not None and isinstance(account, own_cgroup.OwnCgroup)
    assert (account.limit(), account.peak(), account.pid) == (1024, None, os.getpid())
    assert account.usage() > 0


class Shrinking(trainer.TreePss):
    """Over the limit until the "kill" (three looks), then under it."""

    def __init__(self, looks_over: int) -> None:
        super().__init__(100)
        self.looks = 0
        self.over = looks_over

    def usage(self) -> int:
        self.looks += 1
        return 200 if self.looks <= self.over else 50


def test_an_allocation_past_an_outside_limit_waits_for_the_kill_then_gives_up() -> None:
    t = trainer.Trainer(trainer.TrainerSettings(charge_wait_s=5.0), trainer.FRESH_FORK)
    t.account = Shrinking(looks_over=3)
    began = time.monotonic()
    t.charge()
    assert t.account.looks == 4 and time.monotonic() - began < 1.0
    t.s = trainer.TrainerSettings(charge_wait_s=0.05)
    t.account = Shrinking(looks_over=10**6)
    began = time.monotonic()
    t.charge()  # nobody kills: it goes on after charge_wait_s
    assert 0.05 <= time.monotonic() - began < 1.0
    t.account = None
    t.charge()  # in a real cgroup the kernel does it


def test_the_lean_evaluator_removes_the_growth_the_pointcept_one_has() -> None:
    """The fix is the whole fix: with the runtime patch's evaluator the heap does not grow by an epoch's
    masks (scenes × proposals × mask = 8 MiB here), while Pointcept's keeps every mask."""
    args = ["--epochs", "4", "--steps", "2", "--step-seconds", "0", "--scenes", "4", "--proposals", "2",
            "--mask-mib", "1", "--workers", "1"]
    rss: dict[str, list[int]] = {}
    for evaluator in trainer.EVALUATORS:
        environ = {k: v for k, v in os.environ.items() if k != watchdog.PSS_LIMIT_ENV}
        done = subprocess.run(
            [sys.executable, "-m", "podmortem_demo.trainer", "--val-policy", "auto", "--evaluator", evaluator,
             *args], capture_output=True, timeout=60, check=False, env=environ,
        )
        assert done.returncode == 0, done.stderr.decode()
        lines = done.stdout.decode().splitlines()
        assert f"evaluator: {evaluator} (" in "\n".join(lines)
        parsed = [memory_line.parse(line) for line in lines if line.startswith(memory_line.MARKER)]
        rss[evaluator] = [m.rss_bytes for m in parsed if m is not None]
        assert len(rss[evaluator]) == 4
    epoch_masks = 4 * 2 * 2**20
    pointcept, lean = rss[trainer.POINTCEPT], rss[trainer.LEAN]
    assert pointcept[-1] - pointcept[0] >= 3 * epoch_masks * 0.9  # three epochs' masks kept
    assert lean[-1] - lean[1] < epoch_masks / 2  # flat after the first evaluation's imports
