"""The test-only Pointcept stand-in, set up and torn down per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .standin_env import standin_pointcept


@pytest.fixture
def pointcept_standin() -> Iterator[Path]:
    with standin_pointcept() as path:
        yield path
