"""``podmortem operator`` and ``podmortem agent`` raise their soft open-files limit to the hard one.

Started under ``prlimit`` with the limits containerd 2.0 gives a container (soft 1,024, hard
524,288, or this machine's hard limit where it is lower), the process's own
``/proc/PID/limits`` shows the soft limit raised once it is ready, and the log says both. With
soft = hard there is nothing to raise: the log says so and the process is ready all the same.
"""

from __future__ import annotations

import resource
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli import entrypoints as ep

from podmortem_demo.emulated.tls import Pki, make_pki
from podmortem_demo.harness import NODE, Harness, harness

pytest.importorskip("cryptography")
PRLIMIT = shutil.which("prlimit")
pytestmark = pytest.mark.skipif(PRLIMIT is None, reason="util-linux's prlimit is not installed")

#: containerd 2.0's hard limit for containers; lower here when this process's own hard limit is.
HARD = min(524_288, resource.getrlimit(resource.RLIMIT_NOFILE)[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Harness, Pki]]:
    pki = make_pki()
    tmp = tmp_path_factory.mktemp("nofile")
    with harness(tmp, pki=pki, tokens={"admin", "op"}, admin_token="admin") as h:
        h.add_agent_pod()
        yield h, pki


def _soft_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no 'Max open files' line")


def _limited(soft: int, hard: int, *command: str) -> list[str]:
    assert PRLIMIT is not None
    return [PRLIMIT, f"--nofile={soft}:{hard}", ep.PODMORTEM, *command]


@pytest.mark.parametrize("soft", [1024, HARD], ids=["containerd-soft-1024", "soft-equals-hard"])
def test_the_operator_raises_its_soft_limit_to_the_hard_one(
    cluster: tuple[Harness, Pki], tmp_path: Path, soft: int
) -> None:
    h, pki = cluster
    kubeconfig = ep.write_kubeconfig(tmp_path / "kubeconfig", server=h.url, token="op", ca_pem=pki.ca_pem)
    env = ep.operator_env(h, tmp_path)
    p = ep.Process(_limited(soft, HARD, "operator", "--kubeconfig", str(kubeconfig)), env,
                   tmp_path / "operator.log").start()
    try:
        _, ready = p.wait_http(f"http://127.0.0.1:{env['PODMORTEM_HEALTH_PORT']}/readyz")
        assert _soft_limit(p.proc.pid) == HARD
        assert f" of {HARD:,}" in ready and "open files " in ready  # the headroom, in readiness
        assert "(low" not in ready
        if soft < HARD:
            assert f"open files: soft limit {soft:,} raised to {HARD:,} (hard {HARD:,})" in p.output()
        else:
            assert f"open files: soft limit {HARD:,} (hard {HARD:,})" in p.output()
    finally:
        assert p.stop() == 0


def test_the_agent_raises_its_soft_limit_too(cluster: tuple[Harness, Pki], tmp_path: Path) -> None:
    h, pki = cluster
    config = ep.write_kubeconfig(tmp_path / "k", server=h.url, token="admin", ca_pem=pki.ca_pem)
    port = ep.free_port()
    p = ep.Process(_limited(1024, HARD, "agent", "--node-name", NODE, "--cgroup-root", "/sys/fs/cgroup",
                            "--state-dir", str(tmp_path / "state"), "--kernel-log-source", "off",
                            "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "0",
                            "--kubeconfig", str(config)),
                   ep.clean_env(tmp_path), tmp_path / "agent.log").start()
    try:
        p.wait_http(f"http://127.0.0.1:{port}/readyz")
        assert _soft_limit(p.proc.pid) == HARD
        assert f"open files: soft limit 1,024 raised to {HARD:,} (hard {HARD:,})" in p.output()
    finally:
        assert p.stop() == 0


def test_readiness_says_when_descriptors_run_low(monkeypatch: pytest.MonkeyPatch) -> None:
    from podmortem import open_files

    monkeypatch.setattr(open_files, "in_use", lambda: (1000, 1024))
    assert open_files.headroom() == (
        "open files 1,000 of 1,024 (low: followers that run out wait and resume; raise the hard limit)")
    monkeypatch.setattr(open_files, "in_use", lambda: (300, 524_288))
    assert open_files.headroom() == "open files 300 of 524,288"
