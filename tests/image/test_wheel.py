"""A wheel built from the repository installs into a clean venv, with the extras' promises kept.

This installs from the package index (or pip's cache), so it takes tens of seconds; it is
the only check here of the packaging an image build would do.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=check, timeout=600)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out, ROOT)
    (found,) = out.glob("podmortem-*.whl")
    return found


@pytest.fixture
def clean_venv(tmp_path: Path) -> Iterator[Path]:
    """A fresh venv per test, so one extra's packages can't hide another's promise."""
    path = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(path)
    yield path


def _installed(venv_path: Path) -> set[str]:
    out = _run(venv_path / "bin" / "python", "-m", "pip", "list", "--format=freeze").stdout
    return {line.split("==")[0].lower().replace("_", "-") for line in out.splitlines() if line}


def test_runtime_extra_brings_no_operator_dependencies(wheel: Path, clean_venv: Path) -> None:
    python = clean_venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", f"{wheel}[runtime]")
    installed = _installed(clean_venv)
    assert {"podmortem", "numpy", "pydantic"} <= installed
    assert not installed & {"kopf", "aiohttp", "kubernetes-asyncio", "prometheus-client", "torch"}
    probe = _run(python, "-c", "import podmortem_runtime.insseg, podmortem_runtime.val_loader, "
                 "podmortem_runtime.memory; print(podmortem_runtime.memory.memory_line(0))")
    assert probe.stdout.startswith("-> memory epoch 0: rss ")
    # The base install alone gives a working diagnose.
    diagnosed = _run(clean_venv / "bin" / "podmortem", "diagnose", "--example", "k3s-stress", "--json")
    assert '"memcg-limit"' in diagnosed.stdout


def test_operator_entrypoints_start(wheel: Path, clean_venv: Path) -> None:
    python = clean_venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", f"{wheel}[operator]")
    for command in ("operator", "agent", "logs", "diagnose"):
        result = _run(clean_venv / "bin" / "podmortem", command, "--help", check=False)
        assert result.returncode == 0, (command, result.stderr)
        assert "usage: podmortem " + command in result.stdout
