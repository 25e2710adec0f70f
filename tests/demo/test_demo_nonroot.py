"""`podmortem demo` as a user who is not root: one true story, with the recorded record labelled everywhere.

Without root the demo cannot make memory cgroups or read /dev/kmsg, so it shows a recorded kernel
record. This runs the real CLI as uid/gid 65534 (``setpriv``, or the current user where the suite is
not root) with a HOME and a temp dir of its own, and checks each surface that carries the record: the
TrainingJob's status (the report's ``record_source``, the ``Failed`` condition, ``status.memory``'s
peak), its Events (what ``kubectl describe`` lists), the report page the operator served, the summary,
and ``--json`` itself; and that no surface shows the recorded 128 MiB limit beside the pod's 256Mi.

Where the interpreter lives under a directory only root may enter (``/root/.pyenv``), the dropped user
is given CAP_DAC_READ_SEARCH alone (read and search any file, nothing else: no write, no CAP_SYSLOG),
so that it can start Python; it still cannot create a cgroup or read /dev/kmsg.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podmortem_demo import kernel

MIB = 2**20
LIMIT = 256 * MIB
NOBODY = 65534
#: What a dropped user may get, only where it cannot otherwise reach the interpreter.
READ_ONLY_CAP = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]


def _podmortem() -> str:
    found = Path(sys.executable).parent / "podmortem"
    if not found.exists():  # pragma: no cover - installed with the package
        pytest.skip(f"no podmortem entry point next to {sys.executable}")
    return str(found)


def _as_nobody(env: dict[str, str]) -> list[str]:
    """The command prefix that runs as an unprivileged user; skips with the reason when none works."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root and no setpriv to drop root with")
    base = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    extra = [] if _reachable_by_others(Path(os.path.realpath(sys.executable))) else READ_ONLY_CAP
    probe = [sys.executable, "-c", "import os, podmortem_demo; print(os.geteuid())"]
    done = subprocess.run([*base, *extra, *probe], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0 or done.stdout.strip() != str(NOBODY):
        pytest.skip(f"cannot start Python as uid {NOBODY} here: {done.stderr.strip()[-300:]}")
    return [*base, *extra]


def _reachable_by_others(path: Path) -> bool:
    """Every directory above ``path`` may be searched by any user (o+x)."""
    return all(parent.stat().st_mode & 0o001 for parent in path.parents)


@pytest.fixture(scope="module")
def nonroot_run() -> Iterator[tuple[int, dict[str, Any], str, Path]]:
    # Not under pytest's own temp root: that is private to the user running the suite (0700).
    home = Path(tempfile.mkdtemp(prefix="podmortem-nonroot-"))
    keep = home / "keep"
    home.chmod(0o777)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(home),
        "LANG": "C.UTF-8",
    }
    prefix = _as_nobody(env)
    done = subprocess.run(
        [*prefix, _podmortem(), "demo", "-q", "--json", "--epochs", "4", "--keep-dir", str(keep)],
        capture_output=True, text=True, env=env, timeout=240, check=False,
    )
    data = json.loads(done.stdout) if done.stdout.strip() else {}
    try:
        yield done.returncode, data, done.stderr, keep
    finally:
        shutil.rmtree(home, ignore_errors=True)


Run = tuple[int, dict[str, Any], str, Path]


def test_the_story_holds_and_uses_the_recorded_record(nonroot_run: Run) -> None:
    rc, data, err, _ = nonroot_run
    assert rc == 0, err
    assert [r["kernel"] for r in data["runs"]] == ["recorded", "recorded"]
    baseline, patched = (r["trainingJob"]["status"] for r in data["runs"])
    assert baseline["phase"] == "Failed" and baseline["exitCode"] == 137
    assert patched["phase"] == "Succeeded" and patched["memory"]["podPeakBytes"] < LIMIT


def test_every_surface_of_the_object_is_labelled(nonroot_run: Run) -> None:
    rc, data, err, keep = nonroot_run
    assert rc == 0, err
    source = kernel.record_source(LIMIT)
    assert source.startswith(kernel.RECORDED_LABEL) and "scaled ×2" in source
    run = data["runs"][0]
    tj = run["trainingJob"]
    status = tj["status"]
    report = status["failureReport"]
    # The report in the object (what --json and kubectl get -o yaml show).
    assert report["record_source"] == source
    # The Failed condition (kubectl describe's Conditions) starts with the label.
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["message"].startswith(f"[{source}] The kernel killed python3")
    # The Event that announced the record (kubectl describe's Events).
    attached = [e for e in run["events"] if e["reason"] == "KernelRecordAttached"]
    assert len(attached) == 1 and attached[0]["message"].startswith(f"[{source}] ")
    # The peak (the Peak/Limit column) is the kernel's, and says it is the recorded one.
    assert status["memory"]["peakOfLimit"] == "256Mi/256Mi (100%, recorded kernel)"
    assert source in status["memory"]["peakSource"] and source in report["evidence"]["peak"]["source"]
    # The page the operator served: its headline (the verdict) leads with the label.
    page = (keep / "reports" / "pointgroup-fresh-fork.html").read_text()
    verdict = re.search(r'<p class="verdict" id="verdict">([^<]*)</p>', page)
    assert verdict is not None
    assert verdict.group(1).startswith("[RECORDED, not from this run: fork-cow-6.18.log;")
    assert "scaled ×2 from its 128Mi limit to this pod&#x27;s 256Mi" in verdict.group(1)


def test_no_surface_shows_the_recorded_limit_beside_the_pods(
    nonroot_run: Run,
) -> None:
    rc, data, err, keep = nonroot_run
    assert rc == 0, err
    tj = data["runs"][0]["trainingJob"]
    limit = tj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    report = tj["status"]["failureReport"]
    assert limit == "256Mi"
    assert report["cgroup"]["limit_bytes"] == LIMIT == tj["status"]["memory"]["podLimitBytes"]
    page = (keep / "reports" / "pointgroup-fresh-fork.html").read_text()
    # The chart's axis ticks (0, 128 Mi, 256 Mi...) are not a limit; its limit line is the pod's.
    chart = re.search(r"<svg.*?</svg>", page, flags=re.DOTALL)
    assert chart is not None and "<title>limit 256.0 MiB</title>" in chart.group(0)
    text = json.dumps(data, ensure_ascii=False) + page.replace(chart.group(0), "")
    # 128 MiB appears only where the label says where the record was scaled from.
    for m in re.finditer(r"128(?:\.0)? ?Mi", text):
        before = text[max(0, m.start() - 20) : m.start()]
        assert before.endswith("scaled ×2 from its "), text[m.start() - 80 : m.end()]
