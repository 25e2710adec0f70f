"""Both entry points as processes, over TLS, and a real kernel OOM kill: the report names it.

``podmortem agent`` and ``podmortem operator`` run as processes, each logging in
with a kubeconfig or, as in a pod, with its service-account files, against the emulated
API over HTTPS with bearer tokens. The TrainingJob's pod "runs" in a memory
cgroup laid out as the kubelet's cgroupfs driver lays it out
(``.../kubepods/burstable/pod<uid>/<container id>``), where a process is
OOM-killed by the kernel for real. The agent reads the kernel's record from
/dev/kmsg, the operator asks it for the evidence, and the report in the
TrainingJob's status carries that record: the victim's pid and the limit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli import entrypoints as ep

from podmortem_demo import sandbox
from podmortem_demo.emulated.tls import Pki, make_pki
from podmortem_demo.harness import AGENT_TOKEN, NODE, Harness, harness, kill, run_pod

pytestmark = pytest.mark.kernel
pytest.importorskip("cryptography")

LIMIT = 96 * 1024 * 1024
#: Holds 30 MiB, says so, waits for a line on stdin, then allocates until the limit kills it.
HOG = (
    "import sys\n"
    "held = [bytearray(30 << 20)]\n"
    "held[0][::4096] = b'x' * len(held[0][::4096])\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "while True:\n"
    "    b = bytearray(8 << 20); b[::4096] = b'x' * len(b[::4096]); held.append(b)\n"
)


def _kernel_ready() -> str | None:
    if not sandbox.V1_ROOT.is_dir() or not os.access(sandbox.V1_ROOT, os.W_OK):
        return f"needs a writable cgroup v1 memory hierarchy at {sandbox.V1_ROOT} (root)"
    try:
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
    except OSError as exc:
        return f"needs a readable /dev/kmsg: {exc}"
    return None


@pytest.fixture
def kubepods() -> Iterator[Path]:
    """A private ``kubepods/burstable`` tree under the real memory hierarchy, removed afterwards."""
    why = _kernel_ready()
    if why:
        pytest.skip(why)
    top = sandbox.V1_ROOT / f"podmortem-e2e-{uuid.uuid4().hex[:8]}"
    burstable = top / "kubepods" / "burstable"
    burstable.mkdir(parents=True)
    try:
        yield burstable
    finally:
        for directory in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if directory.is_dir() and (directory / "cgroup.procs").exists():
                for pid in (directory / "cgroup.procs").read_text().split():
                    with _suppress():
                        os.kill(int(pid), signal.SIGKILL)
                _rmdir(directory)
        _rmdir(top / "kubepods")
        _rmdir(top)


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def _rmdir(path: Path) -> None:
    deadline = time.monotonic() + 10
    while path.exists():
        try:
            path.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture
def cluster(tmp_path: Path, pki: Pki) -> Iterator[Harness]:
    tokens = {"admin", "operator", "agent"}
    with harness(tmp_path / "cluster", pki=pki, tokens=tokens, admin_token="admin") as h:
        h.add_agent_pod()
        yield h


def login(mode: str, *, who: str, h: Harness, pki: Pki, tmp: Path) -> tuple[list[str], dict[str, str]]:
    """How ``who`` finds the API: a ``--kubeconfig`` flag, or the pod's service-account files."""
    if mode == "kubeconfig":
        config = ep.write_kubeconfig(tmp / f"{who}.kubeconfig", server=h.url, token=who, ca_pem=pki.ca_pem)
        return ["--kubeconfig", str(config)], {}
    account = ep.service_account_dir(tmp / f"{who}-sa", token=who, pki=pki)
    return [], ep.in_cluster_env(h.url, account)


@pytest.mark.parametrize("mode", ["kubeconfig", "in-cluster"])
def test_a_real_oom_kill_reaches_the_report(cluster: Harness, pki: Pki, kubepods: Path,
                                            tmp_path: Path, mode: str) -> None:
    h = cluster
    token_file = tmp_path / "agent-token"
    token_file.write_text(AGENT_TOKEN)
    agent_port = ep.free_port()
    agent_login, agent_login_env = login(mode, who="agent", h=h, pki=pki, tmp=tmp_path)
    agent_env = ep.clean_env(tmp_path, PODMORTEM_KERNEL_LOG_SOURCE="kmsg", **agent_login_env)
    agent = ep.start(["agent", *agent_login, "--node-name", NODE,
                      "--cgroup-root", "/sys/fs/cgroup", "--proc-root", "/proc",
                      "--state-dir", str(tmp_path / "agent-state"), "--token-file", str(token_file),
                      "--host", "127.0.0.1", "--port", str(agent_port), "--metrics-port", "0",
                      "--interval", "0.5", "--pod-refresh", "0.5"],
                     env=agent_env, log=tmp_path / "agent.log")
    operator_login, operator_login_env = login(mode, who="operator", h=h, pki=pki, tmp=tmp_path)
    operator_env = ep.operator_env(h, tmp_path, PODMORTEM_AGENT_PORT=str(agent_port), **operator_login_env)
    operator = ep.start(["operator", *operator_login], env=operator_env, log=tmp_path / "operator.log")
    hog: subprocess.Popen[bytes] | None = None
    try:
        agent.wait_http(f"http://127.0.0.1:{agent_port}/readyz")
        operator.wait_http(f"http://127.0.0.1:{operator_env['PODMORTEM_HEALTH_PORT']}/readyz")

        h.create(ep.TJ_PATH, {
            "apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "real-oom", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "pointgroup:1"}]}}},
        })
        uid = run_pod(h, name="real-oom-train")
        emulated = h.sync(lambda: h.api.pods["default", "real-oom-train"])
        container_id = emulated.containers["trainer"].current.container_id.split("://", 1)[-1]
        container = kubepods / f"pod{uid}" / container_id
        container.mkdir(parents=True)
        (container / "memory.limit_in_bytes").write_text(str(LIMIT))

        # The agent finds the pod in the API and its cgroup on the host before the kill.
        agent.wait_log(f"watching pod default/real-oom-train ({uid})")
        procs = container / "cgroup.procs"
        hog = subprocess.Popen(["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs),
                                sys.executable, "-c", HOG],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert hog.stdout is not None and hog.stdin is not None
        assert hog.stdout.readline().strip() == b"ready"
        time.sleep(1.5)  # a sample or two of the pod while it holds 30 MiB
        hog.stdin.write(b"go\n")
        hog.stdin.flush()
        assert hog.wait(timeout=60) == -signal.SIGKILL, "the kernel did not OOM-kill the hog"
        kill(h, name="real-oom-train")  # what the kubelet reports: exit 137, OOMKilled

        def attached() -> dict[str, Any] | None:
            status = (h.get(f"{ep.TJ_PATH}/real-oom") or {}).get("status", {})
            report = status.get("failureReport")
            return report if report and report["evidence"]["kernelRecord"]["state"] == "attached" else None

        report = h.wait(attached, what="the report with the kernel's record", timeout=90)
        assert report["verdict"] == "memcg-limit", report
        record = report["evidence"]["kernelRecord"]
        text = str(record) + str(report)
        assert str(hog.pid) in text, f"the report does not name the killed pid {hog.pid}: {report}"
        assert report["evidence"]["agent"] == "ok"
    finally:
        if hog is not None:
            if hog.poll() is None:
                hog.kill()
                hog.wait()
            for stream in (hog.stdin, hog.stdout):
                if stream is not None:
                    stream.close()
        operator.stop()
        agent.stop()
