"""Input handling: torch or numpy, any mask dtype, SparseMasks, clear errors, no torch needed."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from podmortem_runtime import insseg
from podmortem_runtime.insseg import association
from podmortem_runtime.insseg.masks import sparse_from_device_tensor

NAMES = ("wall", "floor", "chair", "table")


@pytest.fixture
def scene_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    n = 900
    instance = np.repeat(np.arange(-1, 8), 100)
    segment = np.repeat(rng.integers(0, 4, 9), 100)
    segment[rng.random(n) < 0.05] = -1
    masks = np.zeros((12, n), dtype=np.int32)
    for i in range(12):
        a = int(rng.integers(0, n - 250))
        masks[i, a : a + int(rng.integers(80, 250))] = 1
    return {
        "classes": rng.integers(-1, 4, 12),
        "scores": rng.random(12).astype(np.float32),
        "masks": masks,
        "segment": segment,
        "instance": instance,
    }


def _tables(scene: insseg.Scene) -> dict[str, np.ndarray]:
    return {name: getattr(scene, name) for name in scene.__dataclass_fields__}


def _assert_same(a: insseg.Scene, b: insseg.Scene) -> None:
    for name, value in _tables(a).items():
        np.testing.assert_array_equal(value, getattr(b, name), err_msg=name)


def _lean(inputs: dict[str, np.ndarray], masks: object, **overrides: object) -> insseg.Scene:
    args = {
        "classes": inputs["classes"],
        "scores": inputs["scores"],
        "segment": inputs["segment"],
        "instance": inputs["instance"],
        **overrides,
    }
    return insseg.associate(
        args["classes"], args["scores"], masks, args["segment"], args["instance"], class_names=NAMES
    )


def test_torch_and_numpy_inputs_give_the_same_tables(scene_inputs: dict[str, np.ndarray]) -> None:
    expected = _lean(scene_inputs, scene_inputs["masks"])
    as_torch = {k: torch.from_numpy(v) for k, v in scene_inputs.items()}
    _assert_same(expected, _lean(as_torch, as_torch["masks"]))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "dtype", [np.bool_, np.uint8, np.int8, np.int16, np.int64, np.float16, np.float32, np.float64]
)
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_any_mask_dtype_nonzero_is_member(
    scene_inputs: dict[str, np.ndarray], dtype: type, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(association, "DENSE_BACKEND", backend)
    expected = _lean(scene_inputs, scene_inputs["masks"])
    masks = scene_inputs["masks"].astype(dtype)
    if dtype not in (np.bool_, np.uint8):
        values = np.array([2, -1, 0.5] if np.dtype(dtype).kind == "f" else [2, -1, 1]).astype(dtype)
        masks = masks * values[np.arange(masks.size).reshape(masks.shape) % 3]
    if np.dtype(dtype).kind == "f":
        masks[masks == 0] = -0.0  # negative zero is zero, not a member
    _assert_same(expected, _lean(scene_inputs, masks))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.bool, torch.int32])
def test_torch_mask_dtypes(scene_inputs: dict[str, np.ndarray], dtype: torch.dtype) -> None:
    expected = _lean(scene_inputs, scene_inputs["masks"])
    masks = torch.from_numpy(scene_inputs["masks"]).to(dtype)
    if dtype.is_floating_point:
        masks = masks * 0.5 - (masks == 0).to(dtype) * 0.0
    _assert_same(expected, _lean(scene_inputs, masks))


def test_sparse_masks_equal_dense_and_repeated_columns_count_once(
    scene_inputs: dict[str, np.ndarray],
) -> None:
    dense = scene_inputs["masks"]
    expected = _lean(scene_inputs, dense)
    sparse = insseg.SparseMasks.from_dense(dense)
    _assert_same(expected, _lean(scene_inputs, sparse))
    rows = [np.concatenate([sparse.row(i), sparse.row(i)[::-1]]) for i in range(sparse.n_rows)]
    doubled = insseg.SparseMasks(
        np.concatenate(rows), np.concatenate([[0], np.cumsum([len(r) for r in rows])]), dense.shape[1]
    )
    _assert_same(expected, _lean(scene_inputs, doubled))
    np.testing.assert_array_equal(doubled.to_dense(), dense)


def test_device_path_finds_members_by_rows(scene_inputs: dict[str, np.ndarray]) -> None:
    """The CUDA path's chunked nonzero search, run on a CPU tensor (no GPU here)."""
    masks = torch.from_numpy(scene_inputs["masks"])
    sparse = sparse_from_device_tensor(masks, rows_per_chunk=5)
    np.testing.assert_array_equal(sparse.to_dense(), scene_inputs["masks"])


@pytest.mark.parametrize(
    "indices,offsets,n,message",
    [
        ([0, 5], [0, 2], 5, r"\[0, 5\)"),
        ([0, 1], [0, 1], 5, "end at len"),
        ([0, 1, 2], [0, 2, 1, 3], 5, "must not decrease"),
        ([0.5], [0, 1], 5, "integers"),
        ([], [], 5, "at least one entry"),
    ],
)
def test_sparse_masks_reject_bad_rows(indices: list[float], offsets: list[int], n: int, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        insseg.SparseMasks(np.array(indices), np.array(offsets), n)


def test_clear_errors_for_mismatched_inputs(scene_inputs: dict[str, np.ndarray]) -> None:
    i = scene_inputs
    with pytest.raises(ValueError, match="one class and one score per proposal"):
        insseg.associate(
            i["classes"][:3], i["scores"], i["masks"], i["segment"], i["instance"], class_names=NAMES
        )
    with pytest.raises(ValueError, match="pass point_index"):
        insseg.associate(
            i["classes"], i["scores"], i["masks"][:, :10], i["segment"], i["instance"], class_names=NAMES
        )
    with pytest.raises(ValueError, match="outside the 4 class_names"):
        insseg.associate(
            i["classes"] + 10, i["scores"], i["masks"], i["segment"], i["instance"], class_names=NAMES
        )
    with pytest.raises(ValueError, match="point_index must lie"):
        insseg.associate(
            i["classes"],
            i["scores"],
            i["masks"][:, :100],
            i["segment"],
            i["instance"],
            class_names=NAMES,
            point_index=np.full(900, 100),
        )
    with pytest.raises(ValueError, match="whole numbers"):
        insseg.associate(
            i["classes"] + 0.5, i["scores"], i["masks"], i["segment"], i["instance"], class_names=NAMES
        )


def test_a_scene_holds_counts_only_and_pickles_small(scene_inputs: dict[str, np.ndarray]) -> None:
    n = 200_000
    rng = np.random.default_rng(0)
    instance = np.repeat(np.arange(20), n // 20)
    segment = np.repeat(rng.integers(0, 4, 20), n // 20)
    starts = rng.integers(0, n - 20_000, 50)
    indices = np.concatenate([np.arange(a, a + 20_000) for a in starts])
    masks = insseg.SparseMasks(indices, np.arange(51) * 20_000, n)
    scene = insseg.associate(
        rng.integers(0, 4, 50), rng.random(50), masks, segment, instance, class_names=NAMES
    )
    assert scene.nbytes < 10_000  # no N-sized array survives the call
    assert len(pickle.dumps(scene)) < 20_000
    assert all(v.size <= 200 for v in _tables(scene).values())


def test_numpy_input_works_without_torch_and_sparse_path_never_imports_numba() -> None:
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "torch":
                    raise ImportError("torch is blocked in this test")
        sys.meta_path.insert(0, Block())
        import numpy as np
        from podmortem_runtime import insseg
        seg = np.zeros(300, dtype=np.int64); inst = np.repeat(np.arange(3), 100)
        masks = insseg.SparseMasks(np.arange(100), np.array([0, 100]), 300)
        scene = insseg.associate(np.array([0]), np.array([0.5]), masks, seg, inst, class_names=["a", "b"])
        scores = insseg.average_precision([scene], class_names=["a", "b"])
        assert "numba" not in sys.modules, "sparse path imported numba"
        dense = insseg.associate(np.array([0]), np.array([0.5]), masks.to_dense(), seg, inst,
                                 class_names=["a", "b"])
        assert "torch" not in sys.modules
        print(scores["all_ap_50%"], dense.n_pred)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0.3333333333333333", "1"]  # 1 of 3 GTs found: r (p + 1) / 2
