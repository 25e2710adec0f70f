"""``podmortem diagnose``: exit codes, the --json contract, and odd input that must not crash it."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from podmortem.cli import main as cli_main

RECORDS = Path(__file__).parent.parent / "fixtures" / "oom-records"
REAL = RECORDS / "20-podmortem-v1-kmsg-fork-cow-6.18.log"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main.main(["diagnose", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(REAL))
    assert code == 0
    assert "python3 (pid 6054)" in out and "[CONSTRAINT_MEMCG]" in out
    assert "anon dominates" in out
    assert "shared (fork)" in out
    for code_ in ("memcg-limit", "anon-dominant", "fork-copies", "shared-pages-double-counted"):
        assert code_ in out
    assert "what to do:" in out


def test_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(REAL), "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data) == ["reports", "input"] and len(data["reports"]) == 1
    assert data["input"] == {"kinds": ["kernel"], "files": [{"file": str(REAL), "kinds": ["kernel"]}]}
    report = data["reports"][0]
    kill = report["kill"]
    assert kill["pid"] == 6054 and kill["comm"] == "python3"
    assert kill["constraint"] == kill["constraint_effective"] == "CONSTRAINT_MEMCG"
    assert (kill["anon_rss_kb"], kill["file_rss_kb"], kill["shmem_rss_kb"]) == (88820, 6616, 0)
    assert kill["oom_memcg"] == kill["task_memcg"] == "/podmortem-capture-44e03907e165"
    assert kill["pod_uid"] is None and kill["container_id"] is None and kill["killed_pids"] == [6054]
    cgroup = report["cgroup"]
    assert cgroup["version"] == 1 and cgroup["limit_bytes"] == cgroup["usage_bytes"] == 128 * 1024 * 1024
    assert cgroup["stat"]["total_rss"] == 133636096
    assert [(t["pid"], t["name"], t["rss_pages"], t["rss_anon_pages"]) for t in report["tasks"]] == [
        (6054, "python3", 23859, 22205),
        (6055, "python3", 22957, 22217),
    ]
    assert {f["code"] for f in report["findings"]} == {
        "memcg-limit",
        "anon-dominant",
        "fork-copies",
        "shared-pages-double-counted",
    }
    assert all({"code", "severity", "message", "evidence"} <= set(f) for f in report["findings"])
    assert report["partial"] is False


def test_json_kubernetes_identity_and_partial(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(RECORDS / "08-kind-v2-dmesgT-uwsgi-partial.log"), "--json")
    assert code == 0
    [report] = json.loads(out)["reports"]
    assert report["partial"] is True and "kill" in report["missing"]
    assert report["kill"]["pod_uid"] == "1788d98a-0700-426a-8701-2312e4cc2163"
    assert report["kill"]["container_id"].startswith("a07d3c19")
    assert report["cgroup"]["version"] == 2 and report["cgroup"]["stat"]["anon"] == 314535936


def test_every_bundled_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--list-examples")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert "k3s-stress" in names and "fork-cow" in names
    for name in names:
        code, out, err = _run(capsys, "--example", name)
        assert code == 0, (name, err)
        assert out.startswith("OOM kill 1 of 1")


def test_unknown_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--example", "nope")
    assert code == 2 and "k3s-stress" in err


def test_missing_file_exit_2_with_its_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "no-such.log"
    code, out, err = _run(capsys, str(missing))
    assert code == 2 and str(missing) in err and "Traceback" not in err and out == ""


def test_directory_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _run(capsys, str(tmp_path))
    assert code == 2 and "directory" in err


def test_no_record_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "boot.log"
    log.write_text("[    0.000000] Linux version 6.1.0\n[    1.0] usb 1-1: new device\n")
    code, out, err = _run(capsys, str(log))
    assert code == 3 and "no kernel OOM-kill record found" in err and out == ""
    code, out, err = _run(capsys, str(log), "--json")
    assert code == 3 and json.loads(out) == {
        "reports": [], "input": {"kinds": ["kernel"], "files": [{"file": str(log), "kinds": ["kernel"]}]}
    }


def test_binary_input_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blob = tmp_path / "core"
    blob.write_bytes(bytes(range(256)) * 64 + os.urandom(4096))
    code, _, err = _run(capsys, str(blob))
    assert code == 3 and "binary" in err and "Traceback" not in err


def test_empty_input(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _stdin(monkeypatch, b"")
    code, _, err = _run(capsys, "-")
    assert code == 3 and "standard input" in err


def test_stdin_with_garbage_around_a_truncated_record(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = REAL.read_bytes()
    cut = text[: text.index(b"oom-kill:")]
    _stdin(monkeypatch, b"\x00\xff garbage \xfe\n" + cut + b"\xc3\x28 more garbage")
    code, out, err = _run(capsys, "--json")
    assert code == 0, err
    [report] = json.loads(out)["reports"]
    assert report["partial"] is True and "kill" in report["missing"]
    assert report["kill"]["pid"] is None or isinstance(report["kill"]["pid"], int)


def test_gzip_rotated_log(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    packed = tmp_path / "messages.1.gz"
    packed.write_bytes(gzip.compress((RECORDS / "02-k8s-v1-syslog-kmem-runc-el7.log").read_bytes()))
    code, out, _ = _run(capsys, str(packed))
    assert code == 0 and "kernel-dominant" in out


def test_broken_gzip_is_a_plain_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    code, _, err = _run(capsys, str(bad))
    assert code == 2 and "cannot read" in err and "Traceback" not in err


def test_console_script_help_lists_exit_codes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "podmortem.cli.main", "diagnose", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "exit codes" in done.stdout and "--json" in done.stdout
