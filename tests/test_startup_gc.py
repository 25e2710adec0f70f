"""`startup_gc.freeze` moves what exists into the permanent generation, where full passes skip it."""

from __future__ import annotations

import gc

from podmortem import startup_gc


def test_freeze_takes_the_imported_objects_out_of_collection() -> None:
    try:
        frozen = startup_gc.freeze()
        assert frozen == gc.get_freeze_count() > 10_000  # pytest, hypothesis, podmortem: far more
        young = [object() for _ in range(10)]  # made after: collected as ever, not frozen
        assert gc.get_freeze_count() == frozen and young
    finally:
        gc.unfreeze()  # the test process goes on collecting everything
    assert gc.get_freeze_count() == 0
