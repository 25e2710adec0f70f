"""What each mask column stands for, as small integer codes, so a proposal is counted in one pass.

Every original point gets one code, ``2 * gt_slot + void``: which GT it belongs to
(or "none", the last slot) and whether its segment is ignored. A proposal's whole
contribution to AP is then the histogram of its points' codes: point count, void
intersection and every GT intersection at once, with no scan per GT.

With Pointcept's knn ``point_index`` (original point -> mask column), a column
stands for all the original points mapped to it. Instead of expanding the masks to
``[P, N_orig]``, each column carries the (code, count) pairs of its original points,
in CSR form; a proposal's histogram adds those counts. Unused columns carry none,
repeated columns carry all of theirs.

Codes are held in the narrowest type that fits (`code_dtype`): at a million points
they are the evaluator's largest per-point array, so uint16 rather than int64 is
2 MB instead of 8 MB of its own peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def code_dtype(n_bins: int) -> np.dtype[Any]:
    """uint16 for up to 32,767 GTs (every real scene), else int32 or int64.

    Not uint8 for small scenes: each code dtype is one more compiled variant of the
    dense pass, and one byte per point is not worth a second multi-second compile.
    """
    if n_bins <= 1 << 16:
        return np.dtype(np.uint16)
    return np.dtype(np.int32) if n_bins <= 1 << 31 else np.dtype(np.int64)


@dataclass(frozen=True)
class ColumnCodes:
    """Per-column point codes: direct (one point per column) or mapped (CSR of code counts)."""

    #: Direct: the code of each column's point. Mapped: the code of each (column, code) pair.
    #: Of `code_dtype` (n_bins).
    codes: npt.NDArray[np.integer[Any]]
    #: Mapped only: original points behind each (column, code) pair.
    counts: IntArray | None
    #: Mapped only: pairs ``col_ptr[c]:col_ptr[c+1]`` belong to column c.
    col_ptr: IntArray | None
    #: Number of distinct codes: ``2 * (G + 1)``.
    n_bins: int

    @classmethod
    def direct(cls, code: npt.NDArray[np.integer[Any]], *, n_bins: int) -> ColumnCodes:
        """One code per column; ``code`` is kept as is (no copy) when already of `code_dtype`."""
        return cls(code.astype(code_dtype(n_bins), copy=False), None, None, n_bins)

    @classmethod
    def mapped(
        cls,
        code: npt.NDArray[np.integer[Any]],
        point_index: npt.NDArray[np.integer[Any]],
        *,
        n_columns: int,
        n_bins: int,
    ) -> ColumnCodes:
        """Count the original points' codes per column, through the map (O(N_orig), no P factor).

        One int64 key per point, sorted in place: 8 bytes a point and no further copy
        (``np.unique`` would add a sorted copy, a mask and an index array).
        """
        key = np.multiply(point_index, n_bins, dtype=np.int64)
        key += code
        key.sort()
        if key.size:
            starts_mask = np.empty(key.size, dtype=np.bool_)
            starts_mask[0] = True
            np.not_equal(key[1:], key[:-1], out=starts_mask[1:])
            starts = np.flatnonzero(starts_mask)
            del starts_mask
            pair_counts = np.diff(starts, append=key.size)
            unique_keys = key[starts]
        else:
            pair_counts = unique_keys = np.zeros(0, dtype=np.int64)
        del key
        columns = unique_keys // n_bins
        col_ptr = np.zeros(n_columns + 1, dtype=np.int64)
        np.cumsum(np.bincount(columns, minlength=n_columns), out=col_ptr[1:])
        codes = (unique_keys % n_bins).astype(code_dtype(n_bins))
        return cls(codes, pair_counts.astype(np.int64, copy=False), col_ptr, n_bins)

    def histogram(self, columns: npt.NDArray[np.integer[Any]]) -> IntArray:
        """Code histogram of the original points behind a set of columns (no repeats in ``columns``)."""
        if self.col_ptr is None:
            return np.bincount(self.codes[columns], minlength=self.n_bins).astype(np.int64, copy=False)
        assert self.counts is not None
        starts = self.col_ptr[columns]
        lengths = self.col_ptr[columns + 1] - starts
        total = int(lengths.sum())
        if total == 0:
            return np.zeros(self.n_bins, dtype=np.int64)
        # Positions of every pair of every listed column, without a Python loop over columns.
        shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        positions = shift + np.arange(total, dtype=np.int64)
        weighted = np.bincount(self.codes[positions], weights=self.counts[positions], minlength=self.n_bins)
        return np.rint(weighted).astype(np.int64)  # float64 sums of counts < 2**53 are exact


class RepeatCheck:
    """A reusable int32 scratch array of N entries, allocated only when a row is not sorted."""

    def __init__(self, n_columns: int) -> None:
        self.n_columns = n_columns
        self._scratch: npt.NDArray[np.int32] | None = None

    def scratch(self) -> npt.NDArray[np.int32]:
        if self._scratch is None:
            self._scratch = np.empty(self.n_columns, dtype=np.int32)
        return self._scratch


def unique_columns(columns: npt.NDArray[np.integer[Any]], check: RepeatCheck) -> npt.NDArray[Any]:
    """``columns`` as a set: returned as is when it has no repeats (checked in O(k)), else deduplicated.

    A strictly increasing row (PointGroup's clustering emits sorted rows) has no
    repeats. Otherwise ``check``'s scratch (4 bytes a column, touched only where a
    row points) shows them: writing each column's position and reading it back shows
    a repeat wherever the last write was another position.
    """
    k = columns.size
    if k < 2:
        return columns
    if bool(np.all(columns[1:] > columns[:-1])):
        return columns
    scratch = check.scratch()
    positions = np.arange(k, dtype=np.int32)
    scratch[columns] = positions
    if np.array_equal(scratch[columns], positions):
        return columns
    return np.unique(columns)
