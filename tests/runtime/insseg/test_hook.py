"""LeanInsSegEvaluator inside a (stand-in) Pointcept trainer: same logs, metric and AP; counts gathered."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from podmortem_runtime import insseg

from . import reference
from .scenes import CLASS_NAMES, random_scene

IGNORE = (-1, 1)


class Storage:
    """Stand-in for Pointcept's EventStorage: put_scalar and history(name).avg."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}

    def put_scalar(self, name: str, value: float) -> None:
        self.values.setdefault(name, []).append(value)

    def history(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(avg=float(np.mean(self.values[name])))


class Writer:
    def __init__(self) -> None:
        self.scalars: dict[str, tuple[float, int]] = {}

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars[tag] = (value, step)


class Model:
    """Stand-in for PointGroup in eval mode: returns the prepared predictions for the scene it is given."""

    def __init__(self, outputs: dict[str, dict[str, Any]]) -> None:
        self.outputs = outputs

    def eval(self) -> None:
        pass

    def __call__(self, input_dict: dict[str, Any]) -> dict[str, Any]:
        out = self.outputs[input_dict["scene_key"]]
        return {"loss": torch.tensor(0.25), **out}


def _make_trainer(
    loader: list[dict[str, Any]], outputs: dict[str, dict[str, Any]], logger: logging.Logger
) -> SimpleNamespace:
    cfg = SimpleNamespace(
        data=SimpleNamespace(names=list(CLASS_NAMES), num_classes=len(CLASS_NAMES)),
        evaluate=True,
        enable_wandb=False,
    )
    return SimpleNamespace(
        cfg=cfg,
        model=Model(outputs),
        val_loader=loader,
        logger=logger,
        storage=Storage(),
        writer=Writer(),
        epoch=4,
        comm_info={},
        best_metric_value=0.0,
    )


def _dataset(
    seed: int, names: list[str], *, mapped: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """Loader items, model outputs by scene, and the reference's scenes for the same data."""
    rng = np.random.default_rng(seed)
    loader, outputs, ref = [], {}, []
    for name in names:
        s = random_scene(rng, n_points=900, n_gt=4, n_pred=10, mapped=False, tied_scores=False, ignore=IGNORE)
        item: dict[str, Any] = {
            "name": [name],
            "scene_key": name,
            "offset": torch.tensor([s.segment.size]),
            "segment": torch.from_numpy(s.segment),
            "instance": torch.from_numpy(s.instance),
        }
        point_index = None
        if mapped:  # voxels are the 900 points; the originals sit next to them (knn -> that voxel)
            coord = torch.arange(900, dtype=torch.float32)[:, None].repeat(1, 3)
            point_index = rng.integers(0, 900, 1500)
            item.update(
                coord=coord,
                origin_coord=coord[point_index] + 0.1,
                origin_offset=torch.tensor([1500]),
                origin_segment=torch.from_numpy(s.segment[point_index]),
                origin_instance=torch.from_numpy(s.instance[point_index]),
            )
        loader.append(item)
        outputs[name] = {
            "pred_classes": torch.from_numpy(s.classes),
            "pred_scores": torch.from_numpy(s.scores),
            "pred_masks": torch.from_numpy(s.masks),
        }
        seg = s.segment if point_index is None else s.segment[point_index]
        inst = s.instance if point_index is None else s.instance[point_index]
        ref.append(
            reference.associate(
                s.classes,
                s.scores,
                s.masks,
                seg,
                inst,
                class_names=CLASS_NAMES,
                segment_ignore_index=IGNORE,
                min_region_size=100,
                point_index=point_index,
            )
        )
    return loader, outputs, ref


def _hook(trainer: SimpleNamespace) -> Any:
    from pointcept.engines.hooks.builder import HOOKS

    import podmortem_runtime.pointcept.evaluator  # noqa: F401  (registers the hook)

    hook = HOOKS.build({"type": "LeanInsSegEvaluator", "segment_ignore_index": IGNORE})
    hook.trainer = trainer
    hook.before_train()
    return hook


@pytest.fixture
def logger(caplog: pytest.LogCaptureFixture) -> logging.Logger:
    caplog.set_level(logging.INFO, logger="pointcept-test")
    return logging.getLogger("pointcept-test")


@pytest.mark.parametrize("mapped", [False, True])
def test_eval_logs_pointcept_lines_and_sets_ap50_as_checkpoint_metric(
    fake_pointcept: Path, logger: logging.Logger, caplog: pytest.LogCaptureFixture, mapped: bool
) -> None:
    from pointcept.engines.hooks.evaluator import InsSegEvaluator

    loader, outputs, ref = _dataset(1, ["scene0000_00", "scene0001_00", "scene0002_00"], mapped=mapped)
    trainer = _make_trainer(loader, outputs, logger)
    hook = _hook(trainer)
    assert isinstance(hook, InsSegEvaluator)
    hook.after_epoch()

    expected = reference.average_precision(ref, class_names=CLASS_NAMES, segment_ignore_index=IGNORE)
    lines = [r.getMessage() for r in caplog.records]
    valid = [n for i, n in enumerate(CLASS_NAMES) if i not in IGNORE]
    assert lines == [
        ">>>>>>>>>>>>>>>> Start Evaluation >>>>>>>>>>>>>>>>",
        "Test: [1/3] Loss 0.2500 ",
        "Test: [2/3] Loss 0.2500 ",
        "Test: [3/3] Loss 0.2500 ",
        "Val result: mAP/AP50/AP25 {:.4f}/{:.4f}/{:.4f}.".format(
            expected["all_ap"], expected["all_ap_50%"], expected["all_ap_25%"]
        ),
        *[
            "Class_{}-{} Result: AP/AP50/AP25 {:.4f}/{:.4f}/{:.4f}".format(
                i,
                n,
                expected["classes"][n]["ap"],
                expected["classes"][n]["ap50%"],
                expected["classes"][n]["ap25%"],
            )
            for i, n in enumerate(valid)
        ],
        "<<<<<<<<<<<<<<<<< End Evaluation <<<<<<<<<<<<<<<<<",
    ]
    assert trainer.comm_info["current_metric_name"] == "AP50"
    assert trainer.comm_info["current_metric_value"] == expected["all_ap_50%"]
    assert trainer.writer.scalars["val/AP50"] == (expected["all_ap_50%"], 5)
    assert trainer.writer.scalars["val/loss"] == (0.25, 5)


def test_gather_carries_count_tables_and_padding_duplicates_count_once(
    fake_pointcept: Path, logger: logging.Logger
) -> None:
    import pointcept.utils.comm as comm

    names = ["scene_a", "scene_b", "scene_c", "scene_d"]
    loader, outputs, ref = _dataset(2, names)
    # Rank 1 evaluated scene_c, scene_d and (DistributedSampler padding) scene_a again.
    rank1 = {
        n: insseg.associate(
            outputs[n]["pred_classes"],
            outputs[n]["pred_scores"],
            outputs[n]["pred_masks"],
            loader[k]["segment"],
            loader[k]["instance"],
            class_names=CLASS_NAMES,
            segment_ignore_index=IGNORE,
        )
        for k, n in enumerate(names)
        if n in ("scene_c", "scene_d", "scene_a")
    }
    comm.WORLD.update(rank=0, size=2)
    comm.OTHER_RANKS[:] = [rank1]
    comm.GATHERED_BYTES.clear()
    trainer = _make_trainer(loader[:2], outputs, logger)
    _hook(trainer).eval()

    expected = reference.average_precision(ref, class_names=CLASS_NAMES, segment_ignore_index=IGNORE)
    assert trainer.comm_info["current_metric_value"] == expected["all_ap_50%"]
    dense_bytes = sum(outputs[n]["pred_masks"].numel() for n in names[:2])  # even as bool, per point
    assert comm.GATHERED_BYTES and comm.GATHERED_BYTES[0] < dense_bytes / 4


def test_non_main_rank_only_sends(
    fake_pointcept: Path, logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    import pointcept.utils.comm as comm

    loader, outputs, _ = _dataset(3, ["s0", "s1"])
    comm.WORLD.update(rank=1, size=2)
    trainer = _make_trainer(loader, outputs, logger)
    _hook(trainer).eval()
    assert "current_metric_value" not in trainer.comm_info
    assert not any("Val result" in r.getMessage() for r in caplog.records)


def test_importing_the_integration_without_pointcept_fails_clearly() -> None:
    code = "import podmortem_runtime.pointcept.evaluator"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "podmortem_runtime.pointcept needs Pointcept importable" in done.stderr
