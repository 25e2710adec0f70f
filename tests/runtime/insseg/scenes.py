"""Random scenes shaped like PointGroup output: GT blobs, proposals that cover, split and merge them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CLASS_NAMES = ("wall", "floor", "chair", "table", "sofa")


@dataclass
class RandomScene:
    classes: np.ndarray  # [P] int64
    scores: np.ndarray  # [P] float32, as PointGroup's softmax means
    masks: np.ndarray  # [P, N_columns] int32, dense
    segment: np.ndarray  # [N_points] int64
    instance: np.ndarray  # [N_points] int64
    point_index: np.ndarray | None  # [N_points] -> column, or None (then N_points == N_columns)


def random_scene(
    rng: np.random.Generator,
    *,
    n_points: int,
    n_gt: int,
    n_pred: int,
    mapped: bool,
    tied_scores: bool,
    ignore: tuple[int, ...],
) -> RandomScene:
    """A scene of contiguous GT runs (with ignored points mixed in) and proposals around them."""
    n_classes = len(CLASS_NAMES)
    segment = rng.integers(0, n_classes, n_points)
    instance = np.full(n_points, -1, dtype=np.int64)
    if n_points and n_gt:
        bounds = np.sort(rng.integers(0, n_points + 1, 2 * n_gt))
        ids = rng.choice(np.arange(-1, 3 * n_gt + 5), size=n_gt, replace=False)  # may include -1
        for k in range(n_gt):
            a, b = bounds[2 * k], bounds[2 * k + 1]
            instance[a:b] = ids[k]
            segment[a:b] = rng.choice(n_classes)
    # Sprinkle ignored segments (void points, and GTs whose first point is ignored) and stray ids.
    sprinkle = rng.random(n_points) < rng.choice([0.0, 0.05, 0.3])
    segment[sprinkle] = rng.choice(list(ignore)) if ignore else 0
    strays = rng.random(n_points) < 0.03
    instance[strays] = rng.integers(-1, 3 * n_gt + 5, int(strays.sum()))

    if mapped:
        n_columns = max(1, n_points // 2 + int(rng.integers(0, 5)))  # fewer columns: repeats; +slack: unused
        point_index = rng.integers(0, n_columns, n_points) if n_points else np.zeros(0, np.int64)
    else:
        n_columns = n_points
        point_index = None

    masks = np.zeros((n_pred, n_columns), dtype=np.int32)
    classes = rng.integers(-1, n_classes, n_pred)
    for i in range(n_pred):
        if n_columns == 0:
            break
        kind = rng.integers(0, 3)
        if kind == 0 and n_points:  # a GT (or part of one), seen through the map
            target = instance[rng.integers(0, n_points)]
            members = np.flatnonzero(instance == target)
            keep = members[rng.random(members.size) < rng.uniform(0.4, 1.0)]
            if rng.random() < 0.8:  # mostly the GT's own class, so that matches happen
                classes[i] = segment[members[0]]
            cols = keep if point_index is None else point_index[keep]
        else:  # a slice, possibly spanning GTs
            a = int(rng.integers(0, n_columns))
            cols = np.arange(a, min(n_columns, a + int(rng.integers(1, max(2, n_columns // 2)))))
        masks[i, cols] = rng.choice([1, 2, -1])
        noise = rng.random(n_columns) < 0.02
        masks[i, noise] = 1
    if tied_scores:
        scores = rng.choice(np.array([0.25, 0.5, 1.0], dtype=np.float32), n_pred)
    else:
        scores = rng.random(n_pred).astype(np.float32)
    return RandomScene(classes, scores, masks, segment, instance, point_index)
