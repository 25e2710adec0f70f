"""STAND-IN for pointcept.engines.hooks."""

from .builder import HOOKS, build_hooks
from .default import HookBase

__all__ = ["HOOKS", "HookBase", "build_hooks"]
