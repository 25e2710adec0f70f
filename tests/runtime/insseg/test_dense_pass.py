"""The compiled dense pass against ``np.flatnonzero(row != 0)``, on the layouts its word reads must get right.

The pass reads rows as 64-bit words with a per-lane mask, so what can go wrong is
at the edges: rows that start or end inside a word, views that start off a word
boundary, odd addresses and strides (the per-element path), and float bit patterns
(``-0.0`` has a set bit but is not a member; NaN and subnormals are).
"""

from __future__ import annotations

import platform
import re
from typing import Any

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem_runtime import insseg
from podmortem_runtime.insseg import _numba, association
from podmortem_runtime.insseg.columns import ColumnCodes

DTYPES = (
    np.bool_,
    np.int8,
    np.uint8,
    np.int16,
    np.uint16,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
)
N_BINS = 6


def _special(dtype: Any) -> np.ndarray:
    """Values that are members (nonzero) of this dtype, including the ones bit tests get wrong."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return np.array([True])
    if kind == "f":
        info = np.finfo(dtype)
        return np.array(
            [
                1,
                -1,
                0.5,
                np.nan,
                np.inf,
                -np.inf,
                info.smallest_subnormal,
                -info.smallest_subnormal,
                info.max,
            ],
            dtype=dtype,
        )
    info = np.iinfo(dtype)
    return np.array(sorted({1, 2, info.max, info.min if info.min else 3, info.max // 2 + 1}), dtype=dtype)


def _zero(dtype: Any) -> np.ndarray:
    """Zeros of this dtype, including ``-0.0`` for floats."""
    return np.array([0.0, -0.0] if np.dtype(dtype).kind == "f" else [0], dtype=dtype)


def _masks(rng: np.random.Generator, dtype: Any, n_rows: int, n_cols: int, density: float) -> np.ndarray:
    out = rng.choice(_zero(dtype), size=(n_rows, n_cols))
    members = rng.random((n_rows, n_cols)) < density
    out[members] = rng.choice(_special(dtype), size=int(members.sum()))
    return out


def _expected(masks: np.ndarray, rows: np.ndarray, table: ColumnCodes) -> np.ndarray:
    return np.stack(
        [table.histogram(np.flatnonzero(masks[r] != 0)) for r in rows] or [np.zeros(table.n_bins, np.int64)]
    )[: rows.size]


def _layout(base: np.ndarray, how: str, n_rows: int, n_cols: int) -> np.ndarray:
    """``base[:n_rows, :n_cols]``'s values, laid out as named (all views but "c")."""
    block = np.ascontiguousarray(base[:n_rows, :n_cols])
    if how == "c":
        return block
    if how == "offset":  # C-contiguous, first element off a word boundary
        size = block.size
        buffer = np.zeros(size + 3, dtype=block.dtype)
        view = buffer[1 : 1 + size].reshape(block.shape)
        view[...] = block
        return view
    if how == "unaligned":  # address not a multiple of the item size: per-element path
        raw = np.zeros(block.nbytes + 1, dtype=np.uint8)
        view = np.frombuffer(raw.data, dtype=block.dtype, count=block.size, offset=1).reshape(block.shape)
        view.setflags(write=True)
        view[...] = block
        return view
    if how == "fortran":
        return np.asfortranarray(block)
    if how == "strided":  # every other column of a wider array
        wide = np.zeros((n_rows, 2 * n_cols), dtype=block.dtype)
        wide[:, ::2] = block
        return wide[:, ::2]
    raise AssertionError(how)


def _direct_table(rng: np.random.Generator, n_cols: int) -> ColumnCodes:
    return ColumnCodes.direct(rng.integers(0, N_BINS, n_cols), n_bins=N_BINS)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n_cols", [1, 3, 7, 8, 9, 31, 33, 255, 256, 257, 1029, 2047, 2053, 4097, 6151])
def test_word_pass_equals_nonzero_for_every_dtype_and_width(dtype: Any, n_cols: int) -> None:
    """Widths around the word (8 B) and the block (2 KiB): rows start and end inside words and blocks."""
    rng = np.random.default_rng(n_cols)
    masks = _masks(rng, dtype, 7, n_cols, 0.05)
    masks[0, -1] = _special(dtype)[-1]  # a member in the very last element of a row...
    masks[1, 0] = _special(dtype)[0]  # ...and in the first
    masks[2] = _special(dtype)[0]  # a full row
    masks[3] = _zero(dtype)[-1]  # a row of only -0.0 (or 0): no member
    table = _direct_table(rng, n_cols)
    rows = np.arange(7, dtype=np.int64)
    got = _numba.count_rows(masks, rows, table, N_BINS)
    np.testing.assert_array_equal(got, _expected(masks, rows, table))
    assert got[3].sum() == 0


@pytest.mark.parametrize("dtype", [np.bool_, np.int16, np.int32, np.float32, np.float64], ids=str)
@pytest.mark.parametrize("how", ["offset", "unaligned", "fortran", "strided"])
def test_views_take_a_correct_path(dtype: Any, how: str) -> None:
    rng = np.random.default_rng(7)
    base = _masks(rng, dtype, 9, 301, 0.1)
    masks = _layout(base, how, 9, 301)
    np.testing.assert_array_equal(masks, base)
    table = _direct_table(rng, 301)
    rows = np.array([0, 2, 3, 8], dtype=np.int64)
    np.testing.assert_array_equal(_numba.count_rows(masks, rows, table, N_BINS), _expected(base, rows, table))


def test_float_sign_bit_alone_is_not_a_member() -> None:
    """A word of ``-0.0`` has bits set in every lane; the lane mask must clear them."""
    for dtype in (np.float16, np.float32, np.float64):
        masks = np.full((2, 64), -0.0, dtype=dtype)
        masks[1, 37] = np.finfo(dtype).smallest_subnormal  # only the lowest bit set: a member
        got = _numba.count_rows(
            masks, np.arange(2, dtype=np.int64), _direct_table(np.random.default_rng(0), 64), N_BINS
        )
        assert got.sum(axis=1).tolist() == [0, 1]


def test_half_floats_read_as_int16_with_the_sign_bit_cleared() -> None:
    """What `masks.dense_rows` hands over for torch bfloat16/float16: int16 bits and 0x7FFF."""
    rng = np.random.default_rng(1)
    values = _masks(rng, np.float16, 5, 77, 0.2)
    table = _direct_table(rng, 77)
    rows = np.arange(5, dtype=np.int64)
    got = _numba.count_rows(values.view(np.int16), rows, table, N_BINS, bits=0x7FFF)
    np.testing.assert_array_equal(got, _expected(values, rows, table))


def test_mapped_columns_and_thread_counts_agree() -> None:
    rng = np.random.default_rng(2)
    n_cols, n_points = 523, 1400
    masks = _masks(rng, np.int32, 40, n_cols, 0.08)
    table = ColumnCodes.mapped(
        rng.integers(0, N_BINS, n_points), rng.integers(0, n_cols, n_points), n_columns=n_cols, n_bins=N_BINS
    )
    rows = np.array([1, 4, 5, 6, 30, 39], dtype=np.int64)
    expected = _expected(masks, rows, table)
    for threads in (0, 1, 2):
        np.testing.assert_array_equal(
            _numba.count_rows(masks, rows, table, N_BINS, threads=threads), expected
        )
        np.testing.assert_array_equal(
            _numba.count_rows(np.asfortranarray(masks), rows, table, N_BINS, threads=threads), expected
        )


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from(DTYPES),
    n_rows=st.integers(1, 6),
    n_cols=st.integers(1, 700),
    density=st.sampled_from([0.0, 0.003, 0.05, 0.5, 1.0]),
    how=st.sampled_from(["c", "c", "offset", "unaligned", "strided"]),
)
def test_random_layouts_equal_nonzero(
    seed: int, dtype: Any, n_rows: int, n_cols: int, density: float, how: str
) -> None:
    rng = np.random.default_rng(seed)
    base = _masks(rng, dtype, n_rows, n_cols, density)
    masks = _layout(base, how, n_rows, n_cols)
    table = _direct_table(rng, n_cols)
    rows = np.flatnonzero(rng.random(n_rows) < 0.7).astype(np.int64)
    np.testing.assert_array_equal(_numba.count_rows(masks, rows, table, N_BINS), _expected(base, rows, table))


def test_thread_setting_caps_the_pass_and_leaves_numba_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """``association.DENSE_THREADS`` reaches the pass; above NUMBA_NUM_THREADS it is capped, not an error."""
    rng = np.random.default_rng(4)
    masks = _masks(rng, np.int32, 8, 400, 0.3)
    segment = rng.integers(0, 3, 400)
    instance = np.repeat(np.arange(4), 100)
    before = numba.get_num_threads()
    scenes = []
    for threads in (0, 1, 10_000):
        monkeypatch.setattr(association, "DENSE_THREADS", threads)
        scenes.append(
            insseg.associate(
                np.zeros(8, dtype=np.int64),
                np.linspace(0, 1, 8),
                masks,
                segment,
                instance,
                class_names=("a", "b", "c"),
                min_region_size=1,
            )
        )
        assert numba.get_num_threads() == before
    for scene in scenes[1:]:
        for name in scene.__dataclass_fields__:
            np.testing.assert_array_equal(getattr(scene, name), getattr(scenes[0], name), err_msg=name)
    assert scenes[0].n_pred == 8


def _has_avx2() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " avx2" in f.read()
    except OSError:
        return False


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not _has_avx2(), reason="x86 AVX2 code")
def test_block_or_compiles_to_vector_ors_from_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass reads at the floor's speed only if each block's OR is a vector loop over memory.

    Two ways it compiled slower, with the same answers: a constant-length block fully
    unrolled into one chain of scalar ``or``s, and words loaded through gathers where
    LLVM could not rule out a negative (wrapped) index. Compiled here without the cache,
    whose code cannot be inspected.
    """
    fresh = numba.njit(parallel=True, nogil=True)(_numba._count_words.py_func)
    monkeypatch.setattr(_numba, "_count_words", fresh)
    rng = np.random.default_rng(5)
    masks = _masks(rng, np.int32, 4, 3000, 0.05)
    table = _direct_table(rng, 3000)
    rows = np.arange(4, dtype=np.int64)
    got = _numba.count_rows(masks, rows, table, N_BINS)
    np.testing.assert_array_equal(got, _expected(masks, rows, table))
    asm = fresh.inspect_asm(fresh.signatures[0])
    assert re.search(r"\bvpor[dq]?\s+-?\d*\(%\w+,%\w+,8\), %[yz]mm", asm), "no vector OR of words from memory"
    assert "gather" not in asm
