"""Stand-in for pointcept.engines.hooks.evaluator.InsSegEvaluator: its constructor, attributes,
before_train and after_epoch as in the real class. Its mask-holding methods are deliberately
absent here, so a test fails if the lean hook ever falls back to them."""

import numpy as np

from .builder import HOOKS
from .default import HookBase


@HOOKS.register_module()
class InsSegEvaluator(HookBase):
    def __init__(self, segment_ignore_index=(-1,), instance_ignore_index=-1):
        self.segment_ignore_index = segment_ignore_index
        self.instance_ignore_index = instance_ignore_index
        self.valid_class_names = None
        self.overlaps = np.append(np.arange(0.5, 0.95, 0.05), 0.25)
        self.min_region_sizes = 100
        self.distance_threshes = float("inf")
        self.distance_confs = -float("inf")

    def before_train(self):
        self.valid_class_names = [
            self.trainer.cfg.data.names[i]
            for i in range(self.trainer.cfg.data.num_classes)
            if i not in self.segment_ignore_index
        ]

    def after_epoch(self):
        if self.trainer.cfg.evaluate:
            self.eval()

    def associate_instances(self, pred, segment, instance):
        raise AssertionError("stand-in: the lean hook must not call associate_instances")

    def evaluate_matches(self, scenes):
        raise AssertionError("stand-in: the lean hook must not call evaluate_matches")
