"""The Pointcept trainer mixin, against the stand-in ``pointcept`` (see standin/pointcept/__init__.py)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from podmortem_runtime import procfs

ROOT = Path(__file__).resolve().parents[3]


def _cfg(policy: str | None, workers: int = 2, evaluate: bool = True) -> Any:
    from pointcept.utils.config import ConfigDict

    cfg = ConfigDict(
        eval_epoch=2,
        evaluate=evaluate,
        num_worker_per_gpu=workers,
        batch_size_val_per_gpu=2,
        data={"val": {"type": "StandInScenes", "length": 6}},
        hooks=[],
    )
    if policy is not None:
        cfg["val_loader_policy"] = policy
    return cfg


@pytest.mark.usefixtures("pointcept_standin")
def test_registered_and_builds_the_same_batches() -> None:
    trainer_mod = importlib.import_module("podmortem_runtime.pointcept.trainer")
    from pointcept.engines.train import TRAINERS

    assert TRAINERS.get("PodmortemTrainer") is trainer_mod.PodmortemTrainer
    trainer = TRAINERS.build({"type": "PodmortemTrainer", "cfg": _cfg("persistent")})
    loader = trainer.val_loader
    assert loader.persistent_workers and loader.num_workers == 2
    assert loader.pin_memory == torch.cuda.is_available()
    assert loader.batch_size == 2
    before = set(procfs.descendant_pids())
    trainer.before_train()
    started = set(procfs.descendant_pids()) - before
    assert len(started) >= 2, "before_train must fork the persistent workers"
    for _ in range(2):  # two evaluations, the same workers, every scene in order
        indices = [int(i) for batch in loader for i in batch["index"]]
        assert indices == list(range(6))
    assert started <= set(procfs.descendant_pids()), "persistent workers must survive an evaluation"
    del loader, trainer


@pytest.mark.usefixtures("pointcept_standin")
def test_policy_none_and_default_auto() -> None:
    trainer_mod = importlib.import_module("podmortem_runtime.pointcept.trainer")
    none = trainer_mod.PodmortemTrainer(_cfg("none"))
    assert none.val_loader.num_workers == 0
    none.before_train()
    assert [int(i) for batch in none.val_loader for i in batch["index"]] == list(range(6))
    auto = trainer_mod.PodmortemTrainer(_cfg(None))  # no key in the config: "auto"
    # "auto" is decided when the workers are about to start (before_train), not when the loader is built.
    assert auto.val_loader.choice is None
    auto.before_train()
    assert auto.val_loader.choice is not None
    assert auto.val_loader.persistent_workers == (auto.val_loader.choice.policy == "persistent")


@pytest.mark.usefixtures("pointcept_standin")
def test_no_evaluation_no_loader_and_bad_policy_is_clear() -> None:
    trainer_mod = importlib.import_module("podmortem_runtime.pointcept.trainer")
    assert trainer_mod.PodmortemTrainer(_cfg("persistent", evaluate=False)).val_loader is None
    with pytest.raises(ValueError, match="unknown validation loader policy 'fast'"):
        trainer_mod.PodmortemTrainer(_cfg("fast"))


def test_without_pointcept_the_import_says_what_is_missing() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "runtime_patch")}
    check = subprocess.run([sys.executable, "-c", "import pointcept"], env=env, capture_output=True)
    if check.returncode == 0:
        pytest.skip("a real pointcept is importable here")
    for module in ("podmortem_runtime.pointcept.trainer", "podmortem_runtime.pointcept.memory_hook"):
        run = subprocess.run(
            [sys.executable, "-c", f"import {module}"], env=env, capture_output=True, text=True
        )
        assert run.returncode == 1
        assert "ImportError: podmortem_runtime.pointcept needs Pointcept importable" in run.stderr
