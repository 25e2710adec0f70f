"""STAND-IN for pointcept.utils.registry: the same register/get/build interface, nothing more."""

from __future__ import annotations

from typing import Any


class Registry:
    def __init__(self, name: str) -> None:
        self.name = name
        self._module_dict: dict[str, type] = {}

    def get(self, key: str) -> type | None:
        return self._module_dict.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self._module_dict

    def register_module(
        self, name: str | None = None, force: bool = False, module: type | None = None
    ) -> Any:
        def register(cls: type) -> type:
            key = name or cls.__name__
            if not force and key in self._module_dict:
                raise KeyError(f"{key} is already registered in {self.name}")
            self._module_dict[key] = cls
            return cls

        if module is not None:
            return register(module)
        return register

    def build(self, cfg: dict[str, Any]) -> Any:
        args = dict(cfg)
        obj_type = args.pop("type")
        cls = self.get(obj_type)
        if cls is None:
            raise KeyError(f"{obj_type} is not in the {self.name} registry")
        return cls(**args)
