"""Masks on an accelerator become sparse rows there: nothing of size P×N is copied to the host.

The same test runs on CUDA where a GPU is present, and here on CPU tensors sent
down the same path (`masks.on_accelerator` pointed at them). Every tensor that
reaches the host (``Tensor.cpu``, ``Tensor.numpy``) is recorded; the largest must
be the member count or a per-point array, never the dense mask.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from podmortem_runtime import insseg
from podmortem_runtime.insseg import masks as masks_mod

from .scenes import CLASS_NAMES, random_scene

IGNORE = (-1, 0, 1)
DEVICES = [
    "cpu-via-device-path",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")),
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "cpu-via-device-path":
        monkeypatch.setattr(masks_mod, "on_accelerator", masks_mod.is_torch_tensor)
        yield "cpu"
    else:
        yield str(request.param)


@pytest.fixture
def host_copies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Element counts of every tensor that crosses to numpy or to the CPU while the test runs."""
    seen: list[int] = []
    cpu, numpy = torch.Tensor.cpu, torch.Tensor.numpy

    def record_cpu(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        seen.append(self.numel())
        return cpu(self, *args, **kwargs)

    def record_numpy(self: torch.Tensor, *args: Any, **kwargs: Any) -> np.ndarray:
        seen.append(self.numel())
        return numpy(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "cpu", record_cpu)
    monkeypatch.setattr(torch.Tensor, "numpy", record_numpy)
    return seen


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.float16])
def test_device_masks_give_the_dense_answer_without_a_host_copy(
    device: str, host_copies: list[int], dtype: torch.dtype
) -> None:
    rng = np.random.default_rng(11)
    scene = random_scene(
        rng, n_points=6000, n_gt=12, n_pred=40, mapped=False, tied_scores=False, ignore=IGNORE
    )
    kw: dict[str, Any] = dict(class_names=CLASS_NAMES, segment_ignore_index=IGNORE)
    expected = insseg.associate(scene.classes, scene.scores, scene.masks, scene.segment, scene.instance, **kw)
    masks = torch.from_numpy(scene.masks).to(dtype).to(device)
    host_copies.clear()
    got = insseg.associate(
        torch.from_numpy(scene.classes).to(device),
        torch.from_numpy(scene.scores).to(device),
        masks,
        torch.from_numpy(scene.segment).to(device),
        torch.from_numpy(scene.instance).to(device),
        **kw,
    )
    for field in ("pred_class", "pred_score", "pred_count", "pred_void", "pair_gt", "pair_inter", "gt_count"):
        np.testing.assert_array_equal(getattr(got, field), getattr(expected, field), err_msg=field)
    members = int(np.count_nonzero(scene.masks))
    dense = scene.masks.size
    # What crossed: per-point arrays (N), row lengths (P) and member columns (at most all members at once).
    assert max(host_copies) <= max(members, scene.segment.size), (max(host_copies), members, dense)
    assert members < dense and dense not in host_copies
