"""`startup_gc.freeze` moves what exists into the permanent generation, where full passes skip it;
`set_thresholds` makes full passes rarer and still collects cyclic garbage by itself."""

from __future__ import annotations

import gc
import weakref

from podmortem import startup_gc


def _collectable_ids() -> set[int]:
    """What any generation's pass would walk (the permanent one is in none of them)."""
    return {id(o) for generation in (0, 1, 2) for o in gc.get_objects(generation=generation)}


def test_freeze_takes_the_imported_objects_out_of_collection() -> None:
    made_before = [startup_gc]  # a tracked object of this process before the freeze
    try:
        frozen = startup_gc.freeze()
        assert frozen > 10_000  # pytest, hypothesis and podmortem's modules: far more
        made_after = [frozen]
        collectable = _collectable_ids()
        assert id(made_before) not in collectable  # skipped by every pass from now on
        assert id(made_after) in collectable  # what comes later is collected as ever
    finally:
        gc.unfreeze()  # the test process goes on collecting everything
    assert gc.get_freeze_count() == 0 and id(made_before) in _collectable_ids()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_cycles_are_still_collected_without_asking_under_the_thresholds() -> None:
    before = startup_gc.set_thresholds()
    freed = 0

    def one_freed() -> None:
        nonlocal freed
        freed += 1

    try:
        assert gc.get_threshold() == startup_gc.THRESHOLDS
        for _ in range(50_000):
            weakref.finalize(_Node(), one_freed)  # dropped at once: garbage the moment it is made
        assert freed > 45_000  # the young generations' passes freed them, with no gc.collect()
    finally:
        gc.set_threshold(*before)
