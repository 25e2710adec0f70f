from .builder import HOOKS
from .default import HookBase
from .evaluator import InsSegEvaluator

__all__ = ["HOOKS", "HookBase", "InsSegEvaluator"]
