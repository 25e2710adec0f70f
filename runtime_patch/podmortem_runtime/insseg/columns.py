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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ColumnCodes:
    """Per-column point codes: direct (one point per column) or mapped (CSR of code counts)."""

    #: Direct: the code of each column's point. Mapped: the code of each (column, code) pair.
    codes: npt.NDArray[np.int32]
    #: Mapped only: original points behind each (column, code) pair.
    counts: IntArray | None
    #: Mapped only: pairs ``col_ptr[c]:col_ptr[c+1]`` belong to column c.
    col_ptr: IntArray | None
    #: Number of distinct codes: ``2 * (G + 1)``.
    n_bins: int

    @classmethod
    def direct(cls, code: IntArray, *, n_bins: int) -> ColumnCodes:
        return cls(code.astype(np.int32), None, None, n_bins)

    @classmethod
    def mapped(cls, code: IntArray, point_index: IntArray, *, n_columns: int, n_bins: int) -> ColumnCodes:
        """Count the original points' codes per column, through the map (O(N_orig), no P factor)."""
        key = point_index * n_bins + code
        unique_keys, pair_counts = np.unique(key, return_counts=True)
        columns = unique_keys // n_bins
        col_ptr = np.zeros(n_columns + 1, dtype=np.int64)
        np.cumsum(np.bincount(columns, minlength=n_columns), out=col_ptr[1:])
        return cls((unique_keys % n_bins).astype(np.int32), pair_counts.astype(np.int64), col_ptr, n_bins)

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


def unique_columns(columns: npt.NDArray[np.integer[Any]], scratch: npt.NDArray[np.int32]) -> npt.NDArray[Any]:
    """``columns`` as a set: returned as is when it has no repeats (checked in O(k)), else deduplicated.

    ``scratch`` is a reusable int32 array of N entries: writing each column's position
    and reading it back shows a repeat wherever the last write was another position.
    """
    k = columns.size
    if k < 2:
        return columns
    positions = np.arange(k, dtype=np.int32)
    scratch[columns] = positions
    if np.array_equal(scratch[columns], positions):
        return columns
    return np.unique(columns)
