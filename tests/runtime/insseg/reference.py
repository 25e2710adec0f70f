"""The naive dense evaluator the lean path is checked against: Pointcept's semantics, step by step.

Written from the semantics of Pointcept's ``InsSegEvaluator`` (associate_instances,
evaluate_matches): masks expanded to every original point, one full bool mask per
proposal held until AP, one scan of all points per (proposal, GT), greedy matching
with visited marks in the same loop order, and the precision/recall curve built
point by point. Slow and memory-hungry on purpose: it is the oracle, and the
benchmark's baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

OVERLAPS = np.append(np.arange(0.5, 0.95, 0.05), 0.25)


def associate(
    pred_classes: Any,
    pred_scores: Any,
    pred_masks: np.ndarray,
    segment: np.ndarray,
    instance: np.ndarray,
    *,
    class_names: Sequence[str],
    segment_ignore_index: Sequence[int] = (-1,),
    instance_ignore_index: int = -1,
    min_region_size: int = 100,
    point_index: np.ndarray | None = None,
) -> dict[str, Any]:
    """One scene as Pointcept builds it: per class, GT dicts and proposal dicts with full masks."""
    pred_masks = np.asarray(pred_masks)
    if point_index is not None:
        pred_masks = pred_masks[:, point_index]  # Pointcept's expansion to original points
    segment = np.asarray(segment)
    instance = np.asarray(instance)
    ignore = tuple(segment_ignore_index)
    void_mask = np.isin(segment, ignore)
    valid = [name for i, name in enumerate(class_names) if i not in ignore]

    gt_by_class: dict[str, list[dict[str, Any]]] = {name: [] for name in valid}
    ids, first, counts = np.unique(instance, return_index=True, return_counts=True)
    for gid, f, cnt in zip(ids, first, counts, strict=True):
        cls = int(segment[f])
        if gid == instance_ignore_index or cls in ignore:
            continue
        gt_by_class[class_names[cls]].append(
            {"instance_id": int(gid), "segment_id": cls, "vert_count": int(cnt), "matched_pred": []}
        )

    pred_by_class: dict[str, list[dict[str, Any]]] = {name: [] for name in valid}
    uid = 0
    for i in range(len(pred_classes)):
        cls = int(pred_classes[i])
        if cls in ignore:
            continue
        mask = np.not_equal(pred_masks[i], 0)
        pred = {
            "uuid": object(),
            "segment_id": cls,
            "confidence": float(pred_scores[i]),
            "mask": mask,
            "vert_count": int(np.count_nonzero(mask)),
            "void_intersection": int(np.count_nonzero(void_mask & mask)),
        }
        if pred["vert_count"] < min_region_size:
            continue
        matched_gt = []
        for gt in gt_by_class[class_names[cls]]:
            inter = int(np.count_nonzero((instance == gt["instance_id"]) & mask))  # a scan per GT
            if inter > 0:
                matched_gt.append({**gt, "intersection": inter})
                gt["matched_pred"].append({**pred, "intersection": inter})
        pred["matched_gt"] = matched_gt
        pred_by_class[class_names[cls]].append(pred)
        uid += 1
    return {"gt": gt_by_class, "pred": pred_by_class}


def average_precision(
    scenes: list[dict[str, Any]],
    *,
    class_names: Sequence[str],
    segment_ignore_index: Sequence[int] = (-1,),
    min_region_size: int = 100,
) -> dict[str, Any]:
    ignore = tuple(segment_ignore_index)
    valid = [name for i, name in enumerate(class_names) if i not in ignore]
    table = np.zeros((1, len(valid), len(OVERLAPS)))
    for oi, th in enumerate(OVERLAPS):
        visited = {id(p["uuid"]): False for s in scenes for name in valid for p in s["pred"][name]}
        for li, name in enumerate(valid):
            y_true: list[float] = []
            y_score: list[float] = []
            hard_fn = 0
            has_gt = has_pred = False
            for scene in scenes:
                preds = scene["pred"][name]
                gts = [g for g in scene["gt"][name] if g["vert_count"] >= min_region_size]
                has_gt = has_gt or bool(gts)
                has_pred = has_pred or bool(preds)
                cur_true = [1.0] * len(gts)
                cur_score = [-float("inf")] * len(gts)
                cur_match = [False] * len(gts)
                for gi, gt in enumerate(gts):
                    found = False
                    for p in gt["matched_pred"]:
                        if visited[id(p["uuid"])]:
                            continue
                        overlap = float(p["intersection"]) / (
                            gt["vert_count"] + p["vert_count"] - p["intersection"]
                        )
                        if overlap > th:
                            if cur_match[gi]:
                                hi, lo = (
                                    max(cur_score[gi], p["confidence"]),
                                    min(cur_score[gi], p["confidence"]),
                                )
                                cur_score[gi] = hi
                                cur_true.append(0.0)
                                cur_score.append(lo)
                                cur_match.append(True)
                            else:
                                found = True
                                cur_match[gi] = True
                                cur_score[gi] = p["confidence"]
                                visited[id(p["uuid"])] = True
                    if not found:
                        hard_fn += 1
                y_true += [t for t, m in zip(cur_true, cur_match, strict=True) if m]
                y_score += [s for s, m in zip(cur_score, cur_match, strict=True) if m]
                for p in preds:
                    if any(
                        float(g["intersection"]) / (g["vert_count"] + p["vert_count"] - g["intersection"])
                        > th
                        for g in p["matched_gt"]
                    ):
                        continue
                    num_ignore = p["void_intersection"]
                    for g in p["matched_gt"]:
                        if g["vert_count"] < min_region_size:
                            num_ignore += g["intersection"]
                    if float(num_ignore) / p["vert_count"] <= th:
                        y_true.append(0.0)
                        y_score.append(p["confidence"])
            if has_gt and has_pred:
                table[0, li, oi] = _curve_area(np.array(y_true), np.array(y_score), hard_fn)
            elif has_gt:
                table[0, li, oi] = 0.0
            else:
                table[0, li, oi] = float("nan")
    o50 = np.where(np.isclose(OVERLAPS, 0.5))
    o25 = np.where(np.isclose(OVERLAPS, 0.25))
    rest = np.where(~np.isclose(OVERLAPS, 0.25))

    def nanmean(values: np.ndarray) -> float:
        return float("nan") if np.all(np.isnan(values)) else float(np.nanmean(values))

    return {
        "all_ap": nanmean(table[0, :, rest]),
        "all_ap_50%": nanmean(table[0, :, o50]),
        "all_ap_25%": nanmean(table[0, :, o25]),
        "classes": {
            name: {
                "ap": float(np.average(table[0, li, rest])),
                "ap50%": float(np.average(table[0, li, o50])),
                "ap25%": float(np.average(table[0, li, o25])),
            }
            for li, name in enumerate(valid)
        },
    }


def _curve_area(y_true: np.ndarray, y_score: np.ndarray, hard_fn: int) -> float:
    order = np.argsort(y_score)
    scores = y_score[order]
    cumsum = np.cumsum(y_true[order])
    _, starts = np.unique(scores, return_index=True)
    n = len(scores)
    n_true = cumsum[-1] if len(cumsum) else 0
    precision = np.zeros(len(starts) + 1)
    recall = np.zeros(len(starts) + 1)
    cumsum = np.append(cumsum, 0)
    for k, start in enumerate(starts):  # one curve point per distinct score, as Pointcept loops
        below = cumsum[start - 1]
        tp = n_true - below
        fp = n - start - tp
        fn = below + hard_fn
        precision[k] = float(tp) / (tp + fp)
        recall[k] = float(tp) / (tp + fn)
    precision[-1] = 1.0
    recall[-1] = 0.0
    padded = np.append(np.append(recall[0], recall), 0.0)
    return float(np.dot(precision, np.convolve(padded, [-0.5, 0, 0.5], "valid")))


def assert_same_scores(a: dict[str, Any], b: dict[str, Any], *, tol: float = 0.0) -> None:
    """Identical dicts (same keys, same order), NaN equal to NaN; ``tol`` 0 means bit-equal floats."""
    assert list(a) == list(b)
    assert list(a["classes"]) == list(b["classes"])
    pairs = [(k, a[k], b[k]) for k in ("all_ap", "all_ap_50%", "all_ap_25%")]
    for name in a["classes"]:
        assert list(a["classes"][name]) == list(b["classes"][name])
        pairs += [(f"{name}.{k}", v, b["classes"][name][k]) for k, v in a["classes"][name].items()]
    for key, x, y in pairs:
        if np.isnan(x) or np.isnan(y):
            assert np.isnan(x) and np.isnan(y), f"{key}: {x} != {y}"
        else:
            assert abs(x - y) <= tol, f"{key}: {x} != {y}"
