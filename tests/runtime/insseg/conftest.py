"""Fixtures for the evaluator tests: the Pointcept stand-in, on sys.path for one test at a time."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FAKE_POINTCEPT = Path(__file__).parent / "fake_pointcept"
_PURGED = ("pointcept", "pointops", "podmortem_runtime.pointcept")


def _purge() -> None:
    for name in list(sys.modules):
        if any(name == p or name.startswith(p + ".") for p in _PURGED):
            del sys.modules[name]


@pytest.fixture
def fake_pointcept(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Make the stand-in ``pointcept`` and ``pointops`` importable; forget them (and our hook) afterwards."""
    _purge()
    monkeypatch.syspath_prepend(str(FAKE_POINTCEPT))
    try:
        yield FAKE_POINTCEPT
    finally:
        _purge()
