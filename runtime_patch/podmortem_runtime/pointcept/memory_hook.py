"""A Pointcept hook that logs the memory line after every epoch.

List it after the evaluator hook, so the line is written after the evaluation
it describes::

    hooks = [..., dict(type="InsSegEvaluator"), dict(type="PodmortemMemoryHook"), ...]

With ``sampler=True`` (the default) a thread samples the pod cgroup's usage
every ``interval_s`` seconds, and the line's ``epoch peak`` is the highest
usage seen during that epoch, its evaluation included.
"""

from __future__ import annotations

from pointcept.engines.hooks.builder import HOOKS
from pointcept.engines.hooks.default import HookBase

from podmortem_runtime import memory


class PodmortemMemoryHook(HookBase):  # type: ignore[misc]
    def __init__(self, sampler: bool = True, interval_s: float = 0.2) -> None:
        """``interval_s``: seconds between cgroup samples; 0.2 s costs nothing measurable."""
        self.sampler = sampler
        self.interval_s = interval_s
        self._sampler: memory.PeakSampler | None = None

    def before_train(self) -> None:
        if self.sampler:
            self._sampler = memory.start_sampler(interval_s=self.interval_s)

    def after_epoch(self) -> None:
        # Pointcept logs epochs from 1 (its evaluator writes ``epoch + 1``).
        self.trainer.logger.info(memory.memory_line(self.trainer.epoch + 1, sampler=self._sampler))

    def after_train(self) -> None:
        if self._sampler is not None:
            memory.stop_sampler()
            self._sampler = None


if HOOKS.get("PodmortemMemoryHook") is None:
    HOOKS.register_module(name="PodmortemMemoryHook", module=PodmortemMemoryHook)
