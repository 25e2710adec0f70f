"""Instance-segmentation AP with exactly Pointcept's numbers and none of its memory.

Pointcept's ``InsSegEvaluator`` keeps a full-size bool mask per proposal of every
validation scene until AP runs; as PointGroup learns to group, P grows each epoch
and so does the evaluator, until the pod is OOM-killed. AP only reads counts:

    scene = insseg.associate(pred_classes, pred_scores, pred_masks, segment, instance,
                             class_names=names, segment_ignore_index=(-1,))
    scores = insseg.average_precision(scenes, class_names=names, segment_ignore_index=(-1,))

A `Scene` holds O(P·k + G) integers. numpy input needs no torch; dense masks are read
in one compiled pass when numba (``podmortem[fast]``) is installed.
"""

from podmortem_runtime.insseg.ap import OVERLAPS, average_precision
from podmortem_runtime.insseg.association import associate
from podmortem_runtime.insseg.masks import SparseMasks
from podmortem_runtime.insseg.scene import Scene

__all__ = ["OVERLAPS", "Scene", "SparseMasks", "associate", "average_precision"]
