"""Pointcept's own PointGroup classes (PG-v1m1, PG-v1m2) in eval mode on CPU, dense and patched to sparse.

Real: the model classes, their heads, losses, softmax, masking and proposal
filtering; Pointcept's builder; its criteria (PG-v1m2). Stood in: the backbone
(`tiny.TinyOneHot`, a learnable identity over one-hot class features) and the
clustering op (``pointgroup_ops``' ball query and BFS, `standins`' CPU version).
The patched model's `SparseMasks` must be the unpatched model's dense masks, row
for row, with the same scores and classes, and give the same AP in our evaluator
as Pointcept's own ``associate_instances``/``evaluate_matches`` on the dense ones.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from podmortem_runtime import insseg

MODELS = {
    "PG-v1m1": {},
    "PG-v1m2": {"criteria": [dict(type="CrossEntropyLoss", loss_weight=1.0, ignore_index=-1)]},
}


def _model(kind: str) -> Any:
    from pointcept.models import build_model

    from . import tiny

    classes = len(tiny.CLASS_NAMES)
    model = build_model(
        dict(
            type=kind,
            backbone=dict(type="TinyOneHot", channels=classes),
            backbone_out_channels=classes,
            semantic_num_classes=classes,
            segment_ignore_index=tiny.SEGMENT_IGNORE,
            cluster_thresh=1.5,
            cluster_closed_points=300,
            cluster_propose_points=100,
            cluster_min_points=50,
            **MODELS[kind],
        )
    )
    with torch.no_grad():  # centres at the points themselves; classes straight from the features
        model.bias_head[-1].weight.zero_()
        model.bias_head[-1].bias.zero_()
        model.seg_head.weight.copy_(torch.eye(classes) * 5)
        model.seg_head.bias.zero_()
    return model.eval()


def _pointcept_ap(outputs: list[dict[str, Any]], scenes: list[dict[str, Any]]) -> dict[str, Any]:
    """Pointcept's InsSegEvaluator association and AP, on a trainer with only the config it reads."""
    from pointcept.engines.hooks.evaluator import InsSegEvaluator

    from . import tiny

    hook = InsSegEvaluator(segment_ignore_index=tiny.SEGMENT_IGNORE, instance_ignore_index=-1)
    hook.trainer = SimpleNamespace(
        cfg=SimpleNamespace(data=SimpleNamespace(names=tiny.CLASS_NAMES, num_classes=len(tiny.CLASS_NAMES)))
    )
    hook.before_train()
    matched = []
    for out, scene in zip(outputs, scenes, strict=True):
        gt, pred = hook.associate_instances(out, scene["segment"], scene["instance"])
        matched.append(dict(gt=gt, pred=pred))
    return hook.evaluate_matches(matched)  # type: ignore[no-any-return]


@pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context:DeprecationWarning")
@pytest.mark.parametrize("kind", list(MODELS))
def test_point_group_eval_dense_and_sparse(pointcept: ModuleType, kind: str) -> None:
    from podmortem_runtime.pointcept.pointgroup import patch_point_group

    from . import tiny

    model = _model(kind)
    scenes = [tiny.make_scene(seed) for seed in range(3)]
    for seed, scene in enumerate(scenes):  # a tenth of the points predicted as another class
        gen = torch.Generator().manual_seed(seed)
        wrong = torch.rand(scene["feat"].shape[0], generator=gen) < 0.1
        scene["feat"][wrong] = torch.eye(len(tiny.CLASS_NAMES))[
            torch.randint(0, len(tiny.CLASS_NAMES), (int(wrong.sum()),), generator=gen)
        ]
    with torch.no_grad():
        dense = [model(dict(scene)) for scene in scenes]
    undo = patch_point_group()
    try:
        with torch.no_grad():
            sparse = [model(dict(scene)) for scene in scenes]
    finally:
        undo()
    assert not getattr(type(model).forward, "__podmortem_lean__", False), "undone"

    for d, s in zip(dense, sparse, strict=True):
        assert isinstance(s["pred_masks"], insseg.SparseMasks)
        assert d["pred_masks"].shape[0] >= 4, "the clustering stand-in found every object"
        np.testing.assert_array_equal(s["pred_masks"].to_dense(), d["pred_masks"].numpy())
        assert torch.equal(s["pred_classes"], d["pred_classes"])
        assert torch.equal(s["pred_scores"], d["pred_scores"])
        assert torch.equal(s["loss"], d["loss"])

    names = dict(class_names=tiny.CLASS_NAMES, segment_ignore_index=tiny.SEGMENT_IGNORE)
    counted = [
        insseg.associate(
            s["pred_classes"], s["pred_scores"], s["pred_masks"], scene["segment"], scene["instance"], **names
        )
        for s, scene in zip(sparse, scenes, strict=True)
    ]
    ours = insseg.average_precision(counted, **names)
    theirs = _pointcept_ap(dense, scenes)
    assert (ours["all_ap"], ours["all_ap_50%"], ours["all_ap_25%"]) == (
        theirs["all_ap"],
        theirs["all_ap_50%"],
        theirs["all_ap_25%"],
    )
    assert 0 < ours["all_ap"] < 1
