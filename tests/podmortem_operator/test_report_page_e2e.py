"""The report page served by the real operator after an OOM kill on the emulated cluster, read by a browser.

One operator: a TrainingJob's pod prints per-epoch memory lines (and a ``<script>`` line), is
OOM-killed with a real kernel record (the agent double's samples carry per-process PSS, with two
forked workers from the evaluation on), and ``GET /reports/default/{job}`` serves its page, its
PSS bands drawn from the timeline the reporter filed in the log store. When
Debian's ``chromium`` is installed, it loads that page headless, and the test reads its DOM
(``--dump-dom``) and keeps a screenshot.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from podmortem.kernel import oom_parser
from podmortem.reports.memory import MemorySample, ProcessMemory
from podmortem.reports.units import MIB
from podmortem_demo import harness as harness_mod
from podmortem_demo.emulated.kubelet import LineText
from podmortem_demo.harness import Harness, harness, kill

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"
TJ_PATH = "/apis/podmortem.io/v1alpha1/namespaces/default/trainingjobs"
#: Set to a folder to keep the browser's screenshot (docs/report-page.png was made so).
SCREENSHOT_DIR = os.environ.get("PODMORTEM_SCREENSHOT_DIR")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Harness, str, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("report-page")
    with harness(tmp) as h:
        h.add_agent_pod()
        h.start_operator(h.settings(log_http_auth=False, log_base_url="", last_log_line_interval_s=0.2))
        h.create(TJ_PATH, _trainingjob("pg"))
        h.create(TJ_PATH, _trainingjob("pg-running"))
        h.wait(lambda: h.get("/api/v1/namespaces/default/pods/pg-train"), what="the training pod")
        uid = _run_pod(h, "pg-train")
        emulated = h.sync(lambda: h.api.pods["default", "pg-train"])
        h.sync(lambda: emulated.containers["trainer"].write(52))
        h.wait(
            lambda: (
                ((h.get(f"{TJ_PATH}/pg") or {}).get("status", {}).get("memory", {}).get("epoch") == 4) or None
            ),
            what="epoch 4 seen",
        )
        record = oom_parser.parse_text((RECORDS / "01-k3s-v1-dmesgT-stress-4.15.log").read_text())[0]
        # The record's pod hit 123 MiB; samples in the log's own time frame climb to it.
        last_ns = h.sync(lambda: emulated.clock.now_ns)
        kill_at = datetime.fromtimestamp(last_ns // 10**9 + 20, UTC)
        start = datetime(2024, 5, 1, 10, 40, tzinfo=UTC)
        span = (kill_at - start).total_seconds()
        evidence = harness_mod.evidence_for(uid, record)
        evidence.samples = [
            MemorySample(
                at=start + timedelta(seconds=span * i / 30),
                usage_bytes=int((60 + 63 * i / 30) * MIB),
                limit_bytes=123 * MIB,
                processes=_processes(i),
            )
            for i in range(31)
        ]
        h.sync(lambda: h.agent.evidence.__setitem__(uid, evidence))
        kill(h, name="pg-train", finished_at=kill_at.strftime("%Y-%m-%dT%H:%M:%SZ"))

        def attached() -> dict[str, Any] | None:
            r = (h.get(f"{TJ_PATH}/pg") or {}).get("status", {}).get("failureReport")
            return r if r and r["evidence"]["kernelRecord"]["state"] == "attached" else None

        report = h.wait(attached, what="the report with the kernel record")
        # The timeline file is filed right after the report is written.
        h.wait(
            lambda: h.http_get(f"{h.running[0].log_url}/reports/default/pg/timeline.svg")[0] == 200 or None,
            what="the filed timeline",
        )
        yield h, h.running[0].log_url, report
        assert h.operator_error is None, h.operator_error


#: Samples from this index on have two forked workers (an evaluation's data-loader copies).
FORK_AT = 20


def _processes(i: int) -> list[ProcessMemory]:
    """The trainer (pid 1) climbing; from ``FORK_AT`` two workers of 8 MiB PSS each; a shell without PSS."""
    procs = [ProcessMemory(pid=1, name="python3", pss_bytes=int((40 + i) * MIB))]
    if i >= FORK_AT:
        procs += [ProcessMemory(pid=40 + k, name="python3", pss_bytes=8 * MIB) for k in range(2)]
    return [*procs, ProcessMemory(pid=7, name="sh", pss_bytes=None)]


def _run_pod(h: Harness, name: str) -> str:
    """`run_pod` with lines ~30 s apart (one per burst), so epochs spread over the timeline."""
    pod = h.wait(lambda: h.get(f"/api/v1/namespaces/default/pods/{name}"), what=f"pod {name}")
    emulated = h.sync(
        lambda: h.api.add_pod(
            name, containers=("trainer",), text=_text(PEAKS_MIB), max_burst=1, max_step_ns=60 * 10**9
        )
    )
    cid = emulated.containers["trainer"].current.container_id
    running = {"running": {"startedAt": "2024-05-01T10:40:00Z"}}
    h.patch(
        f"/api/v1/namespaces/default/pods/{name}",
        {
            "spec": {"nodeName": harness_mod.NODE},
            "status": {
                "phase": "Running",
                "startTime": "2024-05-01T10:40:00Z",
                "containerStatuses": [harness_mod._container_status(cid, running)],
            },
        },
    )
    return str(pod["metadata"]["uid"])


PEAKS_MIB = [80.0, 90.0, 100.0, 110.0, 118.0]


def _trainingjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "podmortem.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "pointgroup:1"}]}}},
    }


def _text(peaks_mib: list[float]) -> Callable[[str, int], LineText]:
    def factory(container: str, instance: int) -> LineText:
        def text(seq: int) -> bytes:
            if seq % 10 == 9 and seq // 10 < len(peaks_mib):
                epoch, peak = seq // 10, peaks_mib[seq // 10]
                return (
                    f"-> memory epoch {epoch}: rss {peak - 20:.2f}MiB (peak {peak - 15:.2f}MiB), pod "
                    f"{peak - 5:.2f}MiB of 123.00MiB (peak {peak:.2f}MiB), workers 2 pss 20.00MiB"
                ).encode()
            if seq == 51:
                return b"evaluating <script>alert('x')</script> scene 7"
            return b"step %d loss=0.%04d" % (seq, seq % 9973)

        return text

    return factory


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _check_page(doc: str, report: dict[str, Any]) -> None:
    """What a reader must find: the verdict, the findings, the kill marker at the kill time, the log."""
    cause = next(f for f in report["findings"] if f["code"] == report["verdict"])
    assert "pg-train/trainer: memcg-limit." in doc
    assert cause["message"].replace("'", "&#x27;")[:60] in doc or cause["message"][:60] in doc
    for f in report["findings"]:
        assert f'data-code="{f["code"]}"' in doc
    parser = _Tags()
    parser.feed(doc)
    tags = parser.tags
    svg = next(a for t, a in tags if t == "svg")
    i = next(i for i, (t, a) in enumerate(tags) if t == "g" and a.get("class") == "kill")
    kill_at = datetime.fromisoformat(report["pod"]["finishedAt"])
    assert tags[i][1]["data-t"] == report["pod"]["finishedAt"]
    t0, t1 = float(svg["data-t0"] or 0), float(svg["data-t1"] or 0)
    x0, x1 = float(svg["data-x0"] or 0), float(svg["data-x1"] or 0)
    expected = x0 + (kill_at.timestamp() - t0) / (t1 - t0) * (x1 - x0)
    assert abs(float(tags[i + 1][1]["x1"] or 0) - expected) < 0.1
    assert sum(1 for t, a in tags if t == "circle" and a.get("class") == "epoch") == 5  # 5 memory lines
    _check_bands(tags, svg)
    # The peaks climb ~10 MiB an epoch toward the 123 MiB limit: the early warning's line is drawn.
    projection = next(a for t, a in tags if t == "line" and a.get("class") == "projection")
    assert float(projection["x2"] or 0) > float(projection["x1"] or 0)
    assert "step 50 loss=0.0050" in doc
    assert "evaluating &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; scene 7" in doc or (
        "evaluating &lt;script&gt;alert('x')&lt;/script&gt; scene 7" in doc
    )
    assert "<script" not in doc


def _check_bands(tags: list[tuple[str, dict[str, str | None]]], svg: dict[str, str | None]) -> None:
    """Two stacked PSS bands by group name; the workers' band is zero before the fork and 16 MiB after."""
    bands = {a.get("data-process"): a for t, a in tags if t == "polygon" and a.get("class") == "pss"}
    assert set(bands) == {"trainer", "workers"}
    points = [tuple(map(float, xy.split(","))) for xy in (bands["workers"]["points"] or "").split()]
    half = len(points) // 2  # upper edge left to right, then the lower edge back
    thickness = [abs(lo[1] - up[1]) for up, lo in zip(points[:half], reversed(points[half:]), strict=True)]
    assert len(thickness) == 31
    assert max(thickness[:FORK_AT]) < 0.01 and min(thickness[FORK_AT:]) > 1


def test_report_page_served_after_a_real_kill(served: tuple[Harness, str, dict[str, Any]]) -> None:
    h, base, report = served
    status, body = h.http_get(f"{base}/reports/default/pg")
    assert status == 200
    _check_page(body.decode(), report)
    status, body = h.http_get(f"{base}/reports/default/pg?format=json")
    assert status == 200 and json.loads(body)["verdict"] == report["verdict"]
    status, body = h.http_get(f"{base}/reports/default/no-such-job")
    assert status == 404 and b"no TrainingJob default/no-such-job" in body
    status, body = h.http_get(f"{base}/reports/default/pg-running")
    assert status == 404 and b"has no failure report" in body
    status, _ = h.http_get(f"{base}/reports/default/pg?format=pdf")
    assert status == 400

    status, body = h.http_get(f"{base}/reports/default/pg/timeline.svg")
    assert status == 200 and body.startswith(b'<svg class="timeline" xmlns="http://www.w3.org/2000/svg"')
    parser = _Tags()
    parser.feed(body.decode())
    svg = next(a for t, a in parser.tags if t == "svg")
    _check_bands(parser.tags, svg)
    assert any(t == "g" and a.get("class") == "kill" for t, a in parser.tags)
    status, body = h.http_get(f"{base}/reports/default/pg-running/timeline.svg")
    assert status == 404 and b"has no failure report" in body


def test_chromium_renders_the_served_page(
    served: tuple[Harness, str, dict[str, Any]], tmp_path: Path
) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Debian's chromium is not installed (hack/ci-install.sh installs it in CI)")
    _, base, report = served
    url = f"{base}/reports/default/pg"
    flags = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--user-data-dir=" + str(tmp_path / "profile"),
    ]
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=60, check=True)
    _check_page(dom.stdout, report)
    shot = tmp_path / "report-page.png"
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=900,1800", "--hide-scrollbars", url],
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    if SCREENSHOT_DIR:
        shutil.copy(shot, Path(SCREENSHOT_DIR) / "report-page.png")
