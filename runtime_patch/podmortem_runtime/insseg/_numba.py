"""The compiled single pass over dense ``[P, N]`` masks (optional extra ``podmortem[fast]``).

A dense mask of 2,000 proposals over 1M points is 8 GB of int32; the cost floor is
reading it once. numpy can only scan a row into a temporary index array and then
count it; this loop reads each element once and adds to a [K] histogram that stays
in L1. Imported only by the dense path, so the sparse path never pays numba's import.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from podmortem_runtime.insseg.columns import ColumnCodes


@numba.njit(cache=True, nogil=True, parallel=True)
def _count_single(masks: Any, rows: Any, codes: Any, out: Any) -> None:  # pragma: no cover - compiled
    for r in numba.prange(rows.shape[0]):
        row = masks[rows[r]]
        hist = out[r]
        for c in range(row.shape[0]):
            if row[c] != 0:
                hist[codes[c]] += 1


@numba.njit(cache=True, nogil=True, parallel=True)
def _count_mapped(
    masks: Any, rows: Any, col_ptr: Any, pair_code: Any, pair_count: Any, out: Any
) -> None:  # pragma: no cover - compiled
    for r in numba.prange(rows.shape[0]):
        row = masks[rows[r]]
        hist = out[r]
        for c in range(row.shape[0]):
            if row[c] != 0:
                for j in range(col_ptr[c], col_ptr[c + 1]):
                    hist[pair_code[j]] += pair_count[j]


def count_rows(
    masks: npt.NDArray[Any], rows: npt.NDArray[np.int64], table: ColumnCodes, n_bins: int
) -> npt.NDArray[np.int64]:
    """Histogram of point codes over the members of each selected row: ``[len(rows), n_bins]``."""
    out = np.zeros((rows.size, n_bins), dtype=np.int64)
    if rows.size == 0 or masks.shape[1] == 0:
        return out
    if masks.dtype == np.bool_:
        masks = masks.view(np.uint8)  # same bytes; one compiled variant fewer
    if table.col_ptr is None:
        _count_single(masks, rows, table.codes, out)
    else:
        _count_mapped(masks, rows, table.col_ptr, table.codes, table.counts, out)
    return out
