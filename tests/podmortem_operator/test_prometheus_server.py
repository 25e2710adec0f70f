"""The working-set query against a real Prometheus server scraping a stand-in cAdvisor.

Debian's ``prometheus`` binary runs on a free port with a temporary TSDB and a
config that scrapes a small aiohttp endpoint every 200 ms. The endpoint serves
``container_memory_working_set_bytes`` the way cAdvisor does (one series per
container, the pod-level ``container=""`` and the pause ``container="POD"``
series, explicit sample timestamps), and every scrape moves the pod one minute
further into a compressed history. Then ``prometheus.query_working_set`` (the
client the operator uses) reads the pod's summed series back through the real
``/api/v1/query_range`` and the values are checked against what was served.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from tests.cli.entrypoints import free_port

from podmortem.operator.reporting import prometheus
from podmortem.operator.settings import PrometheusSettings

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="prometheus not installed (Debian package prometheus; hack/ci-install.sh installs it)",
)

MIB = 2**20
#: Samples the stand-in serves, one pod-minute apart; the last is served again afterwards.
STEPS = 8
#: Pod-time start of the compressed history (whole minute, within the TSDB head's hour).
BASE = (datetime.now(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0)


def trainer_bytes(k: int) -> int:
    """The trainer container climbs 100 MiB per minute; the spike at k=5 is an evaluation."""
    return (1000 + 100 * k + (400 if k == 5 else 0)) * MIB


SIDECAR = 50 * MIB


def exposition(k: int) -> str:
    """cAdvisor-shaped text for history step ``k``, with cAdvisor's millisecond timestamps."""
    ts = int((BASE + timedelta(minutes=k)).timestamp() * 1000)
    t = trainer_bytes(k)
    common = 'id="/kubepods/x",image="img",name="n"'
    rows = [
        ("ml", "trainer-0", "trainer", t),
        ("ml", "trainer-0", "log-shipper", SIDECAR),
        ("ml", "trainer-0", "POD", 1 * MIB),  # the pause container: excluded by the query
        ("ml", "trainer-0", "", t + SIDECAR + 1 * MIB),  # the pod cgroup: excluded
        ("ml", "trainer-1", "trainer", 7 * t),  # another pod
        ("other", "trainer-0", "trainer", 9 * t),  # same pod name, other namespace
    ]
    lines = [
        "# HELP container_memory_working_set_bytes Current working set of the container in bytes",
        "# TYPE container_memory_working_set_bytes gauge",
    ]
    for ns, pod, container, value in rows:
        labels = f'container="{container}",{common},namespace="{ns}",pod="{pod}"'
        lines.append(f"container_memory_working_set_bytes{{{labels}}} {value} {ts}")
    return "\n".join(lines) + "\n"


_free_port = free_port  # one source of ports for every test: none handed out twice


@pytest.fixture
async def cadvisor() -> AsyncIterator[tuple[str, list[int]]]:
    scrapes: list[int] = []

    async def metrics(request: web.Request) -> web.Response:
        k = min(len(scrapes), STEPS - 1)
        scrapes.append(k)
        return web.Response(text=exposition(k), content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics/cadvisor", metrics)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield f"127.0.0.1:{server.port}", scrapes
    await server.close()


@pytest.fixture
def prometheus_server(cadvisor: tuple[str, list[int]], tmp_path: Path) -> Iterator[str]:
    assert PROMETHEUS is not None
    target, _ = cadvisor
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 200ms\n  scrape_timeout: 150ms\n"
        "scrape_configs:\n  - job_name: cadvisor\n    metrics_path: /metrics/cadvisor\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def _query(url: str, namespace: str, pod: str, end_minute: int) -> prometheus.WorkingSet:
    async with aiohttp.ClientSession() as session:
        return await prometheus.query_working_set(
            session=session,
            settings=PrometheusSettings(url=url, timeout_s=5.0),
            namespace=namespace,
            pod=pod,
            start=BASE,
            end=BASE + timedelta(minutes=end_minute),
        )


async def test_working_set_read_back_through_a_real_prometheus(
    prometheus_server: str, cadvisor: tuple[str, list[int]], tmp_path: Path
) -> None:
    _, scrapes = cadvisor
    last = STEPS - 1
    deadline = time.monotonic() + 20
    working_set = prometheus.WorkingSet(source="none")
    while time.monotonic() < deadline:
        if len(scrapes) > STEPS:  # the last step has been served (and so stored) at least once
            try:
                working_set = await _query(prometheus_server, "ml", "trainer-0", last)
            except prometheus.PrometheusError:
                pass  # still starting
            else:
                if working_set.points and working_set.points[-1][1] == trainer_bytes(last) + SIDECAR:
                    break
        await asyncio.sleep(0.2)
    else:
        log = (tmp_path / "prometheus.log").read_text()[-2000:]
        pytest.fail(f"Prometheus never had the whole history; scrapes={scrapes} log:\n{log}")

    # The query range is 7 minutes: the step floor is 15 s, so 29 points, each the last sample
    # at or before it (cAdvisor's timestamps honoured), summed over the pod's real containers.
    assert working_set.source == "prometheus" and working_set.note == ""
    assert len(working_set.points) == last * 4 + 1
    for i, (at, value) in enumerate(working_set.points):
        assert at == BASE + timedelta(seconds=15 * i)
        assert value == trainer_bytes(i // 4) + SIDECAR, (i, value)
    assert working_set.peak == (BASE + timedelta(minutes=5), trainer_bytes(5) + SIDECAR)

    # The other namespace's pod of the same name is its own series.
    other = await _query(prometheus_server, "other", "trainer-0", last)
    assert other.points[-1][1] == 9 * trainer_bytes(last)
    # A pod Prometheus never saw is said, not hidden.
    missing = await _query(prometheus_server, "ml", "trainer-9", last)
    assert missing.points == [] and "no samples" in missing.note
