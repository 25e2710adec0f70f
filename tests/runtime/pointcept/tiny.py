"""A tiny model, backbone and dataset registered in real Pointcept's registries, for CPU tests.

Importing this module installs the stand-ins (`standins.install`) first, so a
fork-server or spawn DataLoader worker that unpickles `TinyScenes` gets the same
environment as the test process.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from . import standins

standins.install()

from pointcept.datasets.builder import DATASETS  # noqa: E402  (after the stand-ins)
from pointcept.models.builder import MODELS  # noqa: E402

CLASS_NAMES = ["wall", "floor", "cabinet", "bed", "chair", "sofa"]
SEGMENT_IGNORE = (-1, 0, 1)


def make_scene(
    seed: int, *, n_objects: int = 4, per_object: int = 240, background: int = 200
) -> dict[str, Any]:
    """A scene of well-separated blobs (objects of classes 2-5) on a wall/floor background.

    Every object is a dense blob 0.01 m across, 1 m from the next, so PointGroup's
    clustering (radius 0.03 m) finds each one; the voxel grid keeps one point in
    two and ``origin_*`` holds every original point, as Pointcept's val transform does.
    """
    rng = np.random.default_rng(seed)
    coords, segments, instances = [], [], []
    for k in range(n_objects):
        centre = np.array([k * 1.0, (seed % 3) * 1.0, 0.5])
        coords.append(centre + rng.uniform(-0.005, 0.005, (per_object, 3)))
        segments.append(np.full(per_object, 2 + (k + seed) % 4))
        instances.append(np.full(per_object, k + 1))
    coords.append(rng.uniform(-2, 6, (background, 3)) + np.array([0, 0, 3.0]))
    segments.append(rng.integers(0, 2, background))
    instances.append(np.full(background, -1))
    origin_coord = np.concatenate(coords).astype(np.float32)
    origin_segment = np.concatenate(segments).astype(np.int64)
    origin_instance = np.concatenate(instances).astype(np.int64)
    keep = np.arange(0, origin_coord.shape[0], 2)  # "grid sampling"
    coord = origin_coord[keep]
    segment, instance = origin_segment[keep], origin_instance[keep]
    centroid = np.zeros_like(coord)
    for i in np.unique(instance[instance >= 0]):
        centroid[instance == i] = coord[instance == i].mean(0)
    feat = np.eye(len(CLASS_NAMES), dtype=np.float32)[segment]  # one-hot class: a "perfect" backbone
    return {
        "coord": torch.from_numpy(coord),
        "feat": torch.from_numpy(feat),
        "segment": torch.from_numpy(segment),
        "instance": torch.from_numpy(instance),
        "instance_centroid": torch.from_numpy(centroid),
        "origin_coord": torch.from_numpy(origin_coord),
        "origin_segment": torch.from_numpy(origin_segment),
        "origin_instance": torch.from_numpy(origin_instance),
        "offset": torch.tensor([coord.shape[0]]),
        "origin_offset": torch.tensor([origin_coord.shape[0]]),
    }


@DATASETS.register_module(force=True)
class TinyScenes(torch.utils.data.Dataset[dict[str, Any]]):
    """``length`` scenes; each item records the pid of the process that loaded it (``loader_pid``)."""

    def __init__(self, length: int = 3, split: str = "val", loop: int = 1, origin: bool = True) -> None:
        self.length = length
        self.split = split
        self.loop = loop
        self.origin = origin

    def __len__(self) -> int:
        return self.length * self.loop

    def __getitem__(self, index: int) -> dict[str, Any]:
        scene = make_scene(index % self.length + (100 if self.split == "train" else 0))
        if not self.origin:
            for key in ("origin_coord", "origin_segment", "origin_instance", "origin_offset"):
                scene.pop(key)
        scene["loader_pid"] = torch.tensor([os.getpid()])
        if self.split != "train":
            scene["name"] = f"{self.split}_{index:03d}"
        return scene


@MODELS.register_module("TinyOneHot", force=True)
class TinyOneHot(nn.Module):
    """A backbone that passes the (one-hot class) features through a learnable identity."""

    def __init__(self, channels: int = len(CLASS_NAMES)) -> None:
        super().__init__()
        self.proj = nn.Linear(channels, channels)
        with torch.no_grad():
            self.proj.weight.copy_(torch.eye(channels) * 4)
            self.proj.bias.zero_()

    def forward(self, data_dict: dict[str, Any]) -> torch.Tensor:
        return self.proj(data_dict["feat"])  # type: ignore[no-any-return]


@MODELS.register_module("TinyInsSeg", force=True)
class TinyInsSeg(nn.Module):
    """An instance-segmentation model whose proposals are the GT instances, cut worse at each evaluation.

    At the first evaluation each proposal misses 10% of its instance, at the
    second 60%: AP50 falls, so Pointcept's CheckpointSaver must keep epoch 1 as best.
    Records the ``loader_pid`` of every validation batch it sees in ``val_pids``.
    """

    def __init__(self, num_classes: int = len(CLASS_NAMES)) -> None:
        super().__init__()
        self.head = nn.Linear(num_classes, num_classes)
        self.evaluations = 0
        self.val_pids: list[list[int]] = []

    def train(self, mode: bool = True) -> TinyInsSeg:
        if not mode and self.training:
            self.evaluations += 1
            self.val_pids.append([])
        return super().train(mode)

    def forward(self, data_dict: dict[str, Any]) -> dict[str, Any]:
        logits = self.head(data_dict["feat"])
        loss = nn.functional.cross_entropy(logits, data_dict["segment"].clamp(min=0))
        if self.training:
            return {"loss": loss}
        self.val_pids[-1].extend(int(p) for p in data_dict["loader_pid"])
        instance = data_dict["instance"]
        segment = data_dict["segment"]
        ids = [int(i) for i in torch.unique(instance) if i >= 0]
        cut = 0.1 if self.evaluations <= 1 else 0.6
        masks = torch.zeros((len(ids) + 1, instance.shape[0]), dtype=torch.int)
        classes, scores = [], []
        for row, i in enumerate(ids):
            members = torch.nonzero(instance == i).flatten()
            masks[row, members[int(members.numel() * cut) :]] = 1
            classes.append(int(segment[members[0]]))
            scores.append(0.9 - 0.1 * row)
        masks[len(ids), : instance.shape[0] // 3] = 1  # one false positive over the background
        classes.append(2)
        scores.append(0.3)
        return {
            "loss": loss,
            "pred_masks": masks,
            "pred_classes": torch.tensor(classes),
            "pred_scores": torch.tensor(scores),
        }
