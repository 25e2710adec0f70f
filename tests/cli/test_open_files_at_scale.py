"""``podmortem operator`` following 2,000 pods under a container's open-files limits.

Since containerd 2.0 a container starts with a soft ``RLIMIT_NOFILE`` of 1,024 and a hard one of
524,288. The operator is started as the chart starts it (``podmortem operator``), under ``prlimit``,
against an emulated cluster of 2,000 annotated pods in a process of its own
(``podmortem_demo.scale_cluster``):

* soft 1,024 / hard 524,288 (or this machine's hard limit where lower): the operator raises its soft
  limit, and every pod's lines are stored, each once, with no follower ever waiting for a descriptor;
* soft = hard = 1,024: 2,000 streams cannot all be open at once. Followers past their share of the
  limit (``podmortem.open_files.budget``) wait for a connection; the servers, watches and store keep
  the rest, so readiness and metrics still answer and show the pressure (``/readyz`` names the
  waiting followers, ``podmortem_log_follow_connection_waits``). No follower stops for good: when pods
  go away and free their connections, every remaining pod's lines are stored.
"""

from __future__ import annotations

import re
import resource
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.cli import entrypoints as ep

from podmortem_demo.scale_cluster import NAMESPACE, ScaleCluster

PRLIMIT = shutil.which("prlimit")
pytestmark = pytest.mark.skipif(PRLIMIT is None, reason="util-linux's prlimit is not installed")

PODS = 2000
LINES = 5
#: containerd 2.0's hard limit for containers; lower here when this process's own hard limit is.
HARD = min(524_288, resource.getrlimit(resource.RLIMIT_NOFILE)[1])


@pytest.fixture
def cluster() -> Iterator[ScaleCluster]:
    with ScaleCluster(PODS, initial_lines=LINES, line_every=0) as c:
        yield c


def _operator(cluster: ScaleCluster, tmp: Path, *, soft: int, hard: int) -> tuple[ep.Process, dict[str, str]]:
    assert PRLIMIT is not None
    kubeconfig = ep.write_kubeconfig(tmp / "kubeconfig", server=cluster.url, token="operator", ca_pem=None)
    env = ep.clean_env(
        tmp,
        PODMORTEM_LOG_STORE_DIR=str(tmp / "store"),
        PODMORTEM_HTTP_PORT=str(ep.free_port()),
        PODMORTEM_METRICS_PORT=str(ep.free_port()),
        PODMORTEM_HEALTH_PORT=str(ep.free_port()),
        PODMORTEM_HTTP_AUTH="none",
    )
    argv = [PRLIMIT, f"--nofile={soft}:{hard}", ep.PODMORTEM, "operator", "--kubeconfig", str(kubeconfig)]
    return ep.Process(argv, env, tmp / "operator.log").start(), env


def _stored_lines(env: dict[str, str], pod: str) -> int | None:
    """Lines the operator serves for the pod (None: not answered)."""
    status, body = ep.http_get(f"http://127.0.0.1:{env['PODMORTEM_HTTP_PORT']}/logs/{NAMESPACE}/{pod}",
                               timeout=2.0)
    if status == 404:
        return 0
    if status != 200:
        return None
    lines = body.splitlines()
    assert len(set(lines)) == len(lines), f"{pod}: a line is served twice"
    return len(lines)


def _wait_all_stored(p: ep.Process, env: dict[str, str], pods: list[str], *, timeout: float) -> None:
    """Every pod in ``pods`` has its ``LINES`` lines stored (read back through the log server)."""
    pending = list(pods)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        assert p.alive(), p.output()[-4000:]
        pending = [pod for pod in pending if _stored_lines(env, pod) != LINES]
        if pending:
            time.sleep(1.0)
    assert not pending, (f"{len(pending)} pods' lines never stored, e.g. {pending[:5]}; "
                         f"log:\n{p.output()[-4000:]}")


def _metric(env: dict[str, str], name: str) -> float | None:
    status, text = ep.http_get(f"http://127.0.0.1:{env['PODMORTEM_METRICS_PORT']}/metrics")
    if status != 200:
        return None
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def _wait(what: str, p: ep.Process, check: Callable[[], bool], *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert p.alive(), p.output()[-4000:]
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"never: {what}\n{p.output()[-4000:]}")


def test_soft_1024_hard_high_every_pod_is_stored(cluster: ScaleCluster, tmp_path: Path) -> None:
    p, env = _operator(cluster, tmp_path, soft=1024, hard=HARD)
    try:
        p.wait_http(f"http://127.0.0.1:{env['PODMORTEM_HEALTH_PORT']}/readyz", timeout=120)
        assert f"open files: soft limit 1,024 raised to {HARD:,}" in p.output()
        _wait_all_stored(p, env, cluster.names, timeout=300)
        _, ready = p.wait_http(f"http://127.0.0.1:{env['PODMORTEM_HEALTH_PORT']}/readyz")
        assert f" of {HARD:,}" in ready and "(low" not in ready, ready
        assert _metric(env, "podmortem_followed_pods") == PODS
        assert _metric(env, "podmortem_log_follow_descriptor_waits_total") == 0
        assert "no free file descriptor" not in p.output() and "stopped:" not in p.output()
        # No INFO line per pod event (kopf's "Handler ... succeeded." was one a pod): the operator's
        # log does not grow with the pods it follows.
        assert p.output().count("\n") < PODS // 4, p.output()[-4000:]
    finally:
        assert p.stop() == 0, p.output()[-4000:]


def test_soft_equals_hard_1024_no_follower_stops_for_good(cluster: ScaleCluster, tmp_path: Path) -> None:
    p, env = _operator(cluster, tmp_path, soft=1024, hard=1024)
    health = f"http://127.0.0.1:{env['PODMORTEM_HEALTH_PORT']}/readyz"
    try:
        # 2,000 streams need more descriptors than there are: past their share of the limit followers
        # wait for a connection, visibly, and the servers keep theirs (readiness and metrics answer).
        seen: list[tuple[int, int, int]] = []

        def every_pod_streams_or_waits() -> bool:
            _, ready = ep.http_get(health, timeout=2.0)
            found = re.search(r"log connections ([\d,]+) of ([\d,]+) \(([\d,]+) followers waiting", ready)
            if found is None:
                return False
            seen.append(tuple(int(g.replace(",", "")) for g in found.groups()))  # type: ignore[arg-type]
            return seen[-1][0] + seen[-1][2] == PODS

        _wait("every pod streaming or waiting for a connection", p, every_pod_streams_or_waits, timeout=180)
        in_use, size, _waiting = seen[-1]
        assert in_use == size < 1024, seen[-1]
        assert (_metric(env, "podmortem_log_follow_connection_waits") or 0) > 0
        assert "open files: soft limit 1,024 (hard 1,024)" in p.output()
        # Pods go away (their streams end, their connections close): everything left is followed.
        gone, kept = cluster.names[:1400], cluster.names[1400:]
        assert cluster.ask({"cmd": "delete", "pods": gone})["done"] == len(gone)
        _wait_all_stored(p, env, kept, timeout=240)
        _wait("every kept pod followed, none waiting", p,
              lambda: (_metric(env, "podmortem_followed_pods") == len(kept)
                       and _metric(env, "podmortem_log_follow_connection_waits") == 0), timeout=120)
        out = p.output()
        assert "stopped:" not in out and "out of system resource" not in out, out[-4000:]
        assert "fsync failed" not in out, out[-4000:]
    finally:
        assert p.stop() == 0, p.output()[-4000:]
