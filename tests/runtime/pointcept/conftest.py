"""Real Pointcept, from the shared source beside the clone, with only its uninstallable imports stood in.

One environment for the whole folder (importing Pointcept takes seconds): the
stand-in finder and Pointcept's source on the import path, CUDA calls
(``Tensor.cuda``, ``Module.cuda``) made identities so that Pointcept's trainer and
evaluator run on CPU. Everything is taken away after the last test here, so the
other folders' Pointcept stand-ins never meet the real one.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType

import numpy as np
import pytest
import torch

from . import standins

_OURS = ("pointcept", "podmortem_runtime.pointcept", "runtime.pointcept.tiny")


def _ours(name: str) -> bool:
    return standins.is_stood_in(name) or any(name == p or name.startswith(p + ".") for p in _OURS)


def _warm_dense_path() -> None:
    from podmortem_runtime import insseg

    masks = np.zeros((1, 200), dtype=np.int32)
    masks[0, :150] = 1
    insseg.associate(
        [2], [0.5], masks, np.full(200, 2), np.ones(200, dtype=np.int64), class_names=["a", "b", "c"]
    )


@pytest.fixture(scope="package")
def pointcept() -> Iterator[ModuleType]:
    """Real ``pointcept`` (its trainer, hooks, datasets and models imported), ready for CPU."""
    if not standins.POINTCEPT.is_dir():
        pytest.skip(f"Pointcept's shared source is not at {standins.POINTCEPT} (../shared beside the clone)")
    import podmortem_runtime

    saved = {name: module for name, module in sys.modules.items() if _ours(name)}
    saved_attr = podmortem_runtime.__dict__.get("pointcept")
    for name in saved:
        del sys.modules[name]
    # numba looks for scipy (its version, its BLAS) on import and first compile; here scipy is a
    # stand-in, so the dense path runs once first, while scipy is simply absent (as numba allows).
    _warm_dense_path()
    standins.install()
    patch = pytest.MonkeyPatch()
    # CPU instead of CUDA: Pointcept moves the model and every batch with .cuda().
    patch.setattr(torch.Tensor, "cuda", lambda self, *args, **kwargs: self)
    patch.setattr(torch.nn.Module, "cuda", lambda self, *args, **kwargs: self)
    if not hasattr(np, "in1d"):
        # Pointcept's InsSegEvaluator calls np.in1d, removed in NumPy 2.4; isin is its documented successor.
        patch.setattr(np, "in1d", standins.in1d, raising=False)
    try:
        with warnings.catch_warnings():
            # Pointcept's own modules use torch.jit.script, deprecated in torch 2.13; not ours to fix.
            warnings.simplefilter("ignore", DeprecationWarning)
            import pointcept as real
            import pointcept.engines.train

            # The line docs/runtime.md's Dockerfile puts at the top of tools/train.py:
            import podmortem_runtime.pointcept.evaluator
            import podmortem_runtime.pointcept.memory_hook
            import podmortem_runtime.pointcept.trainer

            # Registers the tiny model and dataset in this (fresh) Pointcept's registries. Not
            # `from . import tiny`: after an earlier teardown of this fixture the package still holds
            # the old module as its attribute, and `from .` would take that one, registered in the
            # previous Pointcept (random test order runs this package's modules apart).
            importlib.import_module(f"{__package__}.tiny")

        assert "shared" in str(real.__file__), real.__file__
        yield real
    finally:
        patch.undo()
        standins.uninstall()
        for name in [n for n in sys.modules if _ours(n)]:
            del sys.modules[name]
        sys.modules.update(saved)
        if saved_attr is None:
            podmortem_runtime.__dict__.pop("pointcept", None)
        else:
            podmortem_runtime.__dict__["pointcept"] = saved_attr
