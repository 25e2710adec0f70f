"""One scene's proposals and GT instances, reduced to the count tables AP needs.

This is Pointcept's ``InsSegEvaluator.associate_instances`` without its memory: no
mask is kept, no ``[P, N_orig]`` expansion is built, and each proposal's points are
read once (a code histogram, see `columns`) instead of once per GT.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from podmortem_runtime.insseg import masks as masks_mod
from podmortem_runtime.insseg.columns import ColumnCodes, RepeatCheck, code_dtype, unique_columns
from podmortem_runtime.insseg.masks import SparseMasks
from podmortem_runtime.insseg.scene import Scene

IntArray = npt.NDArray[np.int64]
log = logging.getLogger(__name__)

#: How dense masks are read: "auto" (numba when importable, else numpy), "numba" or "numpy".
#: A module setting rather than an argument, so that the public call stays Pointcept-shaped.
DENSE_BACKEND = "auto"

#: Threads for the compiled dense pass: 0 leaves numba's count (``NUMBA_NUM_THREADS``, by
#: default every CPU); 1 keeps it to the calling thread, e.g. beside busy DataLoader workers.
DENSE_THREADS = 0

#: Largest histogram block held at once, in int64 entries (16 MiB): bounds memory when G is large.
_HIST_BLOCK_ENTRIES = 1 << 21

#: Points handled at once when building per-point codes: the temporaries (a chunk's sort,
#: its GT positions and void flags, ~30 bytes a point) stay near 2 MB whatever N is.
_POINT_CHUNK = 1 << 16


def associate(
    pred_classes: Any,
    pred_scores: Any,
    pred_masks: Any,
    segment: Any,
    instance: Any,
    *,
    class_names: Sequence[str],
    segment_ignore_index: Sequence[int] = (-1,),
    instance_ignore_index: int = -1,
    min_region_size: int = 100,
    point_index: Any = None,
) -> Scene:
    """Count one scene's proposals against its GT instances, as Pointcept's ``associate_instances``.

    ``pred_masks`` is a dense ``[P, N]`` tensor/array (nonzero = member) or `SparseMasks`.
    ``segment``/``instance`` are per mask column, or per original point when
    ``point_index`` (original point -> column) is given.
    """
    classes = masks_mod.as_int_vector(pred_classes, name="pred_classes")
    scores = masks_mod.as_vector(pred_scores, name="pred_scores").astype(np.float64)
    seg = masks_mod.as_index_vector(segment, name="segment")
    inst = masks_mod.as_index_vector(instance, name="instance")
    ignore = np.asarray(tuple(segment_ignore_index), dtype=np.int64)
    n_classes = len(class_names)

    if isinstance(pred_masks, SparseMasks):
        sparse: SparseMasks | None = pred_masks
        dense: npt.NDArray[Any] | None = None
        bits = 0
        n_rows, n_columns = pred_masks.shape
    elif masks_mod.on_accelerator(pred_masks):  # rows found on the device; only member indices come over
        sparse, dense, bits = masks_mod.sparse_from_device_tensor(pred_masks), None, 0
        n_rows, n_columns = sparse.shape
    else:
        sparse = None
        dense, bits = masks_mod.dense_rows(pred_masks)
        n_rows, n_columns = int(dense.shape[0]), int(dense.shape[1])

    if not (classes.size == scores.size == n_rows):
        raise ValueError(
            f"pred_classes ({classes.size}), pred_scores ({scores.size}) and pred_masks rows ({n_rows}) "
            "must agree: one class and one score per proposal"
        )
    if seg.size != inst.size:
        raise ValueError(f"segment ({seg.size}) and instance ({inst.size}) must have one entry per point")
    if point_index is None:
        pidx = None
        if seg.size != n_columns:
            raise ValueError(
                f"pred_masks has {n_columns} columns but segment/instance have {seg.size} points; "
                "pass point_index to map original points to mask columns"
            )
    else:
        pidx = masks_mod.as_index_vector(point_index, name="point_index")
        if pidx.size != seg.size:
            raise ValueError(
                f"point_index ({pidx.size}) must have one entry per point of segment ({seg.size})"
            )
        if pidx.size and (int(pidx.min()) < 0 or int(pidx.max()) >= n_columns):
            raise ValueError(f"point_index must lie in [0, {n_columns}) (the mask columns)")

    gt_ids, gt_class, gt_count, code = _gt_table(seg, inst, ignore, instance_ignore_index, n_classes)
    n_gt = gt_ids.size
    n_bins = 2 * (n_gt + 1)
    table = (
        ColumnCodes.direct(code, n_bins=n_bins)
        if pidx is None
        else ColumnCodes.mapped(code, pidx, n_columns=n_columns, n_bins=n_bins)
    )
    del code

    # Proposals of ignored classes are dropped before anything is counted, as in Pointcept.
    candidates = np.flatnonzero(~np.isin(classes, ignore)).astype(np.int64)
    bad = classes[candidates]
    bad = bad[(bad < 0) | (bad >= n_classes)]
    if bad.size:
        raise ValueError(f"pred_classes holds {int(bad[0])}, outside the {n_classes} class_names")

    kept: list[IntArray] = []
    kept_void: list[IntArray] = []
    kept_count: list[IntArray] = []
    pair_rows: list[IntArray] = []
    pair_gt: list[IntArray] = []
    pair_inter: list[IntArray] = []
    n_kept = 0
    block = max(1, _HIST_BLOCK_ENTRIES // n_bins)
    repeats = RepeatCheck(n_columns)  # sparse rows only
    for start in range(0, candidates.size, block):
        rows = candidates[start : start + block]
        if sparse is not None:
            hist = _count_sparse(sparse, rows, table, repeats)
        else:
            assert dense is not None
            hist = _count_dense(dense, bits, rows, table)
        count = hist.sum(axis=1)
        keep = count >= min_region_size
        hist, rows, count = hist[keep], rows[keep], count[keep]
        void = hist[:, 1::2].sum(axis=1)
        inter = (hist[:, 0::2] + hist[:, 1::2])[:, :n_gt]  # last slot is "no GT"
        same_class = gt_class[None, :] == classes[rows][:, None]
        r, g = np.nonzero((inter > 0) & same_class)  # row-major: GTs ascending within a proposal
        kept.append(rows)
        kept_void.append(void)
        kept_count.append(count)
        pair_rows.append(r + n_kept)
        pair_gt.append(g.astype(np.int64))
        pair_inter.append(inter[r, g])
        n_kept += rows.size

    kept_rows = _cat(kept)
    pair_pred = _cat(pair_rows)
    pair_offsets = np.zeros(n_kept + 1, dtype=np.int64)
    np.cumsum(np.bincount(pair_pred, minlength=n_kept), out=pair_offsets[1:])
    return Scene(
        gt_ids=gt_ids,
        gt_class=gt_class,
        gt_count=gt_count,
        pred_class=classes[kept_rows],
        pred_score=scores[kept_rows],
        pred_count=_cat(kept_count),
        pred_void=_cat(kept_void),
        pred_index=kept_rows,
        pair_offsets=pair_offsets,
        pair_gt=_cat(pair_gt),
        pair_inter=_cat(pair_inter),
    )


def _gt_table(
    seg: npt.NDArray[np.integer[Any]],
    inst: npt.NDArray[np.integer[Any]],
    ignore: IntArray,
    instance_ignore_index: int,
    n_classes: int,
) -> tuple[IntArray, IntArray, IntArray, npt.NDArray[np.integer[Any]]]:
    """GT ids, classes (segment of the first point), point counts, and each point's code.

    A point's code is ``2 * slot + void``: its GT's row (G: none) and whether its
    segment is ignored. Both passes go `_POINT_CHUNK` points at a time, so the only
    O(N) array built is the codes themselves, in `code_dtype` (2 bytes a point).
    """
    n = inst.size
    chunks = range(0, n, _POINT_CHUNK)
    # Pass 1: each chunk's ids, first positions and counts, merged over the (few) distinct ids.
    part_ids, part_first, part_counts = [], [], []
    for start in chunks:
        ids_c, first_c, counts_c = np.unique(
            inst[start : start + _POINT_CHUNK], return_index=True, return_counts=True
        )
        part_ids.append(ids_c)
        part_first.append(first_c.astype(np.int64) + start)
        part_counts.append(counts_c.astype(np.int64))
    if part_ids:
        ids, which = np.unique(np.concatenate(part_ids), return_inverse=True)
        counts = np.zeros(ids.size, dtype=np.int64)
        np.add.at(counts, which, np.concatenate(part_counts))
        first = np.full(ids.size, n, dtype=np.int64)
        np.minimum.at(first, which, np.concatenate(part_first))
    else:
        ids, counts, first = inst[:0], np.zeros(0, np.int64), np.zeros(0, np.int64)
    del part_ids, part_first, part_counts

    cls = seg[first].astype(np.int64)
    keep = (ids.astype(np.int64) != instance_ignore_index) & ~np.isin(cls, ignore)
    bad = cls[keep]
    bad = bad[(bad < 0) | (bad >= n_classes)]
    if bad.size:
        raise ValueError(
            f"segment holds {int(bad[0])} on a GT's first point, outside the {n_classes} class_names"
        )
    n_gt = int(keep.sum())
    dtype = code_dtype(2 * (n_gt + 1))
    twice_slot = np.full(ids.size, 2 * n_gt, dtype=dtype)  # 2 * slot of each distinct id
    twice_slot[keep] = 2 * np.arange(n_gt, dtype=dtype)

    # Pass 2: codes, written chunk by chunk into their one O(N) array.
    code = np.empty(n, dtype=dtype)
    for start in chunks:
        out = code[start : start + _POINT_CHUNK]
        np.take(twice_slot, np.searchsorted(ids, inst[start : start + _POINT_CHUNK]), out=out)
        out += np.isin(seg[start : start + _POINT_CHUNK], ignore)
    return (
        ids[keep].astype(np.int64),
        cls[keep],
        counts[keep],
        code,
    )


def _count_sparse(masks: SparseMasks, rows: IntArray, table: ColumnCodes, repeats: RepeatCheck) -> IntArray:
    hist = np.empty((rows.size, table.n_bins), dtype=np.int64)
    for i, row in enumerate(rows):
        hist[i] = table.histogram(unique_columns(masks.row(int(row)), repeats))
    return hist


def _count_dense(masks: npt.NDArray[Any], bits: int, rows: IntArray, table: ColumnCodes) -> IntArray:
    if DENSE_BACKEND != "numpy":
        try:
            from podmortem_runtime.insseg import _numba
        except ImportError:
            if DENSE_BACKEND == "numba":
                raise
        else:
            return _numba.count_rows(masks, rows, table, table.n_bins, bits=bits, threads=DENSE_THREADS)
    hist = np.empty((rows.size, table.n_bins), dtype=np.int64)
    for i, row in enumerate(rows):
        values = masks[int(row)]
        members = np.flatnonzero(values & bits) if bits else np.flatnonzero(values)
        hist[i] = table.histogram(members)
    return hist


def _cat(parts: list[IntArray]) -> IntArray:
    return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, dtype=np.int64)
