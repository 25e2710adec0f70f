"""``podmortem demo --serve``, used as a user would: kubectl, ``podmortem logs`` and a browser by hand.

The demo runs as the ``podmortem`` console script with no test-only flag (the kernel as it
picks it: real where it can, recorded otherwise); everything the test uses (the
kubeconfig, the job, its pod, the report page) is read from what the demo prints. Then
the real ``kubectl`` and ``podmortem logs`` run against that kubeconfig, the report page is
fetched over HTTP, and SIGTERM (SIGINT in the second test) must stop it all with exit 0,
also with a ``kubectl get -w`` still open.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from podmortem.cli.main import main
from podmortem_demo import serve
from podmortem_demo.emulated import apiserver

KUBECTL = shutil.which("kubectl")
CRD = Path(__file__).parents[2] / "charts" / "podmortem" / "crds" / "trainingjob.yaml"
needs_kubectl = pytest.mark.skipif(KUBECTL is None,
                                   reason="needs the kubectl client (apt-get install kubectl)")
#: Seconds for the story (two runs of a few seconds each, more on a busy 2-core machine) to reach serving.
STORY_S = 150
#: Seconds from SIGTERM to exit: the operator and the cluster stop in about one.
STOP_S = 30


def podmortem() -> list[str]:
    script = Path(sys.executable).parent / "podmortem"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from podmortem.cli.main import main; raise SystemExit(main())"]


@dataclass
class Served:
    """A running ``podmortem demo --serve`` and what it printed."""

    process: subprocess.Popen[bytes]
    out: Path
    err: Path
    kubeconfig: Path
    log_server: str
    job: str
    pod: str
    page: str

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")


def start(tmp_path: Path, *args: str) -> Served:
    """Start the demo as a user would and wait for its "serving until" line; parse what it names."""
    out, err = tmp_path / "demo.out", tmp_path / "demo.err"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen([*podmortem(), "demo", "--serve", *args], stdout=stdout, stderr=stderr,
                                   env=env, start_new_session=True)
    deadline = time.monotonic() + STORY_S
    text = ""
    while serve.SERVING not in text:
        text = err.read_text(errors="replace")
        if process.poll() is not None:
            raise AssertionError(f"the demo exited {process.returncode} before serving:\n{text[-4000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"no {serve.SERVING!r} line within {STORY_S} s:\n{text[-4000:]}")
        time.sleep(0.2)

    def found(pattern: str) -> str:
        match = re.search(pattern, text)
        assert match, f"the demo printed no {pattern!r}:\n{text[-3000:]}"
        return match.group(1)

    return Served(
        process=process, out=out, err=err,
        kubeconfig=Path(found(r"kubeconfig:\s+(\S+)")),
        log_server=found(r"log server:\s+(http://\S+)"),
        job=found(r"kubectl describe tj (\S+)"),
        pod=found(r" logs (\S+) -n default"),
        page=found(r"open in a browser: (\S+)"),
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[list[Served]]:
    """The demos a test started; any still running at the end is killed (the test failed)."""
    running: list[Served] = []
    yield running
    for s in running:
        if s.process.poll() is None:
            os.killpg(s.process.pid, signal.SIGKILL)
            s.process.wait(10)


def run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A command as a user runs it: its own HOME (kubectl's cache), no KUBECONFIG unless given."""
    base = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False,
                          env={**base, "HOME": str(tmp_path), **env})
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def stop(s: Served, sig: signal.Signals) -> float:
    """Send ``sig``; the demo must exit 0 within `STOP_S`. Returns the seconds it took."""
    started = time.monotonic()
    s.process.send_signal(sig)
    try:
        code = s.process.wait(STOP_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {STOP_S} s after {sig.name}:\n{s.stderr()[-3000:]}") from None
    assert code == 0, f"exit {code} after {sig.name}:\n{s.stderr()[-3000:]}"
    return time.monotonic() - started


@needs_kubectl
def test_kubectl_podmortem_logs_and_the_report_page_work_while_it_serves(
    tmp_path: Path, served: list[Served]
) -> None:
    assert KUBECTL is not None
    s = start(tmp_path, "--json")
    served.append(s)
    # --json: the JSON document came first, whole, on stdout; the instructions are on stderr.
    document = json.loads(s.out.read_text())
    baseline = document["runs"][0]
    assert baseline["trainingJob"]["metadata"]["name"] == s.job == "pointgroup-fresh-fork"
    assert s.pod == "pointgroup-fresh-fork-train" and s.kubeconfig.is_file()
    assert "listens on 127.0.0.1 only" in s.stderr() and "auth off" in s.stderr()

    # kubectl get tj: the CRD's printer columns, from the Table the emulated API serves.
    listed = run([KUBECTL, "--kubeconfig", str(s.kubeconfig), "get", "tj"], tmp_path).stdout
    header, *rows = listed.splitlines()
    assert header.split() == ["NAME", "PHASE", "EPOCH", "PEAK/LIMIT", "VERDICT", "ROOT-CAUSE-POD", "AGE"]
    row = next(r for r in rows if r.startswith(s.job + " "))
    assert row.split()[1] == "Failed" and "memcg-limit" in row.split() and s.pod in row.split(), listed
    assert any(r.split()[:2] == ["pointgroup-auto", "Succeeded"] for r in rows), listed

    # kubectl describe tj, with $KUBECONFIG: the report in the status, and this job's Events only.
    described = run([KUBECTL, "describe", "tj", s.job], tmp_path, KUBECONFIG=str(s.kubeconfig)).stdout
    assert "Failure Report:" in described and re.search(r"Verdict:\s+memcg-limit", described), described
    events = described[described.index("\nEvents:"):]
    assert re.search(r"Warning\s+MemcgLimit\s+.*memcg-limit", events), events
    assert "KernelRecordAttached" in events and "pointgroup-auto" not in events, events

    # The report's link in the status is the page the demo names, and it is served.
    url = run([KUBECTL, "--kubeconfig", str(s.kubeconfig), "get", "tj", s.job, "-o",
               "jsonpath={.status.failureReport.reportUrl}"], tmp_path).stdout
    assert url == s.page == f"{s.log_server}/reports/default/{s.job}"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200 and response.headers.get_content_type() == "text/html"
        page = response.read().decode()
    assert page.lstrip().lower().startswith("<!doctype html") and "memcg-limit" in page and s.job in page

    # podmortem logs: every line the trainer printed, as the demo counted them.
    logs = run([*podmortem(), "logs", s.pod, "-n", "default", "--kubeconfig", str(s.kubeconfig)], tmp_path)
    lines = logs.stdout.splitlines()
    assert len(lines) == baseline["log"]["produced"] > 500, logs.stderr
    assert any("-> memory epoch" in line for line in lines)

    # SIGTERM with a `kubectl get tj -w` still open: exit 0 promptly, the temporary kubeconfig gone.
    watch = subprocess.Popen([KUBECTL, "--kubeconfig", str(s.kubeconfig), "get", "tj", "-w"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "HOME": str(tmp_path)})
    try:
        time.sleep(1.0)
        assert watch.poll() is None, watch.communicate()
        took = stop(s, signal.SIGTERM)
    finally:
        watch.kill()
        watched, _ = watch.communicate(timeout=10)
    assert s.job.encode() in watched
    assert took < 15, f"{took:.1f} s to stop"
    assert not s.kubeconfig.exists() and not s.kubeconfig.parent.exists()
    assert "SIGTERM: stopping" in s.stderr() and "--serve: stopped" in s.stderr()


@needs_kubectl
def test_keep_dir_keeps_the_kubeconfig_and_ctrl_c_stops_it(tmp_path: Path, served: list[Served]) -> None:
    assert KUBECTL is not None
    keep = tmp_path / "kept"
    s = start(tmp_path, "--keep-dir", str(keep), "-q")
    served.append(s)
    assert s.kubeconfig == keep / "kubeconfig"
    assert s.out.read_text().startswith("summary:\n  fresh-fork  Failed ")  # the summary came first
    wide = run([KUBECTL, "get", "tj", "-o", "wide"], tmp_path, KUBECONFIG=str(s.kubeconfig)).stdout
    assert wide.splitlines()[0].split()[-3:] == ["POD", "LAST-LOG", "AGE"], wide
    stop(s, signal.SIGINT)
    assert s.kubeconfig.is_file() and (keep / "reports" / f"{s.job}.html").is_file()
    assert "SIGINT: stopping" in s.stderr()


def test_the_demo_carries_the_crd_printer_columns() -> None:
    """The wheel has no chart: the demo's copy of the columns must be the CRD's."""
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    assert version["additionalPrinterColumns"] == serve.TRAININGJOB_PRINTER_COLUMNS


def test_serve_is_not_for_the_distributed_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--serve", "--distributed"]) == 2
    assert "--serve is for the single-job demo" in capsys.readouterr().err


def test_the_help_says_how_serving_ends(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = capsys.readouterr().out
    assert "--serve" in text and "Ctrl-C or SIGTERM" in text


@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (150, "2m30s"), (600, "10m"),
    (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"), (47 * 3600, "47h"), (50 * 3600, "2d2h"), (30 * 86400, "30d"),
    (3 * 365 * 86400, "3y"), (9 * 365 * 86400, "9y"),
])
def test_ages_read_as_kubectl_prints_them(seconds: float, text: str) -> None:
    assert apiserver.human_duration(seconds) == text


def test_a_table_has_the_columns_and_cells_the_apiserver_writes() -> None:
    obj = {"metadata": {"name": "a", "resourceVersion": "7"},
           "status": {"phase": "Failed", "memory": {"epoch": 3}, "failureReport": {"verdict": "memcg-limit"}}}
    table = apiserver._table("meta.k8s.io/v1", serve.TRAININGJOB_PRINTER_COLUMNS, [obj], include="Metadata")
    assert [c["name"] for c in table["columnDefinitions"]][:2] == ["Name", "Phase"]
    (row,) = table["rows"]
    assert row["cells"][:6] == ["a", "Failed", 3, None, "memcg-limit", None]
    assert row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}
    assert table["metadata"]["resourceVersion"] == "7"
    assert apiserver._accepted_table(
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json") == "meta.k8s.io/v1"
    assert apiserver._accepted_table("application/json") is None
