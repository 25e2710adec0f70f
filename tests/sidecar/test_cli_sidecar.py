"""``podmortem sidecar`` started as a pod spec starts it: the console script, options, signals, exit codes.

The pod here is a recorded one (tests/sidecar/trees.py) given with ``--proc-root``; the real
kernel's is in test_sidecar_kernel.py. Nothing is timed: each wait polls with a deadline.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.cli.entrypoints import PODMORTEM, clean_env
from tests.sidecar import trees

from podmortem.reports import sidecar_evidence as ev

DEADLINE_S = 30.0


def _wait_for(check: Callable[[], bool], what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if proc.poll() is not None and not check():
            pytest.fail(f"sidecar exited {proc.returncode} waiting for {what}:\n{log.read_text()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}:\n{log.read_text()}")
        time.sleep(0.05)


@pytest.fixture
def pod(tmp_path: Path) -> trees.FakePod:
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    pod.trainer(pss_kb=3_000_000)
    pod.worker(40, pss_kb=200_000)
    return pod


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    started: list[subprocess.Popen[bytes]] = []

    def run(*args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"sidecar-{len(started)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [PODMORTEM, "sidecar", *args], stdout=out, stderr=subprocess.STDOUT, env=clean_env(tmp_path)
            )
        started.append(proc)
        return proc, log

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_help_says_how_it_runs_and_exits() -> None:
    done = subprocess.run([PODMORTEM, "sidecar", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for words in (
        "shareProcessNamespace",
        "--termination-log",
        "/dev/termination-log",
        "--interval",
        "(default: 2)",
        "PODMORTEM_SIDECAR_COMM",
        "exit codes",
    ):
        assert words in done.stdout


def test_a_bad_value_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [PODMORTEM, "sidecar", "--interval", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(tmp_path, PODMORTEM_SIDECAR_COMM="("),
    )
    assert done.returncode == 2
    assert (
        done.stderr.count("\n") == 1 and "--interval='0' / PODMORTEM_SIDECAR_INTERVAL_SECONDS" in done.stderr
    )
    done = subprocess.run(
        [PODMORTEM, "sidecar"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(tmp_path, PODMORTEM_SIDECAR_COMM="("),
    )
    assert done.returncode == 2 and "PODMORTEM_SIDECAR_COMM='('" in done.stderr


def test_sigterm_writes_the_evidence_and_exits_0(
    pod: trees.FakePod, tmp_path: Path, start: Callable[..., tuple[subprocess.Popen[bytes], Path]]
) -> None:
    message = tmp_path / "termination-log"
    proc, log = start(
        "--proc-root",
        str(pod.proc),
        "--termination-log",
        str(message),
        "--comm",
        "python",
        "--interval",
        "0.2",
    )
    _wait_for(lambda: "trainer container found" in log.read_text(), "the trainer to be found", proc, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE_S) == 0, log.read_text()
    text = message.read_text()
    assert len(text.encode()) <= ev.MAX_MESSAGE_BYTES
    doc = ev.parse(text)
    assert doc.reason == "sigterm" and doc.kill is None and doc.samples >= 1
    assert [(p.pid, p.role) for p in doc.top] == [(12, "trainer"), (40, "worker")]
    assert "got SIGTERM" in log.read_text()


def test_sigterm_before_any_trainer_still_leaves_a_document(
    tmp_path: Path, start: Callable[..., tuple[subprocess.Popen[bytes], Path]]
) -> None:
    message = tmp_path / "termination-log"
    pod = trees.FakePod(tmp_path, trees.LAYOUTS[0])
    proc, log = start("--proc-root", str(pod.proc), "--termination-log", str(message), "--comm", "python")
    _wait_for(lambda: "sidecar watching" in log.read_text(), "the sidecar to start", proc, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE_S) == 0, log.read_text()
    assert json.loads(message.read_text())["notes"] == ["no process of the trainer container seen"]


def test_the_trainer_gone_after_a_kill_ends_it_by_itself(
    pod: trees.FakePod, tmp_path: Path, start: Callable[..., tuple[subprocess.Popen[bytes], Path]]
) -> None:
    message = tmp_path / "termination-log"
    proc, log = start("--proc-root", str(pod.proc), "--termination-log", str(message), "--comm", "python")
    _wait_for(lambda: "trainer container found" in log.read_text(), "the trainer to be found", proc, log)
    pod.oom_kill(1)
    pod.exit(12)
    pod.exit(40)
    assert proc.wait(timeout=DEADLINE_S) == 0, log.read_text()
    doc = ev.parse(message.read_text())
    assert doc.reason == "trainer-gone"
    assert doc.kill is not None and doc.kill.victim.pid == 12 and doc.kill.gone == [12, 40]
    assert doc.oom == ev.OomCounter(before=0, after=1)


def test_a_termination_log_that_cannot_be_written_is_exit_1(
    pod: trees.FakePod, tmp_path: Path, start: Callable[..., tuple[subprocess.Popen[bytes], Path]]
) -> None:
    proc, log = start("--proc-root", str(pod.proc), "--termination-log", str(tmp_path / "missing" / "log"))
    _wait_for(lambda: "sidecar watching" in log.read_text(), "the sidecar to start", proc, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE_S) == 1
    assert "cannot write the evidence" in log.read_text()
