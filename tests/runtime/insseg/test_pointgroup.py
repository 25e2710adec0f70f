"""The PointGroup helper and patch: the same predictions as the dense eval branch, masks sparse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from podmortem_runtime import insseg


def _clouds(seed: int) -> dict[str, torch.Tensor]:
    """Three blobs (so clustering finds instances) plus scattered points."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[0.0, 0, 0], [6, 0, 0], [0, 6, 0]])
    blobs = [c + 0.6 * torch.randn(60, 3, generator=g) for c in centres]
    coord = torch.cat([*blobs, 8 * torch.rand(30, 3, generator=g)])
    segment = torch.cat([torch.full((60,), k + 1) for k in range(3)] + [torch.zeros(30, dtype=torch.long)])
    return {
        "coord": coord,
        "feat": coord.clone(),
        "offset": torch.tensor([coord.shape[0]]),
        "segment": segment,
    }


@pytest.mark.parametrize("seed", range(4))
def test_patched_point_group_returns_the_same_predictions_with_sparse_masks(
    fake_pointcept: Path, seed: int
) -> None:
    from pointcept.models.point_group import PointGroup

    from podmortem_runtime.pointcept.pointgroup import patch_point_group

    torch.manual_seed(seed)
    model = PointGroup().eval()
    with torch.no_grad():
        model.seg_head.bias[:] = torch.tensor([-2.0, 1, 1, 1, 1])  # mostly foreground classes
    data = _clouds(seed)
    with torch.no_grad():
        dense = model(dict(data))
        undo = patch_point_group(PointGroup)
        try:
            assert patch_point_group(PointGroup)() is None  # idempotent
            lean = model(dict(data))
        finally:
            undo()
        assert not getattr(PointGroup.forward, "__podmortem_lean__", False)
    assert isinstance(lean["pred_masks"], insseg.SparseMasks)
    assert torch.equal(lean["loss"], dense["loss"])
    assert torch.equal(lean["pred_classes"], dense["pred_classes"])
    assert torch.equal(lean["pred_scores"], dense["pred_scores"])  # bit-equal: same points, same order
    np.testing.assert_array_equal(lean["pred_masks"].to_dense(), dense["pred_masks"].numpy())
    assert dense["pred_masks"].shape[0] > 0 or seed > 0  # the scene does produce proposals


def test_training_forward_is_untouched(fake_pointcept: Path) -> None:
    from pointcept.models.point_group import PointGroup

    from podmortem_runtime.pointcept.pointgroup import patch_point_group

    model = PointGroup().train()
    data = _clouds(0)
    expected = model(dict(data))
    undo = patch_point_group(PointGroup)
    try:
        out = model(dict(data))
    finally:
        undo()
    assert set(out) == {"loss"} and torch.equal(out["loss"], expected["loss"])


def test_helper_counts_each_point_once_and_applies_the_strict_size_filter(fake_pointcept: Path) -> None:
    from podmortem_runtime.pointcept.pointgroup import point_group_predictions

    # Cluster 0: points 0..11 with 3 listed twice (12 distinct); cluster 1: 10 points; cluster 2: 11.
    rows = (
        [[0, p] for p in [*range(12), 3]] + [[1, p] for p in range(20, 30)] + [[2, p] for p in range(30, 41)]
    )
    proposals_idx = torch.tensor(rows, dtype=torch.int)
    proposals_offset = torch.tensor([0, 13, 23, 34], dtype=torch.int)
    probs = torch.softmax(torch.randn(50, 4, generator=torch.Generator().manual_seed(1)), dim=-1)
    out = point_group_predictions(
        proposals_idx,
        proposals_offset,
        logit_pred=probs,
        segment_pred=probs.argmax(1),
        cluster_propose_points=10,
    )
    masks = out["pred_masks"]
    assert masks.n_rows == 2  # 10 points is not more than 10
    np.testing.assert_array_equal(masks.row(0), np.arange(12))
    np.testing.assert_array_equal(masks.row(1), np.arange(30, 41))
    assert out["pred_classes"].tolist() == [int(probs[0].argmax()), int(probs[30].argmax())]


def test_no_proposals_gives_pointgroups_empty_outputs(fake_pointcept: Path) -> None:
    from podmortem_runtime.pointcept.pointgroup import point_group_predictions

    probs = torch.softmax(torch.randn(20, 3), dim=-1)
    out = point_group_predictions(
        torch.zeros((0, 2), dtype=torch.int),
        torch.zeros(1, dtype=torch.int),
        logit_pred=probs,
        segment_pred=probs.argmax(1),
        cluster_propose_points=5,
    )
    assert out["pred_scores"].numel() == 0 and out["pred_masks"].shape == (0, 20)
    scene = insseg.associate(
        out["pred_classes"],
        out["pred_scores"],
        out["pred_masks"],
        np.zeros(20, dtype=np.int64),
        np.zeros(20, dtype=np.int64),
        class_names=["a", "b", "c"],
    )
    assert scene.n_pred == 0
