"""Pointcept's instance-segmentation AP (ScanNet protocol), computed from count tables.

Same numbers as ``InsSegEvaluator.evaluate_matches``: the same thresholds, the same
greedy matching (GTs by ascending id, proposals in index order, the visited marks),
the same false-positive rule for unmatched proposals, and the same
precision/recall integration, evaluated with the same float64 operations.

Two facts let this work on counts alone, in a few vectorised steps per scene:
a GT's candidate matches end up as one true positive at the highest score plus
one false positive for every other candidate (Pointcept's max/min swap keeps the
multiset of scores), and AP depends only on the multiset of (score, hit) pairs,
not on the order they were appended in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from podmortem_runtime.insseg.scene import Scene

FloatArray = npt.NDArray[np.float64]

#: Pointcept's thresholds: 0.5, 0.55, ..., 0.9 (np.arange stops before 0.95), then 0.25.
OVERLAPS: FloatArray = np.append(np.arange(0.5, 0.95, 0.05), 0.25)


def average_precision(
    scenes: Iterable[Scene],
    *,
    class_names: Sequence[str],
    segment_ignore_index: Sequence[int] = (-1,),
    min_region_size: int = 100,
) -> dict[str, Any]:
    """``{"all_ap", "all_ap_50%", "all_ap_25%", "classes": {name: {"ap", "ap50%", "ap25%"}}}``.

    Valid classes are the indices of ``class_names`` not in ``segment_ignore_index``;
    a class with no GT of at least ``min_region_size`` points is NaN.
    """
    scenes = list(scenes)
    ignore = {int(i) for i in segment_ignore_index}
    valid = [c for c in range(len(class_names)) if c not in ignore]
    column = np.full(len(class_names), -1, dtype=np.int64)  # class index -> row of the AP table
    column[valid] = np.arange(len(valid))
    for scene in scenes:
        for cls in (scene.gt_class, scene.pred_class):
            if cls.size and (int(cls.max()) >= len(class_names) or int(cls.min()) < 0):
                raise ValueError(
                    "a scene holds a class index outside class_names: "
                    "associate() and average_precision() got different class_names"
                )

    n_classes = len(valid)
    has_gt = np.zeros(n_classes, dtype=bool)
    has_pred = np.zeros(n_classes, dtype=bool)
    for scene in scenes:
        big = scene.gt_count >= min_region_size
        has_gt[_rows(column, scene.gt_class[big])] = True
        has_pred[_rows(column, scene.pred_class)] = True

    ap_table = np.zeros((1, n_classes, OVERLAPS.size), dtype=float)
    for oi, overlap_th in enumerate(OVERLAPS):
        true_parts: list[list[FloatArray]] = [[] for _ in range(n_classes)]
        score_parts: list[list[FloatArray]] = [[] for _ in range(n_classes)]
        hard_fn = np.zeros(n_classes, dtype=np.int64)
        for scene in scenes:
            _match_scene(scene, float(overlap_th), min_region_size, column, true_parts, score_parts, hard_fn)
        for li in range(n_classes):
            if has_gt[li] and has_pred[li]:
                y_true = np.concatenate(true_parts[li]) if true_parts[li] else np.empty(0)
                y_score = np.concatenate(score_parts[li]) if score_parts[li] else np.empty(0)
                ap_table[0, li, oi] = _integrate(y_true, y_score, int(hard_fn[li]))
            elif has_gt[li]:
                ap_table[0, li, oi] = 0.0
            else:
                ap_table[0, li, oi] = float("nan")
    return _summarise(ap_table, [class_names[c] for c in valid])


def _rows(column: npt.NDArray[np.int64], classes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    rows = column[classes]
    return rows[rows >= 0]


def _match_scene(
    scene: Scene,
    overlap_th: float,
    min_region_size: int,
    column: npt.NDArray[np.int64],
    true_parts: list[list[FloatArray]],
    score_parts: list[list[FloatArray]],
    hard_fn: npt.NDArray[np.int64],
) -> None:
    """One scene at one threshold: greedy GT matching, then unmatched proposals as false positives."""
    pair_pred = scene.pair_pred()
    pair_gt = scene.pair_gt
    inter = scene.pair_inter
    gt_count = scene.gt_count
    pred_count = scene.pred_count
    overlap = inter.astype(np.float64) / (gt_count[pair_gt] + pred_count[pair_pred] - inter)
    above = overlap > overlap_th

    # Greedy matching. Pairs sorted by (GT, proposal): GTs ascending id, proposals in index order.
    order = np.lexsort((pair_pred, pair_gt))
    gt_ptr = np.zeros(scene.n_gt + 1, dtype=np.int64)
    np.cumsum(np.bincount(pair_gt, minlength=scene.n_gt), out=gt_ptr[1:])
    visited = np.zeros(scene.n_pred, dtype=bool)
    big = gt_count >= min_region_size
    for g in range(scene.n_gt):
        if not big[g]:
            continue
        li = int(column[scene.gt_class[g]])
        span = order[gt_ptr[g] : gt_ptr[g + 1]]
        preds = pair_pred[span]
        hits = preds[above[span] & ~visited[preds]]  # visited only changes for hits[0], below
        if hits.size == 0:
            hard_fn[li] += 1
            continue
        visited[hits[0]] = True
        scores = scene.pred_score[hits]
        best = int(np.argmax(scores))
        true = np.zeros(hits.size, dtype=np.float64)
        true[best] = 1.0  # the highest score is the GT's; every other candidate is a false positive
        true_parts[li].append(true)
        score_parts[li].append(scores)

    # Unmatched proposals: no paired GT (of any size) above the threshold.
    found = np.bincount(pair_pred[above], minlength=scene.n_pred) > 0
    small_pair = ~big[pair_gt]
    small_inter = np.bincount(pair_pred[small_pair], weights=inter[small_pair], minlength=scene.n_pred)
    num_ignore = scene.pred_void + np.rint(small_inter).astype(np.int64)
    proportion_ignore = num_ignore.astype(np.float64) / pred_count
    false_pos = ~found & (proportion_ignore <= overlap_th)
    for cls in np.unique(scene.pred_class[false_pos]):
        li = int(column[cls])
        scores = scene.pred_score[false_pos & (scene.pred_class == cls)]
        true_parts[li].append(np.zeros(scores.size, dtype=np.float64))
        score_parts[li].append(scores)


def _integrate(y_true: FloatArray, y_score: FloatArray, hard_false_negatives: int) -> float:
    """Area under the precision/recall curve exactly as Pointcept integrates it (no envelope)."""
    score_arg_sort = np.argsort(y_score)
    y_score_sorted = y_score[score_arg_sort]
    y_true_sorted = y_true[score_arg_sort]
    cumsum = np.cumsum(y_true_sorted)
    _, unique_indices = np.unique(y_score_sorted, return_index=True)
    num_examples = len(y_score_sorted)
    num_true_examples = cumsum[-1] if len(cumsum) > 0 else 0
    precision = np.zeros(len(unique_indices) + 1)
    recall = np.zeros(len(unique_indices) + 1)
    before = np.append(cumsum, 0)[unique_indices - 1]  # true examples scored below each threshold
    tp = num_true_examples - before
    fp = num_examples - unique_indices - tp
    fn = before + hard_false_negatives
    precision[:-1] = tp / (tp + fp)
    recall[:-1] = tp / (tp + fn)
    precision[-1] = 1.0  # the artificial first point of the curve
    recall[-1] = 0.0
    recall_padded = np.append(np.append(recall[0], recall), 0.0)
    step_widths = np.convolve(recall_padded, [-0.5, 0, 0.5], "valid")
    return float(np.dot(precision, step_widths))


def _summarise(ap_table: FloatArray, names: list[str]) -> dict[str, Any]:
    """Pointcept's result dict, with its indexing (so its float summation order) reproduced."""
    o50 = np.where(np.isclose(OVERLAPS, 0.5))
    o25 = np.where(np.isclose(OVERLAPS, 0.25))
    o_all_but_25 = np.where(np.logical_not(np.isclose(OVERLAPS, 0.25)))
    scores: dict[str, Any] = {
        "all_ap": _nanmean(ap_table[0, :, o_all_but_25]),
        "all_ap_50%": _nanmean(ap_table[0, :, o50]),
        "all_ap_25%": _nanmean(ap_table[0, :, o25]),
        "classes": {},
    }
    for li, name in enumerate(names):
        scores["classes"][name] = {
            "ap": float(np.average(ap_table[0, li, o_all_but_25])),
            "ap50%": float(np.average(ap_table[0, li, o50])),
            "ap25%": float(np.average(ap_table[0, li, o25])),
        }
    return scores


def _nanmean(values: FloatArray) -> float:
    """np.nanmean, minus its "Mean of empty slice" warning when every class is NaN (the answer is NaN)."""
    if not np.any(~np.isnan(values)):
        return float("nan")
    return float(np.nanmean(values))
