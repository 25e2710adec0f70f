"""Every input the fuzzers found (and their seeds) replayed through the fuzz target's own check.

``bench/fuzz.py`` runs one atheris target per parser of outside input (``bench/fuzz/<target>.py``);
an exception the parser does not document, or an input that took too long, is kept in
``tests/fixtures/fuzz/<target>/`` and replayed here through the same ``check`` the fuzzer ran, so a
fixed finding stays fixed. The check raises on a finding; atheris is not needed to replay.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ROOT / "bench" / "fuzz"
FIXTURES = ROOT / "tests" / "fixtures" / "fuzz"


def _target(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"fuzz_target_{name}", TARGETS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases() -> list[tuple[str, Path]]:
    return [(d.name, f) for d in sorted(FIXTURES.iterdir()) for f in sorted(d.iterdir()) if f.is_file()]


def test_every_fixture_folder_has_its_target() -> None:
    targets = {p.stem for p in TARGETS.glob("*.py") if not p.stem.startswith("_")}
    folders = {d.name for d in FIXTURES.iterdir() if d.is_dir()}
    assert folders <= targets, f"fixtures without a target: {sorted(folders - targets)}"
    assert folders == targets, f"targets without a fixture (seed) folder: {sorted(targets - folders)}"


@pytest.mark.parametrize(("target", "path"), _cases(), ids=[f"{t}/{p.name}" for t, p in _cases()])
def test_a_kept_input_gives_no_finding(target: str, path: Path) -> None:
    check: Callable[[bytes], None] = _target(target).check
    check(path.read_bytes())
