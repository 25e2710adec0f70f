"""Stand-ins for the modules real Pointcept imports that cannot be installed here; nothing else.

Pointcept's own source (``../shared/third_party/pointcept-d74c646``, beside the
clone) runs for real. Only these are stood in, each module labelled with
``__standin__`` saying why:

- CUDA-only extensions: pointops, pointgroup_ops, spconv, flash_attn, torch_scatter,
  torch_geometric, MinkowskiEngine, torchsparse, ocnn, ...;
- packages too heavy for a test environment or pinned to another torch build:
  wandb (a service client), timm, torchvision, open3d, scipy, transformers, ...

A stood-in module answers every attribute with a placeholder class, so that
``class X(spconv.SparseModule)`` or ``from timm.layers import DropPath`` at import
time works; calling a placeholder raises `StandInCalled`, so no test can pass by
running a stand-in by accident. Where a test does need behaviour, it comes from
the few CPU implementations below, each marked as a stand-in too (and
``numpy.in1d``, which Pointcept's evaluator calls and NumPy 2.4 removed, as ``isin``):
``pointops.knn_query`` (brute force) and ``pointgroup_ops``' ball query and BFS
clustering (a plain CPU version of PointGroup's CUDA op, for small scenes).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[3]
#: Beside the clone, as CI lays it out (``../shared`` from the project root).
POINTCEPT = ROOT.parent / "shared" / "third_party" / "pointcept-d74c646"

#: Top-level modules stood in, and why.
STOOD_IN: dict[str, str] = {
    "h5py": "HDF5 reader, used by datasets not run here",
    "pointops": "CUDA-only extension (Pointcept libs/pointops)",
    "pointops2": "CUDA-only extension",
    "pointgroup_ops": "CUDA-only extension (Pointcept libs/pointgroup_ops)",
    "spconv": "CUDA sparse convolution",
    "flash_attn": "CUDA-only attention kernels",
    "torch_scatter": "compiled extension, built against one torch (not on the index for 2.13 CPU)",
    "torch_geometric": "pulls torch_scatter and friends",
    "torch_cluster": "compiled extension",
    "MinkowskiEngine": "CUDA sparse convolution",
    "torchsparse": "CUDA sparse convolution",
    "ocnn": "octree CNN extension",
    "torch_points_kernels": "compiled extension",
    "torch_points3d": "large framework",
    "Swin3D": "CUDA extension",
    "pointseg": "CUDA extension",
    "wandb": "a logging service client; Pointcept's configs turn it off here",
    "timm": "pulls torchvision, pinned to another torch",
    "torchvision": "pinned to another torch build",
    "open3d": "large native package",
    "scipy": "large native package, used by dataset transforms not run here",
    "transformers": "large package",
    "cv2": "large native package",
    "PIL": "imaging library, used by image datasets not run here",
    "pandas": "not needed by the parts run here",
    "trimesh": "not needed by the parts run here",
    "plyfile": "not needed by the parts run here",
    "camtools": "not needed by the parts run here",
    "imageio": "not needed by the parts run here",
    "nuscenes": "dataset SDK",
    "waymo_open_dataset": "dataset SDK",
    "tensorflow": "dataset SDK dependency",
    "habitat_sim": "simulator",
    "pyquaternion": "not needed by the parts run here",
    "vggt": "model package",
    "sharedarray": "shared-memory cache, optional in Pointcept",
    "SharedArray": "shared-memory cache, optional in Pointcept",
    "peft": "not needed by the parts run here",
}


class StandInCalled(RuntimeError):
    """A stand-in placeholder was used as if it were the real thing."""


class _Placeholder(type):
    """Metaclass: attribute access on a placeholder class yields further placeholders."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}", cls.__module__)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise StandInCalled(f"{cls.__module__}.{cls.__qualname__} is a test stand-in: {_why(cls.__module__)}")

    def __getitem__(cls, item: Any) -> Any:
        return cls  # typing-style subscripts at import time


def _why(module: str) -> str:
    return STOOD_IN.get(module.split(".", 1)[0], "stood in")


def _placeholder(name: str, module: str) -> type:
    cls = _Placeholder(name.rsplit(".", 1)[-1], (), {"__module__": module})
    cls.__qualname__ = name
    return cls


class StandInModule(types.ModuleType):
    """A stood-in package: every attribute is a placeholder, every submodule another stand-in."""

    def __init__(self, name: str) -> None:
        super().__init__(name, f"TEST STAND-IN for {name}: {_why(name)}")
        self.__standin__ = _why(name)
        self.__path__: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(name, self.__name__)


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = StandInModule(spec.name)
        _add_behaviour(module)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class StandInFinder(importlib.abc.MetaPathFinder):
    """Answers imports of `STOOD_IN` packages (and their submodules) with `StandInModule`s."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", 1)[0] not in STOOD_IN:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)


def is_stood_in(name: str) -> bool:
    return name.split(".", 1)[0] in STOOD_IN


def install() -> None:
    """Put the finder first on ``sys.meta_path`` and Pointcept's source on ``sys.path`` (idempotent).

    Also run by `tiny` at import, so that a fork-server or spawn worker, which imports
    the dataset's module afresh, sees the same environment.
    """
    if not any(isinstance(f, StandInFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, StandInFinder())
    if str(POINTCEPT) not in sys.path:
        sys.path.insert(0, str(POINTCEPT))


def uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, StandInFinder)]
    while str(POINTCEPT) in sys.path:
        sys.path.remove(str(POINTCEPT))


def in1d(ar1: Any, ar2: Any, assume_unique: bool = False, invert: bool = False) -> Any:
    """``numpy.in1d`` (removed in NumPy 2.4, called by Pointcept's InsSegEvaluator): ``isin`` flattened."""
    import numpy as np

    return np.isin(np.asarray(ar1).ravel(), ar2, assume_unique=assume_unique, invert=invert)


# -- the CPU behaviour some tests need --------------------------------------------------------------


def knn_query(
    k: int, coord: torch.Tensor, offset: torch.Tensor, new_coord: torch.Tensor, new_offset: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU STAND-IN for ``pointops.knn_query``: brute-force k nearest ``coord`` rows of each query."""
    idx = torch.empty((new_coord.shape[0], k), dtype=torch.int)
    dist = torch.empty((new_coord.shape[0], k), dtype=torch.float)
    start = new_start = 0
    for end, new_end in zip(offset.tolist(), new_offset.tolist(), strict=True):
        d = torch.cdist(new_coord[new_start:new_end].double(), coord[start:end].double())
        values, which = torch.topk(d, k, dim=1, largest=False)
        idx[new_start:new_end] = (which + start).int()
        dist[new_start:new_end] = values.float()
        start, new_start = end, new_end
    return idx, dist


def ballquery_batch_p(
    coords: torch.Tensor,
    batch_idxs: torch.Tensor,
    batch_offsets: torch.Tensor,
    radius: float,
    mean_active: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU STAND-IN for PointGroup's ball query: for each point, the points of its batch within ``radius``.

    Returns ``idx`` (all neighbours, point after point) and ``start_len`` ``[n, 2]``,
    as the CUDA op does (without its ``mean_active`` cap, which only sizes a buffer).
    """
    parts: list[torch.Tensor] = []
    start_len = torch.zeros((coords.shape[0], 2), dtype=torch.int)
    position = 0
    for i in range(coords.shape[0]):
        same = torch.nonzero(batch_idxs == batch_idxs[i]).flatten()
        near = same[((coords[same] - coords[i]) ** 2).sum(1) <= radius * radius]
        start_len[i, 0], start_len[i, 1] = position, near.numel()
        parts.append(near.int())
        position += near.numel()
    return (torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int)), start_len


def bfs_cluster(
    semantic_label: torch.Tensor, ball_query_idxs: torch.Tensor, start_len: torch.Tensor, threshold: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU STAND-IN for PointGroup's BFS clustering over same-label ball-query neighbours.

    ``(cluster_idxs [m, 2] (cluster, point), cluster_offsets [c + 1])``; clusters of
    fewer than ``threshold`` points are dropped, as in the CUDA op.
    """
    n = start_len.shape[0]
    labels = semantic_label.tolist()
    seen = [False] * n
    rows: list[tuple[int, int]] = []
    offsets = [0]
    for seed in range(n):
        if seen[seed]:
            continue
        seen[seed] = True
        members = [seed]
        queue = deque([seed])
        while queue:
            p = queue.popleft()
            s, length = int(start_len[p, 0]), int(start_len[p, 1])
            for q in ball_query_idxs[s : s + length].tolist():
                if not seen[q] and labels[q] == labels[p]:
                    seen[q] = True
                    members.append(q)
                    queue.append(q)
        if len(members) >= threshold:
            cluster = len(offsets) - 1
            rows.extend((cluster, m) for m in members)
            offsets.append(offsets[-1] + len(members))
    idx = torch.tensor(rows, dtype=torch.int).reshape(-1, 2)
    return idx, torch.tensor(offsets, dtype=torch.int)


def _add_behaviour(module: StandInModule) -> None:
    if module.__name__ == "pointops":
        module.knn_query = knn_query
    elif module.__name__ == "pointgroup_ops":
        module.ballquery_batch_p = ballquery_batch_p
        module.bfs_cluster = bfs_cluster
