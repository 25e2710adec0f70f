"""`podmortem sidecar` stays a small process: it registers only itself, and imports no pydantic.

The sidecar runs in every training pod, with a 32 MiB goal (bench/sidecar.py measures it); the other
subcommands' imports cost it several MiB, pydantic and the models it builds about 18 MiB (the sidecar
writes its evidence with `podmortem.reports.sidecar_document`). Checked in a fresh
interpreter, the way the console script starts.
"""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from podmortem.cli import main
parser = main.build_parser("sidecar")
import podmortem.sidecar.main
loaded = sorted(m for m in sys.modules if m.startswith(("podmortem", "pydantic")))
print("\\n".join(loaded))
"""


def test_the_sidecar_loads_no_other_command_and_no_pydantic() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    loaded = set(out.split())
    assert "podmortem.sidecar.main" in loaded
    others = {f"podmortem.cli.{name}" for name in ("diagnose", "report", "logs", "operator", "agent")}
    assert not loaded & others, loaded & others
    assert not {"podmortem.reports.failure", "podmortem.reports.oom_record"} & loaded
    assert not {m for m in loaded if m.startswith("pydantic")}, "pydantic in the sidecar"
    assert not {"podmortem.reports.memory", "podmortem.reports.sidecar_evidence"} & loaded
    assert not any(m.startswith(("podmortem.operator", "podmortem.agent", "podmortem.logs")) for m in loaded)


def test_the_whole_cli_still_lists_every_command() -> None:
    cli = [sys.executable, "-m", "podmortem.cli.main"]
    out = subprocess.run([*cli, "--help"], capture_output=True, text=True, check=True).stdout
    for name in ("diagnose", "report", "logs", "operator", "agent", "sidecar", "demo"):
        assert name in out, name
    side = subprocess.run([*cli, "sidecar", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--termination-log" in side


LOGS_PROBE = """
import sys
from podmortem.cli import main
sys.argv = ["podmortem", "logs", "--help"]
try:
    main.main()
except SystemExit:
    pass
loaded = sorted(m for m in sys.modules if m.startswith("podmortem") or m == "importlib.metadata")
print("\\n".join(loaded), file=sys.stderr)
"""


def test_podmortem_logs_starts_without_the_other_commands_or_an_entry_point_scan() -> None:
    """`podmortem logs` starts once per look at a log: its start-up is part of every run's time."""
    done = subprocess.run([sys.executable, "-c", LOGS_PROBE], capture_output=True, text=True, check=True)
    loaded = set(done.stderr.split())
    assert "podmortem.cli.logs" in loaded
    assert "--follow" in done.stdout
    others = {f"podmortem.cli.{name}" for name in ("diagnose", "report", "operator", "agent", "sidecar")}
    assert not loaded & others, loaded & others
    assert "importlib.metadata" not in loaded
