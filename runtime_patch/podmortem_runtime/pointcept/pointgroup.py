"""PointGroup's proposals as `SparseMasks`, straight from the clustering output.

PointGroup's eval branch scatters ``proposals_idx`` (rows of (cluster, point)) into a
dense int32 ``[n_clusters, N_voxel]`` tensor, only to filter, score and return it.
`point_group_predictions` builds the same three outputs (scores, classes, masks)
from the clustering output directly: masks as CSR rows, scores as the same
mean over the same points in the same order, so the AP is unchanged.

In a Pointcept fork, call `patch_point_group` once before building the model
(e.g. in ``tools/train.py`` after the imports)::

    from podmortem_runtime.pointcept.pointgroup import patch_point_group
    patch_point_group()   # PointGroup (PG-v1m1, PG-v1m2) now returns SparseMasks in eval mode

Training is untouched; in eval mode the loss comes from the model's own forward.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from podmortem_runtime.insseg import SparseMasks


def proposals_to_masks(
    proposals_idx: torch.Tensor,
    n_clusters: int,
    n_points: int,
) -> tuple[SparseMasks, torch.Tensor]:
    """All clusters as CSR rows (points ascending, repeats dropped) and each cluster's point count."""
    if proposals_idx.numel() == 0:
        return SparseMasks([], [0] * (n_clusters + 1), n_points), torch.zeros(n_clusters, dtype=torch.long)
    idx = proposals_idx.reshape(-1, 2).long().cpu()
    keys = torch.unique(idx[:, 0] * n_points + idx[:, 1])  # sorted: by cluster, then point
    cluster = keys // n_points
    counts = torch.bincount(cluster, minlength=n_clusters)
    offsets = torch.zeros(n_clusters + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(counts, 0)
    return SparseMasks((keys % n_points).numpy(), offsets.numpy(), n_points), counts


def point_group_predictions(
    proposals_idx: torch.Tensor,
    proposals_offset: torch.Tensor,
    *,
    logit_pred: torch.Tensor,
    segment_pred: torch.Tensor,
    cluster_propose_points: int,
) -> dict[str, Any]:
    """``pred_scores``, ``pred_classes`` and ``pred_masks`` as PointGroup returns them, masks sparse.

    ``logit_pred`` is the softmax output ``[N, C]`` and ``segment_pred`` its argmax, as
    in the model; a cluster is kept when it has more than ``cluster_propose_points``
    distinct points; its class is the predicted segment of its first listed point.
    """
    n_points = int(logit_pred.shape[0])
    n_clusters = int(proposals_offset.shape[0]) - 1
    masks, counts = proposals_to_masks(proposals_idx, n_clusters, n_points)
    keep = torch.nonzero(counts > cluster_propose_points).flatten()
    if keep.numel() == 0:
        empty = SparseMasks([], [0], n_points)
        return {"pred_scores": torch.tensor([]), "pred_classes": torch.tensor([]), "pred_masks": empty}
    first_points = proposals_idx.reshape(-1, 2)[:, 1][proposals_offset[:-1].long()].long()
    classes = segment_pred[first_points.to(segment_pred.device)][keep.to(segment_pred.device)]
    scores = []
    rows = []
    for k, cluster in enumerate(keep.tolist()):
        points = torch.from_numpy(masks.row(cluster)).to(logit_pred.device)
        # The model's logit_pred[mask.bool(), cls].mean(): same points, same (ascending) order.
        scores.append(logit_pred[points, classes[k]].mean())
        rows.append(masks.row(cluster))
    offsets = [0]
    for row in rows:
        offsets.append(offsets[-1] + row.size)
    kept = SparseMasks(np.concatenate(rows), offsets, n_points)
    return {"pred_scores": torch.stack(scores).cpu(), "pred_classes": classes.cpu(), "pred_masks": kept}


def lean_proposals(
    model: Any, data_dict: dict[str, Any], bias_pred: torch.Tensor, logit_pred: torch.Tensor
) -> dict[str, Any]:
    """PointGroup's eval branch (clustering, then proposals) with sparse masks instead of dense ones."""
    ops = sys.modules[type(model).__module__]  # the model module's own ballquery/bfs_cluster/offset helpers
    coord = data_dict["coord"]
    offset = data_dict["offset"]
    center_pred = (coord + bias_pred) / model.voxel_size
    probs = torch.nn.functional.softmax(logit_pred, dim=-1)
    segment_pred = torch.max(probs, 1)[1]
    ignore = torch.tensor(list(model.segment_ignore_index), device=segment_pred.device)
    foreground = ~torch.isin(segment_pred, ignore)
    if foreground.sum() == 0:
        # Pointcept's own branch builds a 1-D proposals_idx here and fails on it; zero proposals is meant.
        proposals_idx = torch.zeros((0, 2), dtype=torch.int)
        proposals_offset = torch.zeros(1, dtype=torch.int)
    else:
        batch_ = ops.offset2batch(offset)[foreground]
        offset_ = torch.nn.ConstantPad1d((1, 0), 0)(ops.batch2offset(batch_))
        idx, start_len = ops.ballquery_batch_p(
            center_pred[foreground],
            batch_.int(),
            offset_.int(),
            model.cluster_thresh,
            model.cluster_closed_points,
        )
        proposals_idx, proposals_offset = ops.bfs_cluster(
            segment_pred[foreground].int().cpu(), idx.cpu(), start_len.cpu(), model.cluster_min_points
        )
        proposals_idx[:, 1] = foreground.nonzero().view(-1).cpu()[proposals_idx[:, 1].long()].int()
    return point_group_predictions(
        proposals_idx,
        proposals_offset,
        logit_pred=probs,
        segment_pred=segment_pred,
        cluster_propose_points=model.cluster_propose_points,
    )


def _point_group_classes() -> list[Any]:
    """PointGroup's classes in this Pointcept: PG-v1m1 and, where it exists, PG-v1m2 (custom criteria).

    PG-v1m2 is the one Pointcept's PTv3 PointGroup config uses; both share the eval branch.
    """
    from pointcept.models.point_group.point_group_v1m1_base import PointGroup

    classes = [PointGroup]
    try:
        from pointcept.models.point_group.point_group_v1m2_custom_criteria import (
            PointGroup as PointGroupCustomCriteria,
        )
    except ImportError:
        return classes
    return [*classes, PointGroupCustomCriteria]


def patch_point_group(point_group_cls: Any = None) -> Callable[[], None]:
    """Make PointGroup's eval forward return `SparseMasks`; returns a function that undoes it.

    ``point_group_cls`` None patches every PointGroup class Pointcept has (PG-v1m1, PG-v1m2).
    Idempotent. The loss part still runs the model's own forward (with the eval
    branch switched off for that call); ``bias_head``/``seg_head`` outputs are
    captured by forward hooks, so the backbone runs once. Extra forward arguments
    (PG-v1m2's ``return_point``) pass through.
    """
    if point_group_cls is None:
        undos = [patch_point_group(cls) for cls in _point_group_classes()]

        def undo_all() -> None:
            for undo_one in reversed(undos):
                undo_one()

        return undo_all
    original = point_group_cls.forward
    if getattr(original, "__podmortem_lean__", False):
        return lambda: None

    def forward(self: Any, data_dict: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        if self.training or any(args) or any(kwargs.values()):  # e.g. return_point=True
            return original(self, data_dict, *args, **kwargs)  # type: ignore[no-any-return]
        captured: dict[str, torch.Tensor] = {}
        handles = [
            self.bias_head.register_forward_hook(lambda m, i, o: captured.__setitem__("bias", o)),
            self.seg_head.register_forward_hook(lambda m, i, o: captured.__setitem__("logit", o)),
        ]
        self.training = True  # this module's flag only: submodules stay in eval mode
        try:
            return_dict: dict[str, Any] = original(self, data_dict)
        finally:
            self.training = False
            for handle in handles:
                handle.remove()
        return_dict.update(lean_proposals(self, data_dict, captured["bias"], captured["logit"]))
        return return_dict

    forward.__podmortem_lean__ = True  # type: ignore[attr-defined]
    forward.__wrapped__ = original  # type: ignore[attr-defined]
    point_group_cls.forward = forward

    def undo() -> None:
        point_group_cls.forward = original

    return undo
