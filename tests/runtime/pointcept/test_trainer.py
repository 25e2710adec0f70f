"""Pointcept's own Trainer, config parser and hooks, with PodmortemTrainer and our hooks, two epochs on CPU.

Run as Pointcept's tools/train.py does: a config file inheriting the real
``configs/_base_/default_runtime.py``, ``default_config_parser``, ``default_setup``,
``TRAINERS.build(dict(type=cfg.train.type, cfg=cfg))``, ``trainer.train()``.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from podmortem import memory_line

from . import standins

pytestmark = [
    # Pointcept asks for CUDA where this machine has none; torch says so, and that is all.
    pytest.mark.filterwarnings("ignore:.*pin_memory.*:UserWarning"),
    pytest.mark.filterwarnings("ignore:User provided device_type of 'cuda':UserWarning"),
]

CONFIG = """
_base_ = ["{base}"]
save_path = "{save_path}"
seed = 7
num_worker = 2
batch_size = 2
epoch = 2
eval_epoch = 2
enable_wandb = False
evaluate = True
data = dict(
    num_classes={num_classes},
    ignore_index=-1,
    names={names!r},
    train=dict(type="TinyScenes", split="train", length=4),
    val=dict(type="TinyScenes", split="val", length=3),
)
model = dict(type="TinyInsSeg")
optimizer = dict(type="SGD", lr=0.01)
scheduler = dict(type="MultiStepLR", milestones=[0.5], gamma=0.1)
train = dict(type="PodmortemTrainer")
val_loader_policy = "{policy}"
hooks = [
    dict(type="CheckpointLoader"),
    dict(type="IterationTimer", warmup_iter=2),
    dict(type="InformationWriter"),
    dict(type="LeanInsSegEvaluator", segment_ignore_index={ignore!r}, instance_ignore_index=-1),
    dict(type="PodmortemMemoryHook", interval_s=0.05),
    dict(type="CheckpointSaver", save_freq=None),
]
"""


def run_training(tmp_path: Path, policy: str) -> tuple[Any, list[str]]:
    """Train two epochs as tools/train.py would; the trainer and the lines of its train.log."""
    import pointcept.utils.logger as pointcept_logger
    from pointcept.engines.defaults import default_config_parser, default_setup
    from pointcept.engines.train import TRAINERS

    from . import tiny  # only with the `pointcept` fixture: it needs Pointcept importable

    # Pointcept's logger is set up once per process; a fresh one for each run writes to its own file.
    pointcept_logger.logger_initialized.clear()
    for handler in list(logging.getLogger("pointcept").handlers):
        logging.getLogger("pointcept").removeHandler(handler)
        handler.close()
    path = tmp_path / "tiny-podmortem.py"
    path.write_text(
        CONFIG.format(
            base=standins.POINTCEPT / "configs/_base_/default_runtime.py",
            save_path=tmp_path / "exp",
            num_classes=len(tiny.CLASS_NAMES),
            names=tiny.CLASS_NAMES,
            ignore=tiny.SEGMENT_IGNORE,
            policy=policy,
        )
    )
    cfg = default_setup(default_config_parser(str(path), None))
    trainer = TRAINERS.build(dict(type=cfg.train.type, cfg=cfg))
    try:
        trainer.train()
    finally:
        for handler in list(logging.getLogger("pointcept").handlers):
            handler.close()
    return trainer, (tmp_path / "exp" / "train.log").read_text().splitlines()


def _after(lines: list[str], text: str) -> list[str]:
    """The message part of each log line that contains ``text``."""
    return [line[line.index(text) :] for line in lines if text in line]


@pytest.mark.parametrize("policy", ["persistent", "none", "auto"])
def test_two_epochs_in_pointcepts_trainer(pointcept: ModuleType, tmp_path: Path, policy: str) -> None:
    trainer, lines = run_training(tmp_path, policy)

    # The validation loader follows the policy: who loaded each validation scene, at each evaluation.
    chosen = _after(lines, "=> Validation loader policy: ")
    resolved = chosen[-1].split()[4]  # "=> Validation loader policy: <policy> (<reason>)"
    # "auto" decides from this (pytest) process's memory at before_train: either answer is checked below.
    assert resolved == policy if policy != "auto" else resolved in ("persistent", "forkserver")
    first, second = (set(pids) for pids in trainer.model.val_pids)
    assert len(trainer.model.val_pids) == 2 and all(len(p) == 3 for p in trainer.model.val_pids)
    if resolved == "none":
        assert first == second == {os.getpid()}
    elif resolved == "persistent":
        assert os.getpid() not in first and first == second, "the same workers, kept across evaluations"
        assert any("Validation workers started before training (persistent)" in line for line in lines)
    else:
        assert os.getpid() not in first | second and not first & second, "fresh fork-server workers"

    # One memory line per epoch, in Pointcept's own log, after that epoch's evaluation.
    memory = _after(lines, memory_line.MARKER)
    assert [memory_line.parse(m).epoch for m in memory] == [1, 2]  # type: ignore[union-attr]
    ends = [i for i, line in enumerate(lines) if "<<<<<<<<<<<<<<<<< End Evaluation" in line]
    at = [i for i, line in enumerate(lines) if memory_line.MARKER in line]
    assert len(ends) == 2 and ends[0] < at[0] < ends[1] < at[1]

    # AP50 is what Pointcept's CheckpointSaver compares: epoch 1 stays best when epoch 2 is worse.
    ap50 = [float(re.search(r"mAP/AP50/AP25 [\d.]+/([\d.]+)/", v)[1]) for v in _after(lines, "Val result")]  # type: ignore[index]
    assert len(ap50) == 2 and ap50[0] > ap50[1]
    assert _after(lines, "Best validation") == [f"Best validation AP50 updated to: {ap50[0]:.4f}"]
    assert _after(lines, "Currently Best") == [f"Currently Best AP50: {ap50[0]:.4f}"] * 2
    assert trainer.comm_info["current_metric_name"] == "AP50"
    assert (tmp_path / "exp" / "model" / "model_best.pth").is_file()
