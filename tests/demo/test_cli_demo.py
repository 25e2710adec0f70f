"""`podmortem demo`'s command line: where the summary goes, what -q and --json leave, bad options.

The runs themselves are stood in for here (tests/demo/test_demo_e2e.py and
test_demo_story.py run the real thing); this is about the streams and the checks
made before anything starts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, TextIO

import pytest

from podmortem.cli.main import main
from podmortem_demo import kernel, runner, summary
from podmortem_demo.runner import DemoSettings, LogCheck, RunResult

MIB = 2**20


def results() -> list[RunResult]:
    log = LogCheck(10, 10, 0, 0, 1, True)
    tj = {"apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob"}
    report = {"verdict": "memcg-limit", "findings": []}
    failed = {**tj, "status": {"phase": "Failed", "failureReport": report}}
    return [
        RunResult("fresh-fork", failed, log, "real", 137, "OOMKilled", 256 * MIB, 256 * MIB),
        RunResult(
            "auto", {**tj, "status": {"phase": "Succeeded"}}, log, "real", 0, "Completed",
            195 * MIB, 256 * MIB,
        ),
    ]


class FakeDemo:
    """Stands in for `runner.Demo`: says one progress line, returns the runs it was given."""

    started: ClassVar[list[DemoSettings]] = []
    runs: ClassVar[list[RunResult]] = []

    def __init__(self, settings: DemoSettings, *, progress: TextIO | None = None) -> None:
        FakeDemo.started.append(settings)
        self.progress = progress

    def run(self) -> tuple[kernel.KernelChoice, list[RunResult]]:
        if self.progress is not None:
            self.progress.write("== run 1/2: validation loader policy fresh-fork\n")
        return kernel.KernelChoice("real", None), FakeDemo.runs


@pytest.fixture(autouse=True)
def fake_demo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(runner, "Demo", FakeDemo)
    FakeDemo.started = []
    FakeDemo.runs = results()
    kopf = logging.getLogger("kopf")
    level = kopf.level
    yield
    kopf.setLevel(level)


def demo(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["demo", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def table() -> str:
    return summary.table(results(), limit_bytes=256 * MIB) + "\n"


def test_the_summary_goes_to_stdout_and_progress_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = demo(capsys)
    assert rc == 0
    assert out == table()
    assert out.startswith("summary:\n  fresh-fork  Failed ")
    assert "== run 1/2" in err and "summary:" not in err


def test_quiet_prints_the_summary_and_nothing_else(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = demo(capsys, "-q")
    assert (rc, out, err) == (0, table(), "")


def test_json_keeps_stdout_for_the_json_and_the_summary_moves_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, out, err = demo(capsys, "--json")
    assert rc == 0
    data: dict[str, Any] = json.loads(out)
    assert [r["policy"] for r in data["runs"]] == ["fresh-fork", "auto"]
    assert "== run 1/2" in err and "summary:" in err
    rc, out, err = demo(capsys, "--json", "-q")
    assert rc == 0 and json.loads(out) == data and err == ""


def test_what_went_wrong_is_said_on_stderr_even_when_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    FakeDemo.runs[1].training_job["status"]["phase"] = "Failed"
    rc, out, err = demo(capsys, "-q")
    assert rc == 1 and out.startswith("summary:")
    assert err.startswith("unexpected: auto: expected the job to succeed")
    rc, out, err = demo(capsys, "-q", "--json")
    assert rc == 1 and json.loads(out)["runs"] and "summary:" in err and "unexpected: auto" in err


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--timeout", "0"], "--timeout"),
        (["--timeout", "-5"], "--timeout"),
        (["--timeout", "nan"], "--timeout"),
        (["--timeout", "inf"], "--timeout"),
        (["--limit", "0"], "--limit"),
        (["--limit", "lots"], "--limit"),
        (["--epochs", "0"], "--epochs"),
    ],
)
def test_bad_options_are_one_line_naming_the_flag_and_exit_2_before_anything_starts(
    capsys: pytest.CaptureFixture[str], args: list[str], flag: str
) -> None:
    rc, out, err = demo(capsys, *args)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"podmortem demo: {flag}")
    assert FakeDemo.started == []


def test_a_keep_dir_that_cannot_be_written_is_a_bad_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for keep in (a_file, a_file / "under"):
        rc, out, err = demo(capsys, "--keep-dir", str(keep))
        assert rc == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith(f"podmortem demo: --keep-dir {keep}: "), err
    assert "not a directory" in demo(capsys, "--keep-dir", str(a_file))[2]
    assert FakeDemo.started == []


def test_a_keep_dir_is_created_and_used(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    keep = tmp_path / "a" / "b"
    rc, _, _ = demo(capsys, "-q", "--keep-dir", str(keep), "--timeout", "5")
    assert rc == 0 and keep.is_dir() and list(keep.iterdir()) == []
    assert FakeDemo.started[0].keep_dir == keep and FakeDemo.started[0].run_timeout_s == 5.0


def test_help_says_where_the_output_goes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "stdout: the summary, one line per run (with -q, that is all that is printed)" in text
    assert "only the summary on stdout (with --json, only the JSON)" in text
