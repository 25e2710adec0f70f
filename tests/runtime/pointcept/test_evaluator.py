"""Pointcept's own InsSegEvaluator and LeanInsSegEvaluator, run as hooks on the same model outputs.

Both run in a trainer built from Pointcept's ``TrainerBase`` (its ``register_hooks``,
its ``EventStorage``), over a DataLoader with Pointcept's ``collate_fn``; the
``val/*`` scalars each writes, every log line and the checkpoint metric must be
identical. With ``origin_coord`` the scenes are mapped to original points through
``pointops.knn_query`` (a CPU stand-in; the same map for both).
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn as nn

IGNORE = (-1, 0, 1)

# Pointcept's associate_instances runs np.not_equal on torch tensors; torch's __array_wrap__ is old-style.
pytestmark = pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context:DeprecationWarning")


class RandomProposals(nn.Module):
    """Proposals cut from the GT instances and drawn at random, classes and scores random, dense int32."""

    def forward(self, data_dict: dict[str, Any]) -> dict[str, Any]:
        instance = data_dict["instance"]
        n = instance.shape[0]
        gen = torch.Generator().manual_seed(int(data_dict["coord"].abs().sum() * 1000) % 2**31)
        rows, classes = [], []
        for i in torch.unique(instance[instance >= 0]).tolist():
            member = (instance == i) & (torch.rand(n, generator=gen) < 0.85)
            rows.append(member | (torch.rand(n, generator=gen) < 0.02))
            right = torch.rand(1, generator=gen) < 0.8
            classes.append(int(data_dict["segment"][instance == i][0]) if right else 3)
        for _ in range(4):
            start = int(torch.randint(0, n - 150, (1,), generator=gen))
            row = torch.zeros(n, dtype=torch.bool)
            row[start : start + int(torch.randint(60, 150, (1,), generator=gen))] = True
            rows.append(row)
            classes.append(int(torch.randint(0, 6, (1,), generator=gen)))  # 0 and 1 are ignored classes
        return {
            "loss": torch.tensor(0.5),
            "pred_masks": torch.stack(rows).int(),
            "pred_classes": torch.tensor(classes),
            "pred_scores": torch.rand(len(rows), generator=gen),
        }


class Writer:
    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, float(value), step))


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def evaluate(hook_type: str, *, origin: bool, scenes: int = 5) -> tuple[list[Any], list[str], dict[str, Any]]:
    from pointcept.datasets import collate_fn
    from pointcept.engines.train import TrainerBase
    from pointcept.utils.config import Config
    from pointcept.utils.events import EventStorage

    from . import tiny

    trainer = TrainerBase()
    trainer.cfg = Config(
        dict(
            data=dict(names=tiny.CLASS_NAMES, num_classes=len(tiny.CLASS_NAMES)),
            evaluate=True,
            enable_wandb=False,
        )
    )
    trainer.model = RandomProposals()
    trainer.val_loader = torch.utils.data.DataLoader(
        tiny.TinyScenes(length=scenes, origin=origin), batch_size=1, collate_fn=collate_fn
    )
    trainer.writer = Writer()
    lines = Lines()
    trainer.logger = logging.getLogger(f"podmortem-test.{hook_type}")
    trainer.logger.propagate = False
    trainer.logger.setLevel(logging.INFO)
    trainer.logger.addHandler(lines)
    trainer.epoch = 4
    try:
        trainer.register_hooks([dict(type=hook_type, segment_ignore_index=IGNORE, instance_ignore_index=-1)])
        with EventStorage() as trainer.storage:
            trainer.before_train()
            trainer.after_epoch()
    finally:
        trainer.logger.removeHandler(lines)
    return trainer.writer.scalars, lines.messages, dict(trainer.comm_info)


@pytest.mark.parametrize("origin", [True, False], ids=["knn-to-origin", "voxels"])
def test_same_scalars_log_lines_and_metric(pointcept: ModuleType, origin: bool) -> None:
    theirs = evaluate("InsSegEvaluator", origin=origin)
    ours = evaluate("LeanInsSegEvaluator", origin=origin)
    assert ours[0] == theirs[0]
    assert ours[1] == theirs[1]
    assert ours[2] == theirs[2]
    assert theirs[2]["current_metric_name"] == "AP50"
    tags = [tag for tag, _, step in theirs[0]]
    assert tags == ["val/loss", "val/mAP", "val/AP50", "val/AP25"] and {s for _, _, s in theirs[0]} == {5}
    ap = dict((tag, value) for tag, value, _ in theirs[0])
    assert 0 < ap["val/AP50"] < 1, "a scene set where AP is neither trivial nor zero"
    assert sum("Result: AP/AP50/AP25" in line for line in theirs[1]) == 4  # cabinet, bed, chair, sofa
