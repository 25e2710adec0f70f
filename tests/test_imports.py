"""Every module imports on its own: no import cycle hides behind import order.

A cycle (a imports b, b imports a at module level) works or fails depending on
which module a process imports first; importing each module first, alone,
finds it. Like aiohttp's own test, each module gets a fresh process; to keep
that cheap, one interpreter loads the third-party libraries once and forks a
child per module, so each child starts with none of our modules loaded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Modules that need a framework the test environment does not have, and say so when imported.
NEEDS_FRAMEWORK = {"podmortem_runtime.pointcept": "Pointcept"}

SCRIPT = r'''
import os, sys, traceback
roots = {"podmortem": "operator", "podmortem_demo": "operator", "podmortem_runtime": "runtime_patch"}
skip = set(sys.argv[1:])
# Third-party libraries, loaded once before forking (ours are not).
import aiohttp, kopf, kubernetes_asyncio.client, kmock, numpy, prometheus_client, pydantic, yaml  # noqa
names = []  # from the files (pkgutil.walk_packages would import the packages to walk them)
for package, root in roots.items():
    for dirpath, dirnames, files in os.walk(os.path.join(root, package)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        rel = os.path.relpath(dirpath, root).replace(os.sep, ".")
        for f in files:
            if f.endswith(".py"):
                names.append(rel if f == "__init__.py" else f"{rel}.{f[:-3]}")
assert not [m for m in sys.modules if m.split(".")[0] in roots], "our modules were loaded before forking"
failed = 0
for name in sorted(names):
    if any(name == s or name.startswith(s + ".") for s in skip):
        continue
    pid = os.fork()
    if pid == 0:
        try:
            __import__(name)
            os._exit(0)
        except BaseException:
            sys.stderr.write(f"--- {name}\n{traceback.format_exc()}\n")
            sys.stderr.flush()
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    failed += status != 0
print(f"{len(names)} modules, {failed} failed")
sys.exit(1 if failed else 0)
'''


def test_each_module_imports_alone() -> None:
    run = subprocess.run([sys.executable, "-c", SCRIPT, *NEEDS_FRAMEWORK], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr[-8000:]}"
    count = int(run.stdout.split()[0])
    assert count > 100, run.stdout  # the walk found the packages


def test_a_cycle_would_be_found(tmp_path: Path) -> None:
    """The check itself: a package whose two modules import each other's names fails it."""
    package = tmp_path / "operator" / "podmortem_demo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from podmortem_demo.b import B\nA = 1\n")
    (package / "b.py").write_text("from podmortem_demo.a import A\nB = 2\n")
    for root in ("runtime_patch/podmortem_runtime", "operator/podmortem"):
        (tmp_path / root).mkdir(parents=True)
        (tmp_path / root / "__init__.py").write_text("")
    env = {"PYTHONPATH": f"{tmp_path / 'operator'}:{tmp_path / 'runtime_patch'}", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env=env)
    assert run.returncode == 1, run
    assert "--- podmortem_demo.a" in run.stderr and "ImportError" in run.stderr


def test_every_package_folder_is_a_package() -> None:
    """A folder of modules without ``__init__.py`` is a namespace package, which import-linter does not
    see: its layer and independence contracts would then pass without checking anything."""
    missing = []
    for package, root in {"podmortem": "operator", "podmortem_demo": "operator",
                          "podmortem_runtime": "runtime_patch"}.items():
        for folder in (ROOT / root / package).rglob("*"):
            is_package_folder = folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py"))
            if is_package_folder and not (folder / "__init__.py").exists():
                missing.append(str(folder.relative_to(ROOT)))
    assert not missing, f"folders of modules without __init__.py: {missing}"
