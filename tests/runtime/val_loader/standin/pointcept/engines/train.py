"""STAND-IN for pointcept.engines.train: the hook loop and build_val_loader, no model or optimiser."""

from __future__ import annotations

import logging
import weakref
from typing import Any

import torch.utils.data

import pointcept.utils.comm as comm
from pointcept.datasets import build_dataset, collate_fn
from pointcept.engines.hooks import HookBase, build_hooks
from pointcept.utils.registry import Registry

TRAINERS = Registry("trainers")


class TrainerBase:
    def __init__(self) -> None:
        self.hooks: list[HookBase] = []
        self.epoch = 0
        self.start_epoch = 0
        self.max_epoch = 0

    def register_hooks(self, hooks: list[dict[str, Any]]) -> None:
        built = build_hooks(hooks)
        for hook in built:
            assert isinstance(hook, HookBase)
            hook.trainer = weakref.proxy(self)
        self.hooks.extend(built)

    def before_train(self) -> None:
        for hook in self.hooks:
            hook.before_train()

    def after_epoch(self) -> None:
        for hook in self.hooks:
            hook.after_epoch()

    def after_train(self) -> None:
        comm.synchronize()
        for hook in self.hooks:
            hook.after_train()


@TRAINERS.register_module("DefaultTrainer")
class Trainer(TrainerBase):
    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.max_epoch = cfg.eval_epoch
        self.logger = logging.getLogger("pointcept")
        self.cfg = cfg
        self.val_loader = self.build_val_loader()
        self.register_hooks(self.cfg.hooks)

    def train(self) -> None:
        self.before_train()
        for epoch in range(self.start_epoch, self.max_epoch):
            self.epoch = epoch
            self.after_epoch()
        self.after_train()

    def build_val_loader(self) -> Any:
        if not self.cfg.evaluate:
            return None
        val_data = build_dataset(self.cfg.data.val)
        return torch.utils.data.DataLoader(
            val_data,
            batch_size=self.cfg.batch_size_val_per_gpu,
            shuffle=False,
            num_workers=self.cfg.num_worker_per_gpu,
            pin_memory=True,
            sampler=None,
            collate_fn=collate_fn,
        )
