"""Start ``podmortem operator`` and ``podmortem agent`` as a user or a pod would: a process, a command line,
an environment, and nothing else.

No test hook reaches into these processes: they find the API through a
kubeconfig or the service-account files, as in a cluster, and the tests see
only what a user sees (``/readyz``, ``/metrics``, the log, the objects in the API).
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from podmortem.kernel import oom_parser
from podmortem_demo.emulated.tls import Pki
from podmortem_demo.harness import AGENT_LABELS, AGENT_NS, AGENT_TOKEN, Harness, evidence_for, kill, run_pod

#: The ``podmortem`` console script of the environment running the tests (what ``pip install`` made).
PODMORTEM = str(Path(sys.executable).with_name("podmortem"))
RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"
TJ_PATH = "/apis/podmortem.io/v1alpha1/namespaces/default/trainingjobs"
#: Variables that would point a process at some other cluster.
_FOREIGN_ENV = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


#: Ports this test process has handed out: the kernel may give the same free port to two binds in a
#: row, and two of a process's ports the same number stop it at start (metrics and health, once).
_GIVEN: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now, and not one this test process handed out before."""
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port
    raise RuntimeError("no free port that was not handed out already")


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without any pointer to a cluster or podmortem setting, ``HOME`` at ``home``."""
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_ENV and not k.startswith("PODMORTEM_")}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env


def write_kubeconfig(path: Path, *, server: str, token: str, ca_pem: bytes | None,
                     namespace: str = "default") -> Path:
    """A kubeconfig as a cluster admin hands it out: server, CA data and a bearer token."""
    cluster: dict[str, object] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": cluster}],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [{"name": "test",
                      "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
    }))
    return path


def service_account_dir(path: Path, *, token: str, pki: Pki, namespace: str = "podmortem") -> Path:
    """The files the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "token").write_text(token)
    (path / "ca.crt").write_bytes(pki.ca_pem)
    (path / "namespace").write_text(namespace)
    return path


def in_cluster_env(url: str, account: Path) -> dict[str, str]:
    """What a pod's environment says about the API, plus where (in tests) its service account files are."""
    host_port = url.split("://", 1)[1]
    host, _, port = host_port.rpartition(":")
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
            "PODMORTEM_SERVICE_ACCOUNT_DIR": str(account)}


def http_get(url: str, *, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return 0, str(exc)


@dataclass
class Process:
    """A started ``podmortem`` command; its combined output goes to a file the test can read."""

    argv: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] = field(init=False)

    def start(self) -> Process:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_http(self, url: str, *, status: int = 200, contains: str = "", timeout: float = 60.0
                  ) -> tuple[int, str]:
        """Poll ``url`` until it answers ``status`` (and ``contains``); fail with the log if it never does."""
        deadline = time.monotonic() + timeout
        last: tuple[int, str] = (0, "")
        while time.monotonic() < deadline:
            if not self.alive():
                raise AssertionError(
                    f"{self.argv[1]} exited {self.proc.returncode}:\n{self.output()[-4000:]}")
            last = http_get(url)
            if last[0] == status and contains in last[1]:
                return last
            time.sleep(0.2)
        raise AssertionError(f"{url} never answered {status} {contains!r}; last {last!r}\n"
                             f"--- log ---\n{self.output()[-4000:]}")

    def wait_log(self, text: str, *, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.output()
            if text in out:
                return out
            if not self.alive():
                break
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared in the log:\n{self.output()[-4000:]}")

    def stop(self, *, timeout: float = 30.0) -> int:
        """SIGTERM, as the kubelet stops a pod; the exit code."""
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return int(self.proc.returncode)


def start(command: Sequence[str], *, env: Mapping[str, str], log: Path) -> Process:
    """``podmortem COMMAND...`` with exactly ``env``."""
    return Process([PODMORTEM, *command], dict(env), log).start()


def operator_env(h: Harness, tmp: Path, **extra: str) -> dict[str, str]:
    """The chart's kind of environment for the operator, with free ports and the agent double."""
    token_file = tmp / "agent-token"
    token_file.write_text(AGENT_TOKEN)
    settings = dict(
        PODMORTEM_LOG_STORE_DIR=str(tmp / "store"),
        PODMORTEM_HTTP_PORT=str(free_port()),
        PODMORTEM_METRICS_PORT=str(free_port()),
        PODMORTEM_HEALTH_PORT=str(free_port()),
        PODMORTEM_HTTP_AUTH="none",  # the emulated API has no TokenReview; log auth is tested in tests/logs
        PODMORTEM_AGENT_NAMESPACE=AGENT_NS,
        PODMORTEM_AGENT_SELECTOR=",".join(f"{k}={v}" for k, v in AGENT_LABELS.items()),
        PODMORTEM_AGENT_PORT=str(h.agent.port),
        PODMORTEM_AGENT_TOKEN_FILE=str(token_file),
        PODMORTEM_STATUS_REFRESH_SECONDS="0.5",
    )
    return clean_env(tmp, **{**settings, **extra})


def follow_to_report(h: Harness, name: str) -> dict[str, Any]:
    """A TrainingJob whose pod is OOM-killed; the report the operator writes into its status."""
    h.create(TJ_PATH, {
        "apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "pointgroup:1"}]}}},
    })
    h.wait(lambda: h.get(f"/api/v1/namespaces/default/pods/{name}-train"), what="the training pod",
           timeout=60)
    uid = run_pod(h, name=f"{name}-train")
    record = oom_parser.parse_text((RECORDS / "01-k3s-v1-dmesgT-stress-4.15.log").read_text())[0]
    h.sync(lambda: h.agent.evidence.__setitem__(uid, evidence_for(uid, record)))
    kill(h, name=f"{name}-train")

    def attached() -> dict[str, Any] | None:
        report = (h.get(f"{TJ_PATH}/{name}") or {}).get("status", {}).get("failureReport")
        return report if report and report["evidence"]["kernelRecord"]["state"] == "attached" else None

    return h.wait(attached, what=f"{name}'s failure report", timeout=60)
