"""Pointcept's trainer with a validation loader that does not fork copies of a grown trainer.

Pointcept's ``Trainer.build_val_loader`` makes a DataLoader with workers but
without ``persistent_workers``: every evaluation forks new workers from a
trainer that has grown since, and copy-on-write leaves them holding a second
copy of its heap. `ValLoaderPolicyMixin` builds the same loader (same dataset,
sampler, batch size, ``collate_fn``, ``pin_memory``) through
`podmortem_runtime.val_loader.make_val_loader`, and starts its workers in
``before_train``, before checkpoint loading and the first epoch grow the heap
(with ``"auto"``, forked from the trainer only if it is still small then).

Select it in a Pointcept config (the policy defaults to ``"auto"``)::

    train = dict(type="PodmortemTrainer")
    val_loader_policy = "auto"  # or "none", "persistent", "forkserver", "spawn"
"""

from __future__ import annotations

from typing import Any

import pointcept.engines.train as pointcept_train
import pointcept.utils.comm as comm
import torch
import torch.utils.data
from pointcept.datasets import build_dataset, collate_fn

from podmortem_runtime import loader_policy, val_loader

DEFAULT_POLICY: loader_policy.Policy = "auto"


class ValLoaderPolicyMixin:
    """Put before Pointcept's ``Trainer`` (or a subclass of it) in the bases.

    Reads ``cfg.val_loader_policy`` (default ``"auto"``); everything else comes
    from the same config keys Pointcept's own ``build_val_loader`` reads.
    """

    cfg: Any
    val_loader: Any
    logger: Any

    def build_val_loader(self) -> Any:
        if not self.cfg.evaluate:
            return None
        val_data = build_dataset(self.cfg.data.val)
        sampler: Any = (
            torch.utils.data.distributed.DistributedSampler(val_data) if comm.get_world_size() > 1 else None
        )
        policy: loader_policy.Policy = getattr(self.cfg, "val_loader_policy", DEFAULT_POLICY)
        logger = getattr(self, "logger", None)

        def tell(choice: loader_policy.PolicyChoice) -> None:
            if logger is not None:
                logger.info(f"=> Validation loader policy: {choice.policy} ({choice.reason})")

        if policy == "auto" and logger is not None:
            logger.info("=> Validation loader policy: auto (decided when its workers are first started)")
        return val_loader.make_val_loader(
            val_data,
            batch_size=self.cfg.batch_size_val_per_gpu,
            num_workers=self.cfg.num_worker_per_gpu,
            collate_fn=collate_fn,
            sampler=sampler,
            policy=policy,
            pin_memory=torch.cuda.is_available(),  # Pointcept's True, minus torch's warning on CPU
            on_choice=tell,
        )

    def before_train(self) -> None:
        # Fork first: the hooks' before_train (checkpoint loading) is where the heap starts growing.
        # An "auto" loader reads the trainer's memory here and forks only if it is still small.
        if val_loader.prestart_workers(getattr(self, "val_loader", None)):
            logger = getattr(self, "logger", None)
            if logger is not None:
                logger.info("=> Validation workers started before training (persistent)")
        super().before_train()  # type: ignore[misc]


class PodmortemTrainer(ValLoaderPolicyMixin, pointcept_train.Trainer):  # type: ignore[misc]
    """Pointcept's default trainer with the validation-loader policy; registered as ``PodmortemTrainer``."""


_TRAINERS = getattr(pointcept_train, "TRAINERS", None)  # absent in Pointcept before the trainer registry
if _TRAINERS is not None and _TRAINERS.get("PodmortemTrainer") is None:
    _TRAINERS.register_module(name="PodmortemTrainer", module=PodmortemTrainer)
