"""What one validation scene leaves behind for AP: counts, never masks.

Pointcept keeps a point-cloud-sized bool mask per proposal of every scene until AP
runs, and pickles them all for ``comm.gather``. AP only ever reads counts, so a
`Scene` holds exactly those: O(P·k + G) integers, small enough to gather.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class Scene:
    """The count tables of one scene. Arrays are read-only by convention; pickles small.

    GT rows are in ascending instance id (the order Pointcept's greedy matching uses);
    proposal rows are the kept proposals in their original order.
    """

    #: Instance id of each GT (ascending). GTs whose first point has an ignored segment are not here.
    gt_ids: IntArray
    #: Class index of each GT: the segment of its first (lowest-index) point.
    gt_class: IntArray
    #: Points carrying the GT's id, whatever their segment. Small GTs stay: AP filters them itself.
    gt_count: IntArray
    #: Class index of each kept proposal (never an ignored class).
    pred_class: IntArray
    #: Confidence of each kept proposal, as float64 (Pointcept appends scores to float64 arrays).
    pred_score: FloatArray
    #: Member points of each kept proposal (at least ``min_region_size``).
    pred_count: IntArray
    #: Member points whose segment is ignored.
    pred_void: IntArray
    #: Index of each kept proposal in the model's output, for tracing a number back to a proposal.
    pred_index: IntArray
    #: CSR over kept proposals: pairs ``pair_offsets[i]:pair_offsets[i+1]`` belong to proposal i.
    pair_offsets: IntArray
    #: GT row (into the ``gt_*`` arrays) of each pair: a GT of the proposal's class it intersects.
    pair_gt: IntArray
    #: Points shared by the pair's proposal and GT (> 0).
    pair_inter: IntArray

    @property
    def n_gt(self) -> int:
        return int(self.gt_ids.size)

    @property
    def n_pred(self) -> int:
        return int(self.pred_class.size)

    @property
    def nbytes(self) -> int:
        """Bytes held by the count tables (what ``comm.gather`` pickles, give or take a header)."""
        return sum(int(getattr(self, name).nbytes) for name in self.__dataclass_fields__)

    def pair_pred(self) -> IntArray:
        """Proposal row of each pair (the CSR expanded)."""
        return np.repeat(np.arange(self.n_pred, dtype=np.int64), np.diff(self.pair_offsets))
