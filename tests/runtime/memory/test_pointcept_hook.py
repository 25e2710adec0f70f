"""The Pointcept memory hook, against the stand-in ``pointcept`` (tests/runtime/val_loader/standin)."""

from __future__ import annotations

import importlib
import logging

import pytest

from podmortem import memory_line
from podmortem_runtime import memory


@pytest.mark.usefixtures("pointcept_standin")
def test_hook_logs_one_parseable_line_per_epoch(caplog: pytest.LogCaptureFixture) -> None:
    hook_mod = importlib.import_module("podmortem_runtime.pointcept.memory_hook")
    from pointcept.engines.hooks import HOOKS
    from pointcept.engines.train import Trainer
    from pointcept.utils.config import ConfigDict

    assert HOOKS.get("PodmortemMemoryHook") is hook_mod.PodmortemMemoryHook
    cfg = ConfigDict(
        eval_epoch=3,
        evaluate=False,
        num_worker_per_gpu=0,
        batch_size_val_per_gpu=1,
        data={},
        hooks=[{"type": "PodmortemMemoryHook", "interval_s": 0.01}],
    )
    trainer = Trainer(cfg)
    with caplog.at_level(logging.INFO, logger="pointcept"):
        trainer.train()
    lines = [memory_line.parse(r.getMessage()) for r in caplog.records]
    parsed = [line for line in lines if line is not None]
    assert [line.epoch for line in parsed] == [1, 2, 3]
    if parsed[0].pod is not None:  # a readable cgroup: the sampler ran, so each line has an epoch peak
        assert all(line.pod is not None and line.pod.epoch_peak_bytes is not None for line in parsed)
    assert memory._default_sampler is None, "after_train must stop the sampler thread"
