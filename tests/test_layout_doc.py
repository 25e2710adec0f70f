"""docs/layout.md names every module of podmortem, podmortem_demo and podmortem_runtime.

Every ``*.py`` file under ``operator/`` and ``runtime_patch/`` is a module: ``x/y.py`` is ``x.y``,
and a package's ``__init__.py`` stands for the package itself (``x/__init__.py`` is ``x``). A
module counts as named when the page has its dotted name (``podmortem.logs.storage.store``) or its path
from the repository root (``operator/podmortem/logs/storage/store.py``) as a whole word: a longer name it
begins (``podmortem.logs`` inside ``podmortem.logs.storage.store``) does not count.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "docs" / "layout.md"
SOURCE_ROOTS = ("operator", "runtime_patch")


def modules() -> dict[str, str]:
    """Dotted name -> path from the repository root, for every module under the source roots."""
    found = {}
    for source_root in SOURCE_ROOTS:
        base = ROOT / source_root
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if not parts:
                continue
            found[".".join(parts)] = path.relative_to(ROOT).as_posix()
    return found


def named(text: str, name: str) -> bool:
    """``name`` as a whole dotted word: not part of a longer identifier or dotted name."""
    return re.search(rf"(?<![\w./]){re.escape(name)}(?!\w|\.\w|/\w)", text) is not None


def test_named_matches_whole_dotted_names_only() -> None:
    text = "`podmortem.logs.storage.store` and operator/podmortem/cli/main.py, then podmortem.kube."
    assert named(text, "podmortem.logs.storage.store")
    assert not named(text, "podmortem.logs")
    assert not named(text, "podmortem.logs.st")
    assert named(text, "operator/podmortem/cli/main.py")
    assert named(text, "podmortem.kube")
    assert not named(text, "kube")


def test_modules_are_found() -> None:
    found = modules()
    assert found["podmortem"] == "operator/podmortem/__init__.py"
    assert found["podmortem.logs.storage.store"] == "operator/podmortem/logs/storage/store.py"
    assert found["podmortem_demo.emulated"] == "operator/podmortem_demo/emulated/__init__.py"
    assert found["podmortem_runtime.val_loader"] == "runtime_patch/podmortem_runtime/val_loader.py"


def test_layout_doc_names_every_module() -> None:
    text = LAYOUT.read_text()
    missing = [
        f"{name} ({path})" for name, path in modules().items() if not (named(text, name) or named(text, path))
    ]
    assert not missing, (
        f"docs/layout.md does not name {len(missing)} module(s); add a line for each "
        f"(its dotted name and what it does): " + ", ".join(missing)
    )
