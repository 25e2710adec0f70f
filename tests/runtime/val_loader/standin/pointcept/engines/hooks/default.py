"""STAND-IN for pointcept.engines.hooks.default.HookBase: the same six no-op methods."""

from __future__ import annotations

from typing import Any


class HookBase:
    trainer: Any = None  # a weakref.proxy to the trainer, set by register_hooks

    def before_train(self) -> None:
        pass

    def before_epoch(self) -> None:
        pass

    def before_step(self) -> None:
        pass

    def after_step(self) -> None:
        pass

    def after_epoch(self) -> None:
        pass

    def after_train(self) -> None:
        pass
