"""``--help`` of the operator and the agent names every kind they follow when none is configured.

The defaults live in ``podmortem.kube.owners.DEFAULT_FOREIGN_KINDS``; the help text is written by
hand (the agent keeps that module out of its start-up), so this is what keeps the two in step. It
once left JobSets out, and said reports were written on "exit 137, OOMKilled or eviction" only.
"""

from __future__ import annotations

import subprocess

import pytest
from tests.cli.entrypoints import PODMORTEM

from podmortem.kube.owners import DEFAULT_FOREIGN_KINDS


def _help(command: str) -> str:
    done = subprocess.run([PODMORTEM, command, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


@pytest.mark.parametrize("command", ["operator", "agent"])
def test_help_names_every_default_foreign_kind(command: str) -> None:
    text = _help(command)
    for kind in DEFAULT_FOREIGN_KINDS:
        assert f"{kind.group}/{kind.version} {kind.resource}" in text, (kind, text)


def test_operator_help_says_every_failed_container_is_reported() -> None:
    text = _help("operator")
    assert "exits non-zero, is OOMKilled or evicted writes a failure report" in text
    assert "on exit 137" not in text
