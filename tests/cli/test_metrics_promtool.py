"""``promtool check metrics`` on what the started ``podmortem operator`` and ``podmortem agent`` serve.

tests/chart/test_chart_monitoring.py lints the registries' text in-process;
here the processes run as in a pod (a kubeconfig over TLS, free ports), the
operator reports an OOM kill first so its labelled series have children, and
the text linted is what a Prometheus scrape of ``/metrics`` gets.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli import entrypoints as ep

from podmortem_demo.emulated.tls import Pki, make_pki
from podmortem_demo.harness import AGENT_TOKEN, NODE, Harness, harness

pytest.importorskip("cryptography")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (Debian package prometheus; hack/ci-install.sh installs it)",
)


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture
def cluster(tmp_path: Path, pki: Pki) -> Iterator[Harness]:
    with harness(tmp_path / "cluster", pki=pki, tokens={"admin", "operator", AGENT_TOKEN},
                 admin_token="admin") as h:
        h.add_agent_pod()
        yield h


def promtool_check(text: str) -> tuple[int, str]:
    assert PROMTOOL is not None
    run = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True,
                         timeout=30)
    return run.returncode, run.stdout + run.stderr


def our_problems(output: str) -> list[str]:
    """promtool's lint lines about podmortem's own metrics (Python's process_/python_ ones are not ours)."""
    return [line for line in output.splitlines() if line.startswith("podmortem_")]


def test_the_processes_metrics_pass_promtool(cluster: Harness, pki: Pki, tmp_path: Path) -> None:
    h = cluster
    operator_config = ep.write_kubeconfig(tmp_path / "operator.kubeconfig", server=h.url, token="operator",
                                          ca_pem=pki.ca_pem)
    env = ep.operator_env(h, tmp_path)
    operator = ep.start(["operator", "--kubeconfig", str(operator_config)], env=env,
                        log=tmp_path / "operator.log")
    agent_config = ep.write_kubeconfig(tmp_path / "agent.kubeconfig", server=h.url, token=AGENT_TOKEN,
                                       ca_pem=pki.ca_pem)
    agent_port, agent_metrics = ep.free_port(), ep.free_port()
    agent = ep.start(["agent", "--kubeconfig", str(agent_config), "--node-name", NODE,
                      "--cgroup-root", "/sys/fs/cgroup",
                      "--state-dir", str(tmp_path / "agent-state"),
                      "--kernel-log-source", "off", "--host", "127.0.0.1", "--port", str(agent_port),
                      "--metrics-port", str(agent_metrics), "--interval", "0.5", "--pod-refresh", "0.5"],
                     env=ep.clean_env(tmp_path), log=tmp_path / "agent.log")
    try:
        operator.wait_http(f"http://127.0.0.1:{env['PODMORTEM_HEALTH_PORT']}/readyz")
        agent.wait_http(f"http://127.0.0.1:{agent_port}/readyz")
        report = ep.follow_to_report(h, "linted")  # an OOM kill: the labelled counters get children
        assert report["verdict"] == "memcg-limit"

        _, operator_text = operator.wait_http(f"http://127.0.0.1:{env['PODMORTEM_METRICS_PORT']}/metrics",
                                              contains="podmortem_oom_kills_total{")
        _, agent_text = agent.wait_http(f"http://127.0.0.1:{agent_metrics}/metrics",
                                        contains='podmortem_agent_sample_gaps_total{reason="cgroup-unknown"}')
    finally:
        operator.stop()
        agent.stop()

    # Labelled children exist: the lint sees real series, not only HELP/TYPE lines.
    assert re.search(r'^podmortem_oom_kills_total\{[^}]*namespace="default"', operator_text, re.M), \
        operator_text
    # The agent watches the training pod but has no cgroup of it on this host: its per-pod gauges
    # stay childless (HELP/TYPE only), its gap counter is labelled.
    assert "podmortem_agent_watched_pods 1.0" in agent_text, agent_text
    for name, text in (("operator", operator_text), ("agent", agent_text)):
        rc, output = promtool_check(text)
        assert rc == 0, f"{name}: promtool check metrics exit {rc}:\n{output}"
        assert our_problems(output) == [], f"{name}: promtool lint:\n{output}"
