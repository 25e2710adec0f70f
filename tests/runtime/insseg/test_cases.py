"""The edge cases of Pointcept's AP, each checked against the reference and, where short, by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from podmortem_runtime import insseg

from . import reference

NAMES = ("wall", "floor", "chair", "table")


def _both(
    preds: list[tuple[Any, Any, Any]],
    segment: np.ndarray,
    instance: np.ndarray,
    *,
    ignore: tuple[int, ...] = (-1,),
    min_region_size: int = 100,
    point_index: np.ndarray | None = None,
) -> dict[str, Any]:
    """Evaluate scenes (all sharing segment/instance) both ways; assert equal; return the lean dict."""
    kw = dict(
        class_names=NAMES,
        segment_ignore_index=ignore,
        instance_ignore_index=-1,
        min_region_size=min_region_size,
        point_index=point_index,
    )
    lean = [insseg.associate(c, s, m, segment, instance, **kw) for c, s, m in preds]
    ref = [
        reference.associate(np.asarray(c), np.asarray(s), np.asarray(m), segment, instance, **kw)
        for c, s, m in preds
    ]
    kw2 = dict(class_names=NAMES, segment_ignore_index=ignore, min_region_size=min_region_size)
    expected = reference.average_precision(ref, **kw2)  # type: ignore[arg-type]
    actual = insseg.average_precision(lean, **kw2)  # type: ignore[arg-type]
    reference.assert_same_scores(expected, actual)
    return actual


def _scene(gt_sizes: list[int], gt_class: list[int], n: int) -> tuple[np.ndarray, np.ndarray]:
    """GTs as consecutive runs from point 0, ids 10, 11, ...; the rest is floor (1), no instance."""
    segment = np.ones(n, dtype=np.int64)
    instance = np.full(n, -1, dtype=np.int64)
    start = 0
    for k, (size, cls) in enumerate(zip(gt_sizes, gt_class, strict=True)):
        segment[start : start + size] = cls
        instance[start : start + size] = 10 + k
        start += size
    return segment, instance


def _masks(n: int, *ranges: tuple[int, int]) -> np.ndarray:
    masks = np.zeros((len(ranges), n), dtype=np.int32)
    for i, (a, b) in enumerate(ranges):
        masks[i, a:b] = 1
    return masks


def test_a_perfect_proposal_scores_one_and_classes_without_gt_are_nan() -> None:
    segment, instance = _scene([150], [2], 400)
    scores = _both([(np.array([2]), np.array([0.9]), _masks(400, (0, 150)))], segment, instance)
    assert scores["classes"]["chair"] == {"ap": 1.0, "ap50%": 1.0, "ap25%": 1.0}
    assert np.isnan(scores["classes"]["table"]["ap"])
    assert scores["all_ap"] == 1.0


def test_zero_proposals_as_pointgroup_returns_them_and_zero_gt() -> None:
    segment, instance = _scene([150], [2], 400)
    empty = (torch.tensor([]), torch.tensor([]), torch.zeros((0, 400), dtype=torch.int32))
    scores = _both([empty], segment, instance)
    assert scores["classes"]["chair"]["ap"] == 0.0  # GT but no prediction
    no_gt_seg, no_gt_inst = np.ones(400, dtype=np.int64), np.full(400, -1, dtype=np.int64)
    scores = _both([empty], no_gt_seg, no_gt_inst)
    assert all(np.isnan(v) for v in (scores["all_ap"], scores["all_ap_50%"], scores["all_ap_25%"]))


def test_all_points_ignored_gives_nan_and_no_false_positive() -> None:
    segment = np.full(300, -1, dtype=np.int64)
    instance = np.repeat(np.arange(3), 100)
    scores = _both(
        [(np.array([2, 3]), np.array([0.5, 0.7]), _masks(300, (0, 150), (100, 300)))], segment, instance
    )
    assert np.isnan(scores["all_ap"])


def test_proposals_of_ignored_classes_are_dropped_entirely() -> None:
    segment, instance = _scene([150, 200], [2, 3], 500)
    kept = (np.array([2]), np.array([0.6]), _masks(500, (0, 140)))
    with_ignored = (
        np.array([2, 1, -1]),
        np.array([0.6, 0.99, 0.98]),
        _masks(500, (0, 140), (0, 150), (150, 350)),
    )
    ignore = (-1, 1)
    base = _both([kept], segment, instance, ignore=ignore)
    extra = _both([with_ignored], segment, instance, ignore=ignore)
    reference.assert_same_scores(base, extra)
    assert "floor" not in extra["classes"]


def test_several_proposals_over_one_gt_one_true_positive_rest_false() -> None:
    segment, instance = _scene([200], [2], 400)
    masks = _masks(400, (0, 190), (0, 180), (0, 150), (250, 400))
    scores = _both([(np.array([2, 2, 2, 2]), np.array([0.8, 0.95, 0.7, 0.99]), masks)], segment, instance)
    # At 0.5 all three overlapping proposals match: TP at 0.95, FPs at 0.8 and 0.7; the 0.99
    # proposal on the background is an FP above it. Curve (score ascending): p = 1/4, 1/3, 1/2, 0
    # at r = 1, 1, 1, 0; Pointcept's centred step widths are 0, 0, 1/2, 1/2, 0: AP = 1/2 · 1/2.
    assert scores["classes"]["chair"]["ap50%"] == 0.25


@pytest.mark.parametrize("n_tp,n_fp,n_fn", [(1, 0, 0), (2, 3, 1), (0, 2, 2), (3, 1, 0)])
def test_single_class_with_every_score_one(n_tp: int, n_fp: int, n_fn: int) -> None:
    """All tied: one curve point, so AP = r (p + 1) / 2 (p, r of the whole set), as Pointcept integrates."""
    n_gt = n_tp + n_fn
    size = 120
    n = size * (n_gt + n_fp) + 10
    segment, instance = _scene([size] * n_gt, [2] * n_gt, n)
    ranges = [(k * size, (k + 1) * size) for k in range(n_tp)]
    ranges += [(size * n_gt + k * size, size * n_gt + (k + 1) * size) for k in range(n_fp)]
    masks = _masks(n, *ranges) if ranges else np.zeros((0, n), dtype=np.int32)
    preds = (np.full(len(ranges), 2), np.ones(len(ranges), dtype=np.float32), masks)
    scores = _both([preds], segment, instance)
    if n_tp + n_fp == 0:
        return
    p = n_tp / (n_tp + n_fp)
    r = n_tp / n_gt
    assert scores["classes"]["chair"]["ap50%"] == pytest.approx(r * (p + 1) / 2 if n_tp else 0.0)


@pytest.mark.parametrize("gt_size", [99, 100])
@pytest.mark.parametrize("pred_size", [99, 100])
def test_gt_and_proposals_of_99_and_100_points(gt_size: int, pred_size: int) -> None:
    segment, instance = _scene([gt_size], [2], 300)
    masks = _masks(300, (0, pred_size))
    scores = _both([(np.array([2]), np.array([0.5]), masks)], segment, instance)
    chair = scores["classes"]["chair"]["ap50%"]
    if gt_size == 99:
        assert np.isnan(chair)  # no GT of min_region_size: NaN even with a prediction
    elif pred_size == 99:
        assert chair == 0.0  # the proposal is dropped: GT without prediction
    else:
        assert chair == 1.0


@pytest.mark.parametrize("k", range(5, 20))
def test_iou_exactly_k_over_20(k: int) -> None:
    """IoU = k/20 exactly: a threshold matches only when the float IoU is strictly above it."""
    segment, instance = _scene([400], [2], 600)
    masks = _masks(600, (0, 20 * k))  # inside the GT: IoU = 20k / 400
    scores = _both([(np.array([2]), np.array([0.5]), masks)], segment, instance)
    hits = [float(20 * k) / 400 > th for th in insseg.OVERLAPS]
    assert scores["classes"]["chair"]["ap50%"] == float(hits[0])
    assert scores["classes"]["chair"]["ap25%"] == float(hits[-1])
    assert scores["classes"]["chair"]["ap"] == pytest.approx(np.mean(hits[:-1]))


def test_unmatched_proposal_mostly_on_ignored_points_is_not_a_false_positive() -> None:
    segment, instance = _scene([200], [2], 600)
    segment[300:600] = -1  # void
    masks = _masks(600, (0, 200), (250, 600))  # second: 300 of its 350 points are void
    scores = _both([(np.array([2, 2]), np.array([0.4, 0.9]), masks)], segment, instance)
    # Its ignored share 300/350 = 0.857 exceeds every threshold up to 0.85: no FP there, and at
    # 0.25. At 0.9 it is an FP scored above the TP: AP 1/4 there.
    assert scores["classes"]["chair"]["ap50%"] == 1.0
    assert scores["classes"]["chair"]["ap25%"] == 1.0
    assert scores["classes"]["chair"]["ap"] == pytest.approx((8 + 0.25) / 9)


def test_point_index_with_repeated_and_unused_columns() -> None:
    rng = np.random.default_rng(7)
    segment, instance = _scene([150, 130], [2, 3], 500)
    n_columns = 400
    point_index = rng.integers(0, 300, 500)  # columns 300..399 unused; many repeated
    masks = np.zeros((5, n_columns), dtype=np.int32)
    for i in range(5):
        masks[i, np.unique(point_index[i * 60 : i * 60 + 200])] = 1
    masks[:, 300:] = 1  # unused columns: cost nothing
    preds = (np.array([2, 3, 2, 3, 0]), np.array([0.9, 0.8, 0.7, 0.6, 0.5]), masks)
    _both([preds], segment, instance, point_index=point_index, min_region_size=50)
    lean = insseg.associate(
        *preds, segment, instance, class_names=NAMES, min_region_size=50, point_index=point_index
    )
    expanded = insseg.associate(
        *preds[:2], masks[:, point_index], segment, instance, class_names=NAMES, min_region_size=50
    )
    _assert_same_tables(lean, expanded)


def test_visited_marks_make_a_proposal_match_only_one_gt_at_low_threshold() -> None:
    """At 0.25 one proposal can clear two GTs: it counts for the first (lower id) only."""
    segment, instance = _scene([150, 150], [2, 2], 400)
    masks = _masks(400, (0, 300), (150, 300))
    scores = _both([(np.array([2, 2]), np.array([0.9, 0.3]), masks)], segment, instance)
    assert scores["classes"]["chair"]["ap25%"] == 1.0


def _assert_same_tables(a: insseg.Scene, b: insseg.Scene) -> None:
    for name in a.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
