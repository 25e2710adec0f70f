"""STAND-IN for pointcept.engines.hooks.builder."""

from __future__ import annotations

from typing import Any

from pointcept.utils.registry import Registry

HOOKS = Registry("hooks")


def build_hooks(cfg: list[dict[str, Any]]) -> list[Any]:
    return [HOOKS.build(hook_cfg) for hook_cfg in cfg]
