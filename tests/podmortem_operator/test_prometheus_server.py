"""The working-set query against a real Prometheus server scraping a stand-in cAdvisor.

Debian's ``prometheus`` binary runs on a free port with a temporary TSDB and a
config that scrapes a small aiohttp endpoint every 200 ms. The endpoint serves
``container_memory_working_set_bytes`` the way cAdvisor does (one series per
container, the pod-level ``container=""`` and the pause ``container="POD"``
series, explicit sample timestamps) for one minute of a compressed history, and
the test moves it one minute further once Prometheus holds the minute served: a
scrape that Prometheus gave up on (its 150 ms timeout, on a loaded machine) is
answered again, never skipped. Then ``prometheus.query_working_set`` (the
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
#: Samples the stand-in serves, one pod-minute apart.
STEPS = 8
#: How long Prometheus may take to start and to store every step, on a loaded shared machine.
HISTORY_TIMEOUT_S = 120.0
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


class History:
    """The step the stand-in serves on every scrape until the test moves it on, and what it answered.

    A scrape's answer counts only once Prometheus has stored it: Prometheus drops a scrape that
    outlasts its timeout (the answer may still have been sent), so the served step stays the same
    until the test has read it back.
    """

    def __init__(self) -> None:
        self.step = 0
        self.scrapes: list[int] = []


@pytest.fixture
async def cadvisor() -> AsyncIterator[tuple[str, History]]:
    history = History()

    async def metrics(request: web.Request) -> web.Response:
        history.scrapes.append(history.step)
        return web.Response(text=exposition(history.step), content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics/cadvisor", metrics)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield f"127.0.0.1:{server.port}", history
    await server.close()


@pytest.fixture
def prometheus_server(cadvisor: tuple[str, History], tmp_path: Path) -> Iterator[str]:
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


async def _stored_trainer_bytes(url: str, k: int) -> int | None:
    """The trainer series' value at step ``k``'s time, as Prometheus holds it (None: not yet up).

    Each step's value differs from every other's, so this is ``trainer_bytes(k)`` exactly when
    step ``k``'s sample is stored (an earlier step's sample would answer within the lookback).
    """
    at = (BASE + timedelta(minutes=k)).timestamp()
    query = 'container_memory_working_set_bytes{namespace="ml",pod="trainer-0",container="trainer"}'
    try:
        async with aiohttp.ClientSession() as session, session.get(
            f"{url}/api/v1/query", params={"query": query, "time": f"{at:.3f}"},
            timeout=aiohttp.ClientTimeout(total=5),
        ) as resp:
            if resp.status != 200:
                return None
            result = (await resp.json())["data"]["result"]
    except (aiohttp.ClientError, TimeoutError):
        return None  # still starting
    return int(result[0]["value"][1]) if result else None


async def test_working_set_read_back_through_a_real_prometheus(
    prometheus_server: str, cadvisor: tuple[str, History], tmp_path: Path
) -> None:
    _, history = cadvisor
    last = STEPS - 1
    # The wait tells a stored step from the one before it by value: no two steps may share one.
    assert len({trainer_bytes(k) for k in range(STEPS)}) == STEPS
    deadline = time.monotonic() + HISTORY_TIMEOUT_S
    for k in range(STEPS):
        history.step = k
        while await _stored_trainer_bytes(prometheus_server, k) != trainer_bytes(k):
            if time.monotonic() > deadline:
                log = (tmp_path / "prometheus.log").read_text()[-2000:]
                pytest.fail(f"Prometheus never stored step {k}; scrapes={history.scrapes} log:\n{log}")
            await asyncio.sleep(0.1)
    working_set = await _query(prometheus_server, "ml", "trainer-0", last)

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
