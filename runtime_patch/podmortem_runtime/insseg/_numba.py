"""The compiled single pass over dense ``[P, N]`` masks (optional extra ``podmortem[fast]``).

A dense mask of 2,000 proposals over 1M points is 8 GB of int32; the cost floor is
reading it once. A proposal covers a few percent of the points, so almost all of
those bytes are zero: the pass reads each row as 64-bit words, ORs a block of them
(2 KiB) and tests the block once, and only a nonzero block is taken apart into
elements, whose members add to a [K] code histogram that stays in L1. The block's OR
compiles to the same four-accumulator vector loop as the floor's OR of a whole row
(``bench/evaluator.py``), so the pass reads at the floor's speed plus the members'
own counting. Proposals are split among numba's threads (`count_rows`'s
``threads``), one contiguous run of rows each, as the floor splits them.

Every dtype is read as the unsigned integer of its width, with a mask of the bits
that make a value nonzero: all of them for integers and bools, all but the sign
bit for floats (so ``-0.0`` is not a member, NaN is, exactly as ``!= 0``). Rows
that cannot be read as whole words (a strided view, an odd address) take a plain
per-element loop with the same masks, so every input gets the same answer.
Imported only by the dense path, so the sparse path never pays numba's import.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from podmortem_runtime.insseg.columns import ColumnCodes

#: 64-bit words ORed before one test (2 KiB): long enough that the vector loop's
#: reduction and test per block cost little beside its loads (64 words: 0.297 s, 256: 0.278 s
#: on a 4 GB scene), short enough that a block half in a proposal is cheap to
#: take apart.
_BLOCK_WORDS = 256
_WORD_BYTES = 8

#: Stands in for the mapped-only arrays on the direct path (never read there).
_UNUSED = np.zeros(1, dtype=np.int64)

#: The unsigned integer each element width is read as.
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@numba.njit(inline="always")
def _add(
    hist: Any, column: int, codes: Any, col_ptr: Any, counts: Any, mapped: bool
) -> None:  # pragma: no cover - compiled
    """Count one member column: its code (direct), or its original points' (code, count) pairs."""
    if mapped:
        for j in range(col_ptr[column], col_ptr[column + 1]):
            hist[codes[j]] += counts[j]
    else:
        hist[codes[column]] += 1


@numba.njit(inline="always")
def _scan_elements(
    elems: Any,
    lo: int,
    hi: int,
    base: int,
    elem_mask: Any,
    hist: Any,
    codes: Any,
    col_ptr: Any,
    counts: Any,
    mapped: bool,
) -> None:  # pragma: no cover - compiled
    """Members among flat elements ``[lo, hi)``; column = element - ``base``."""
    for e in range(lo, hi):
        if elems[e] & elem_mask:
            _add(hist, e - base, codes, col_ptr, counts, mapped)


@numba.njit(inline="always")
def _scan_words(
    words: Any,
    w_lo: int,
    w_hi: int,
    head: int,
    per_word: int,
    base: int,
    elem_mask: Any,
    word_mask: Any,
    hist: Any,
    codes: Any,
    col_ptr: Any,
    counts: Any,
    mapped: bool,
    elems: Any,
) -> None:  # pragma: no cover - compiled
    """The members among words ``[w_lo, w_hi)`` (a nonzero block), added to ``hist``.

    Mapped columns go word by word (a zero word is skipped), each member through its
    (code, count) pairs. Direct codes go element by element over the block, which is in
    L1 now, and are added in runs: neighbouring members mostly share a code (one GT's
    points), and adding one to the same bin member after member makes each add wait
    for the previous one's store; a run counted in a register is added once. Measured on
    a 4 GB scene, CPU seconds of both threads above the block ORs alone: 0.035 s word by
    word, 0.020 s element by element.
    """
    if mapped:
        for k in range(w_lo, w_hi):
            if words[k] & word_mask:
                first = head + k * per_word
                _scan_elements(
                    elems, first, first + per_word, base, elem_mask, hist, codes, col_ptr, counts, mapped
                )
        return
    members = elems[head + w_lo * per_word : head + w_hi * per_word]
    cols = codes[head + w_lo * per_word - base : head + w_hi * per_word - base]
    last = -1
    run = 0
    for i in range(members.shape[0]):
        if members[i] & elem_mask:
            code = int(cols[i])
            if code == last:
                run += 1
            else:
                if run:
                    hist[last] += run
                last = code
                run = 1
    if run:
        hist[last] += run


@numba.njit(cache=True, nogil=True, parallel=True)
def _count_words(
    elems: Any,
    words: Any,
    block: int,
    head: int,
    per_word: int,
    n_cols: int,
    elem_mask: Any,
    word_mask: Any,
    rows: Any,
    codes: Any,
    col_ptr: Any,
    counts: Any,
    mapped: bool,
    out: Any,
) -> None:  # pragma: no cover - compiled
    """Rows of a C-contiguous mask, whose flat elements ``head + k*per_word ...`` form ``words[k]``.

    ``elems`` is the whole mask as a flat unsigned array, ``words`` the 8-byte-aligned
    run of it. A row's whole words are ORed ``block`` at a time, blocks counted from
    the row's first whole word; the elements before and after them (N not a multiple
    of a word) are read one by one. ``block`` is a run-time value on purpose: with a
    constant trip count LLVM unrolls the OR into one serial chain of scalar ``or``s
    (one word a cycle, below memory speed), with a run-time one it vectorizes it into
    four independent vector accumulators, the floor's own loop. The OR runs over a
    slice of the block indexed from 0: indexed from the block's start, numba's
    negative-index wraparound left LLVM unsure of the sign and it loaded the words
    through gathers (``test_block_or_compiles_to_vector_ors_from_memory``).
    """
    n_words = words.shape[0]
    for r in numba.prange(rows.shape[0]):
        hist = out[r]
        lo = rows[r] * n_cols
        hi = lo + n_cols
        w0 = 0 if lo <= head else (lo - head + per_word - 1) // per_word
        w1 = 0 if hi <= head else min((hi - head) // per_word, n_words)
        if w1 <= w0:
            _scan_elements(elems, lo, hi, lo, elem_mask, hist, codes, col_ptr, counts, mapped)
            continue
        _scan_elements(elems, lo, head + w0 * per_word, lo, elem_mask, hist, codes, col_ptr, counts, mapped)
        for s in range(w0, w1, block):
            e = min(s + block, w1)
            run = words[s:e]
            acc = run[0]
            for k in range(1, run.shape[0]):
                acc |= run[k]
            if acc & word_mask:
                _scan_words(
                    words, s, e, head, per_word, lo, elem_mask, word_mask,
                    hist, codes, col_ptr, counts, mapped, elems,
                )  # fmt: skip
        _scan_elements(elems, head + w1 * per_word, hi, lo, elem_mask, hist, codes, col_ptr, counts, mapped)


@numba.njit(cache=True, nogil=True, parallel=True)
def _count_strided(
    masks: Any, elem_mask: Any, rows: Any, codes: Any, col_ptr: Any, counts: Any, mapped: bool, out: Any
) -> None:  # pragma: no cover - compiled
    """Any 2-D layout, element by element: the path for views that are not whole words."""
    for r in numba.prange(rows.shape[0]):
        row = masks[rows[r]]
        hist = out[r]
        for c in range(row.shape[0]):
            if row[c] & elem_mask:
                _add(hist, c, codes, col_ptr, counts, mapped)


def unsigned_view(masks: npt.NDArray[Any], bits: int = 0) -> tuple[npt.NDArray[Any], int]:
    """``masks`` as same-width unsigned integers and the bits that mean "member".

    ``bits`` is `masks.dense_rows`'s answer for half floats already viewed as int16
    (0x7FFF); 0 means "decide from the dtype".
    """
    width = masks.dtype.itemsize
    if width not in _UNSIGNED or masks.dtype.kind not in "biuf":
        raise TypeError(f"pred_masks: no compiled pass for dtype {masks.dtype}")
    if bits == 0:
        bits = (1 << (8 * width)) - 1
        if masks.dtype.kind == "f":
            bits >>= 1  # every bit but the sign: -0.0 is zero
    return masks.view(_UNSIGNED[width]), bits


def count_rows(
    masks: npt.NDArray[Any],
    rows: npt.NDArray[np.int64],
    table: ColumnCodes,
    n_bins: int,
    *,
    bits: int = 0,
    threads: int = 0,
) -> npt.NDArray[np.int64]:
    """Histogram of point codes over the members of each selected row: ``[len(rows), n_bins]``.

    ``threads`` caps numba's threads for this call (0: numba's own count, which is
    ``NUMBA_NUM_THREADS``, by default the CPU count); proposals are split among them.
    """
    out = np.zeros((rows.size, n_bins), dtype=np.int64)
    if rows.size == 0 or masks.shape[1] == 0:
        return out
    elems, member_bits = unsigned_view(masks, bits)
    dtype = elems.dtype.type
    elem_mask = dtype(member_bits)
    mapped = table.col_ptr is not None
    col_ptr = table.col_ptr if table.col_ptr is not None else _UNUSED
    counts = table.counts if table.counts is not None else _UNUSED
    rows = np.ascontiguousarray(rows, dtype=np.int64)

    previous = numba.get_num_threads()
    if threads > 0:
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    try:
        words = _word_run(elems)
        if words is None:
            _count_strided(elems, elem_mask, rows, table.codes, col_ptr, counts, mapped, out)
        else:
            flat, head, run = words
            per_word = _WORD_BYTES // elems.itemsize
            word_mask = np.full(per_word, member_bits, dtype=dtype).view(np.uint64)[0]  # a mask per lane
            _count_words(
                flat,
                run,
                _BLOCK_WORDS,
                head,
                per_word,
                int(elems.shape[1]),
                elem_mask,
                word_mask,
                rows,
                table.codes,
                col_ptr,
                counts,
                mapped,
                out,
            )
    finally:
        numba.set_num_threads(previous)
    return out


def _word_run(elems: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], int, npt.NDArray[np.uint64]] | None:
    """The flat elements, the count before the first 8-byte boundary, and the whole words from there.

    None when the mask is not one C-contiguous block of naturally aligned elements.
    """
    if not elems.flags.c_contiguous:
        return None
    address = elems.ctypes.data
    if address % elems.itemsize:
        return None
    flat = elems.reshape(-1)
    per_word = _WORD_BYTES // elems.itemsize
    head = min(((-address) % _WORD_BYTES) // elems.itemsize, flat.size)
    n_words = (flat.size - head) // per_word
    run = flat[head : head + n_words * per_word].view(np.uint64)
    return flat, head, run
