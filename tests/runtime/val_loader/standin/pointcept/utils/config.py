"""STAND-IN for pointcept.utils.config.ConfigDict: attribute access, AttributeError when missing."""

from __future__ import annotations

from typing import Any


class ConfigDict(dict[str, Any]):
    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return ConfigDict(value) if isinstance(value, dict) and not isinstance(value, ConfigDict) else value
