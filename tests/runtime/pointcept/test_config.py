"""The config lines docs/runtime.md documents, appended to Pointcept's real PTv3 PointGroup config.

Loaded with Pointcept's own ``Config.fromfile`` (``_base_`` inheritance included)
and built with its own registries: the trainer type resolves to PodmortemTrainer,
and every hook in the list builds.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

from . import standins

DOC = standins.ROOT / "docs" / "runtime.md"
CONFIG = "configs/scannet/insseg-pointgroup-v1m2-0-ptv3-base.py"


def documented_snippet() -> str:
    text = DOC.read_text()
    marker = text.index("<!-- config-snippet:")
    block = re.search(r"```python\n(.*?)```", text[marker:], re.S)
    assert block is not None, "no python block after the config-snippet marker in docs/runtime.md"
    return block[1]


def test_documented_snippet_loads_with_pointcepts_config(pointcept: ModuleType, tmp_path: Path) -> None:
    from pointcept.engines.hooks import build_hooks
    from pointcept.engines.train import TRAINERS
    from pointcept.utils.config import Config

    from podmortem_runtime.pointcept.evaluator import LeanInsSegEvaluator
    from podmortem_runtime.pointcept.memory_hook import PodmortemMemoryHook
    from podmortem_runtime.pointcept.trainer import PodmortemTrainer

    # The real file, in a tree where its "../_base_/default_runtime.py" resolves to the real base.
    (tmp_path / "configs" / "scannet").mkdir(parents=True)
    (tmp_path / "configs" / "_base_").symlink_to(standins.POINTCEPT / "configs" / "_base_")
    path = tmp_path / CONFIG
    path.write_text((standins.POINTCEPT / CONFIG).read_text() + "\n" + documented_snippet())

    cfg = Config.fromfile(str(path))
    assert cfg.model.type == "PG-v1m2" and cfg.model.backbone.type == "PT-v3m1"  # the file's own settings
    assert cfg.enable_amp is True and cfg.data.val.type == "ScanNetDataset"
    assert cfg.val_loader_policy == "auto"
    assert TRAINERS.get(cfg.train.type) is PodmortemTrainer
    original = Config.fromfile(str(standins.POINTCEPT / CONFIG))
    swapped = ["LeanInsSegEvaluator" if h.type == "InsSegEvaluator" else h.type for h in original.hooks]
    assert [h.type for h in cfg.hooks] == [*swapped[:4], "PodmortemMemoryHook", *swapped[4:]]
    hooks = build_hooks(cfg.hooks)
    lean = next(h for h in hooks if isinstance(h, LeanInsSegEvaluator))
    assert tuple(lean.segment_ignore_index) == (-1, 0, 1) == tuple(original.segment_ignore_index)
    assert any(isinstance(h, PodmortemMemoryHook) for h in hooks)
    assert "PodmortemTrainer" in cfg.pretty_text  # what Pointcept dumps to the experiment folder
