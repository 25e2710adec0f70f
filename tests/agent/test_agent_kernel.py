"""The agent as a subprocess against the real kernel: a real OOM kill in a test memory cgroup.

It runs once per kernel log source: /dev/kmsg, and syslog(2) (chosen through
``PODMORTEM_KERNEL_LOG_SOURCE``, as the Helm chart sets it). Other test runs
OOM-kill processes at the same time; the agent must map only records of its own
pod's cgroup, and this test checks for its own pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.entrypoints import free_port

from podmortem_demo import sandbox

pytestmark = pytest.mark.kernel

UID = "0e9a7c43-5b1f-4a37-9d1c-5a5e7d4c2b10"
TOKEN = "s3cret-token-for-tests"
LIMIT = 96 * 1024 * 1024

#: Allocates 30 MiB, says so, waits to be sampled, then allocates until the limit kills it.
HOG = (
    "import sys, time\n"
    "held = [bytearray(30 * 1024 * 1024)]\n"
    "for b in held: b[::4096] = b'x' * len(b[::4096])\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "while True:\n"
    "    b = bytearray(8 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); held.append(b)\n"
)


def _kmsg_readable() -> bool:
    try:
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
    except OSError:
        return False
    return True


_free_port = free_port  # one source of ports for every test: none handed out twice


class Agent:
    def __init__(
        self, *, cgroup: sandbox.MemoryCgroup, state_dir: Path, token_file: Path, source: str = "kmsg"
    ) -> None:
        self.port = _free_port()
        self.source = source
        self.args = [
            sys.executable,
            "-m",
            "podmortem.cli.main",
            "agent",
            "--static-pod",
            f"{UID}=/{cgroup.name}",
            "--state-dir",
            str(state_dir),
            "--token-file",
            str(token_file),
            "--cgroup-root",
            str(cgroup.root.path.parent if cgroup.version == 1 else cgroup.root.path),
            "--proc-root",
            "/proc",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--metrics-port",
            "0",
            "--interval",
            "0.5",
            "--log-level",
            "debug",
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.state_dir = state_dir
        self.log = state_dir.parent / "agent.log"

    def start(self) -> None:
        log = self.log.open("ab")
        env = {**os.environ, "PODMORTEM_KERNEL_LOG_SOURCE": self.source}
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        self.wait_for(lambda: self.get("/healthz", token=False)[0] in (200, 503), what="the agent to listen")

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def get(self, path: str, *, token: bool = True) -> tuple[int, Any]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if token:
            request.add_header("Authorization", f"Bearer {TOKEN}")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                body = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            body, status = exc.read(), exc.code
        except (urllib.error.URLError, ConnectionError):
            return 0, None
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body.decode()

    def wait_for(self, check: Callable[[], Any], *, what: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(
                    f"agent exited with {self.proc.returncode} waiting for {what}:\n{self.log.read_text()}"
                )
            result = check()
            if result:
                return result
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what}:\n{self.log.read_text()[-4000:]}")

    def evidence(self) -> dict[str, Any]:
        status, body = self.get(f"/v1/pods/{UID}/evidence")
        assert status == 200, body
        assert isinstance(body, dict)
        return body


def _syslog_readable() -> bool:
    from podmortem.kernel import syslog as klog

    try:
        klog.buffer_size()
    except OSError:
        return False
    return True


@pytest.fixture(params=["kmsg", "syslog"])
def source(request: pytest.FixtureRequest) -> str:
    if request.param == "kmsg" and not _kmsg_readable():
        pytest.skip("needs a readable /dev/kmsg (root or CAP_SYSLOG)")
    if request.param == "syslog" and not _syslog_readable():
        pytest.skip("needs syslog(2) (CAP_SYSLOG)")
    return str(request.param)


@pytest.fixture
def agent_factory(tmp_path: Path, source: str) -> Iterator[Callable[[sandbox.MemoryCgroup], Agent]]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    started: list[Agent] = []

    def make(cgroup: sandbox.MemoryCgroup) -> Agent:
        agent = Agent(cgroup=cgroup, state_dir=tmp_path / "state", token_file=token_file, source=source)
        started.append(agent)
        return agent

    yield make
    for agent in started:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait()


def _oom_kill(cgroup: sandbox.MemoryCgroup, *, before: Callable[[int], None] | None = None) -> int:
    """Run the hog in the cgroup until the kernel kills it; return its pid."""
    hog = cgroup.popen([sys.executable, "-c", HOG], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert hog.stdout is not None and hog.stdin is not None
    try:
        assert hog.stdout.readline().strip() == b"ready"
        if before is not None:
            before(hog.pid)
        hog.stdin.write(b"go\n")
        hog.stdin.flush()
        assert hog.wait(timeout=60) == -signal.SIGKILL
    finally:
        if hog.poll() is None:
            hog.kill()
            hog.wait()
        hog.stdin.close()
        hog.stdout.close()
    return hog.pid


def _records_for(body: dict[str, Any], pid: int) -> list[dict[str, Any]]:
    return [
        r
        for r in body["kernel_records"]
        if any(k["pid"] == pid for k in r.get("killed", [])) or (r.get("oom_kill") or {}).get("pid") == pid
    ]


def test_agent_maps_a_real_oom_kill_and_keeps_it_once_across_a_restart(
    make_cgroup: Callable[..., sandbox.MemoryCgroup], agent_factory: Callable[[sandbox.MemoryCgroup], Agent]
) -> None:
    cgroup = make_cgroup(limit_bytes=LIMIT)
    agent = agent_factory(cgroup)
    agent.start()

    def sampled_with(pid: int) -> dict[str, Any] | None:
        body = agent.evidence()
        for sample in body["samples"]:
            for p in sample["processes"]:
                if p["pid"] == pid and (p["pss_bytes"] or 0) >= 25 * 1024 * 1024:
                    return sample
        return None

    seen: dict[str, Any] = {}

    def before_kill(pid: int) -> None:
        seen["sample"] = agent.wait_for(lambda: sampled_with(pid), what="a sample with the hog's PSS")

    pid = _oom_kill(cgroup, before=before_kill)
    sample = seen["sample"]
    assert sample["limit_bytes"] == LIMIT
    assert sample["usage_bytes"] >= 25 * 1024 * 1024
    assert sample["cgroup_path"] == f"/{cgroup.name}"
    assert sample["stat"]["version"] == cgroup.version
    proc = next(p for p in sample["processes"] if p["pid"] == pid)
    assert proc["private_bytes"] >= 25 * 1024 * 1024
    assert proc["name"].startswith("python")

    body = agent.wait_for(
        lambda: (b := agent.evidence()) and _records_for(b, pid) and b, what=f"the kernel record of pid {pid}"
    )
    mine = _records_for(body, pid)
    assert len(mine) == 1
    record = mine[0]
    assert record["oom_kill"]["task_memcg"].endswith(f"/{cgroup.name}")
    assert (record["kmsg_seq"] is not None) == (agent.source == "kmsg")
    assert record["monotonic_s"] is not None
    # Only this pod's records: concurrent OOM kills of other cgroups are never mapped here.
    for other in body["kernel_records"]:
        assert (other.get("oom_kill") or {}).get("task_memcg", f"/{cgroup.name}").endswith(cgroup.name)
    assert body["kmsg"]["readable"] is True
    health = agent.get("/healthz", token=False)[1]
    assert health["kmsg"]["source"] == agent.source
    assert f"kernel log: reading {'/dev/kmsg' if agent.source == 'kmsg' else 'it through syslog(2)'}" in (
        agent.log.read_text()
    )
    first_seq = record["kmsg_seq"]
    first_at = record["monotonic_s"]

    status, metrics = agent.get("/metrics", token=False)
    assert status == 200
    assert (
        f'podmortem_agent_pod_oom_kill_records_total{{namespace="",pod="{UID}",uid="{UID}"}} 1.0' in metrics
    )
    assert agent.stop() == 0
    if agent.source == "kmsg":
        state = json.loads((agent.state_dir / "kmsg-position.json").read_text())
        assert state["seq"] >= first_seq
    else:
        state = json.loads((agent.state_dir / "syslog-cursor.json").read_text())
        assert state["ts_us"] >= first_at * 1e6

    # Killed again while the agent is down; the restarted agent reads that one from the kernel log,
    # and serves the old one from its state file: once, never read from the kernel log again.
    pid2 = _oom_kill(cgroup)
    agent.start()
    body = agent.wait_for(
        lambda: (b := agent.evidence()) and _records_for(b, pid2) and b,
        what=f"the kernel record of pid {pid2}, killed while the agent was down",
    )
    assert _records_for(body, pid) == [record]
    assert len(_records_for(body, pid2)) == 1
    later = [r for r in body["kernel_records"] if r != record]
    if agent.source == "kmsg":
        assert all(r["kmsg_seq"] > first_seq for r in later)
    assert all(r["monotonic_s"] > first_at for r in later)
    assert agent.stop() == 0


@pytest.mark.parametrize("source", ["syslog"], indirect=True)  # auth does not depend on the source
def test_wrong_or_missing_token_is_refused(
    make_cgroup: Callable[..., sandbox.MemoryCgroup], agent_factory: Callable[[sandbox.MemoryCgroup], Agent]
) -> None:
    agent = agent_factory(make_cgroup())
    agent.start()
    assert agent.get(f"/v1/pods/{UID}/evidence", token=False)[0] == 401
    assert agent.get(f"/v1/pods/{UID}/evidence")[0] == 200
    assert agent.get("/v1/pods/not-a-pod/evidence")[0] == 404
    assert agent.stop() == 0
