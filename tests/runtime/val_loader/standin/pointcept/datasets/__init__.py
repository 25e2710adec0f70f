"""STAND-IN for pointcept.datasets: a registry, build_dataset, collate_fn and one tiny dataset."""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.data

from pointcept.utils.registry import Registry

DATASETS = Registry("datasets")


def build_dataset(cfg: dict[str, Any]) -> Any:
    return DATASETS.build(cfg)


def collate_fn(batch: list[Any]) -> Any:
    return torch.utils.data.default_collate(batch)


@DATASETS.register_module()
class StandInScenes(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, length: int = 6) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"index": torch.tensor(index), "coord": torch.full((8, 3), float(index))}
