"""Every import-linter contract in .importlinter is kept, and fails on the import it forbids.

A contract that cannot fail guards nothing: for each one, a copy of the source gets one import
the contract forbids, and ``lint-imports`` must report that contract broken (and only then).
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".importlinter"
LINT = str(Path(sys.executable).with_name("lint-imports"))
SOURCES = {"podmortem": ROOT / "operator", "podmortem_demo": ROOT / "operator",
           "podmortem_runtime": ROOT / "runtime_patch"}

#: Contract id -> (module file in the copy, the forbidden import added to it).
VIOLATIONS: dict[str, tuple[str, str]] = {
    "layers": ("podmortem/reports/units.py", "import podmortem.cli.main"),
    "operator-agent-independent": ("podmortem/agent/node.py", "import podmortem.operator.settings"),
    "pure-core": ("podmortem/kernel/oom_parser.py", "import aiohttp"),
    "sidecar-standalone": ("podmortem/sidecar/sampling.py", "import podmortem.operator.settings"),
    "sidecar-without-pydantic": ("podmortem/sidecar/sampling.py", "import pydantic"),
    "kopf-in-handlers": ("podmortem/operator/watching/service.py", "import kopf"),
    "kubernetes-asyncio-in-kube": ("podmortem/diagnosis/verdicts.py", "import kubernetes_asyncio"),
    "product-without-demo": ("podmortem/cli/diagnose.py", "import podmortem_demo"),
    "runtime-standalone": ("podmortem_runtime/__init__.py", "import aiohttp"),
    "logs-following-apart-from-the-store": (
        "podmortem/logs/following/follower.py", "import podmortem.logs.storage.store"),
    "logs-store-apart-from-following": (
        "podmortem/logs/storage/store.py", "import podmortem.logs.following.follower"),
    "operator-layers": ("podmortem/operator/reporting/__init__.py", "import podmortem.operator.watching"),
    "logs-storage-layers": ("podmortem/logs/storage/segments.py", "import podmortem.logs.storage.store"),
    "diagnosis-layers": ("podmortem/diagnosis/facts.py", "import podmortem.diagnosis.from_record"),
    "diagnosis-rules-independent": ("podmortem/diagnosis/victim.py", "import podmortem.diagnosis.forks"),
    "report-models-without-renderers": ("podmortem/reports/failure.py", "import podmortem.render.page"),
}


def _contracts() -> dict[str, str]:
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    prefix = "importlinter:contract:"
    return {s[len(prefix):]: parser[s]["name"] for s in parser.sections() if s.startswith(prefix)}


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LINT, "--config", str(CONFIG), "--no-cache"], capture_output=True, text=True,
                          cwd=src, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, timeout=120)


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("contracts")
    for package, root in SOURCES.items():
        shutil.copytree(root / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    return src


def test_every_contract_has_a_violation_to_show_it_fails() -> None:
    assert sorted(_contracts()) == sorted(VIOLATIONS)


def test_the_source_keeps_every_contract(source_copy: Path) -> None:
    run = _lint(source_copy)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"Contracts: {len(VIOLATIONS)} kept, 0 broken." in run.stdout


@pytest.mark.parametrize("contract", sorted(VIOLATIONS))
def test_a_forbidden_import_breaks_its_contract(source_copy: Path, contract: str) -> None:
    module, line = VIOLATIONS[contract]
    path = source_copy / module
    original = path.read_text()
    path.write_text(original + f"\n{line}  # added by the test\n")
    try:
        run = _lint(source_copy)
    finally:
        path.write_text(original)
    assert run.returncode != 0, run.stdout
    # lint-imports wraps long names over lines; compare without the breaks
    flat = " ".join(run.stdout.split())
    assert f"{_contracts()[contract]} BROKEN" in flat, flat[-2000:]
