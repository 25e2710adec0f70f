"""The lean evaluator against the naive dense reference on random scenes: identical dicts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem_runtime import insseg
from podmortem_runtime.insseg import association

from . import reference
from .scenes import CLASS_NAMES, random_scene


@st.composite
def evaluations(draw: st.DrawFn) -> dict[str, object]:
    return {
        "seed": draw(st.integers(0, 2**32 - 1)),
        "n_scenes": draw(st.integers(1, 3)),
        "n_points": draw(st.integers(0, 300)),
        "n_gt": draw(st.integers(0, 8)),
        "n_pred": draw(st.integers(0, 14)),
        "mapped": draw(st.booleans()),
        "tied_scores": draw(st.booleans()),
        "ignore": draw(st.sampled_from([(-1,), (-1, 1), (-1, 0, 1)])),
        "min_region_size": draw(st.sampled_from([1, 3, 10, 25, 100])),
    }


def _run_both(params: dict[str, object], masks_as: str) -> tuple[dict[str, object], dict[str, object]]:
    rng = np.random.default_rng(params["seed"])  # type: ignore[arg-type]
    ignore = params["ignore"]
    mrs = params["min_region_size"]
    ref_scenes, lean_scenes = [], []
    for _ in range(params["n_scenes"]):  # type: ignore[call-overload]
        s = random_scene(
            rng,
            n_points=params["n_points"],
            n_gt=params["n_gt"],  # type: ignore[arg-type]
            n_pred=params["n_pred"],
            mapped=params["mapped"],  # type: ignore[arg-type]
            tied_scores=params["tied_scores"],
            ignore=ignore,
        )  # type: ignore[arg-type]
        kw = dict(
            class_names=CLASS_NAMES,
            segment_ignore_index=ignore,
            instance_ignore_index=-1,
            min_region_size=mrs,
            point_index=s.point_index,
        )
        ref_scenes.append(reference.associate(s.classes, s.scores, s.masks, s.segment, s.instance, **kw))
        masks = insseg.SparseMasks.from_dense(s.masks) if masks_as == "sparse" else s.masks
        lean_scenes.append(insseg.associate(s.classes, s.scores, masks, s.segment, s.instance, **kw))
    kw2 = dict(class_names=CLASS_NAMES, segment_ignore_index=ignore, min_region_size=mrs)
    return (
        reference.average_precision(ref_scenes, **kw2),  # type: ignore[arg-type]
        insseg.average_precision(lean_scenes, **kw2),
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("masks_as", ["sparse", "dense-numba", "dense-numpy"])
@settings(max_examples=60, deadline=None)
@given(params=evaluations())
def test_lean_equals_dense_reference(params: dict[str, object], masks_as: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(association, "DENSE_BACKEND", masks_as.removeprefix("dense-"))
        expected, actual = _run_both(params, masks_as)
    reference.assert_same_scores(expected, actual)


@settings(max_examples=40, deadline=None)
@given(params=evaluations(), chunk=st.integers(1, 40), dtype=st.sampled_from(["int64", "int32", "int16"]))
def test_per_point_codes_chunked_and_narrow_equal_reference(
    params: dict[str, object], chunk: int, dtype: str
) -> None:
    """Per-point codes are built a chunk at a time (ids, first points and counts merged
    across chunks) from inputs kept in their own integer dtype: tiny chunks and narrow
    dtypes must give the same AP as the reference."""
    rng = np.random.default_rng(params["seed"])  # type: ignore[arg-type]
    s = random_scene(
        rng,
        n_points=params["n_points"],  # type: ignore[arg-type]
        n_gt=params["n_gt"],  # type: ignore[arg-type]
        n_pred=params["n_pred"],  # type: ignore[arg-type]
        mapped=params["mapped"],  # type: ignore[arg-type]
        tied_scores=params["tied_scores"],  # type: ignore[arg-type]
        ignore=params["ignore"],  # type: ignore[arg-type]
    )
    kw = dict(
        class_names=CLASS_NAMES,
        segment_ignore_index=params["ignore"],
        instance_ignore_index=-1,
        min_region_size=params["min_region_size"],
    )
    expected = reference.associate(
        s.classes, s.scores, s.masks, s.segment, s.instance, point_index=s.point_index, **kw
    )  # type: ignore[arg-type]
    narrow = [np.asarray(a).astype(dtype) for a in (s.segment, s.instance)]
    pidx = None if s.point_index is None else np.asarray(s.point_index).astype(dtype)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(association, "_POINT_CHUNK", chunk)
        actual = insseg.associate(s.classes, s.scores, s.masks, *narrow, point_index=pidx, **kw)  # type: ignore[arg-type]
    kw2 = dict(
        class_names=CLASS_NAMES,
        segment_ignore_index=params["ignore"],
        min_region_size=params["min_region_size"],
    )
    reference.assert_same_scores(
        reference.average_precision([expected], **kw2),  # type: ignore[arg-type]
        insseg.average_precision([actual], **kw2),  # type: ignore[arg-type]
    )
