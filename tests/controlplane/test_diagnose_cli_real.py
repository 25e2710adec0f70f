"""``podmortem diagnose pod/NAME`` as a user runs it (a process, a kubeconfig) against the real control plane.

A bare pod runs on a kwok node, prints a few lines (kwok serves them through the API server's log
proxy) and is OOM-killed: its status says ``OOMKilled``, exit 137, as the kubelet writes it through
the status subresource. The command reads it with a ServiceAccount's token that holds only what
its docstring says it needs (get pods and pods/log, list pods and Events), so the real RBAC
decides each read, and the report must name the OOM kill.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from tests.controlplane._release import kubelet_kill
from tests.controlplane.cluster import ControlPlane, cri_line
from tests.controlplane.test_logs_cli_real import grant

PODMORTEM = str(Path(sys.executable).with_name("podmortem"))
CONTAINER = "trainer"
#: What ``podmortem diagnose pod/NAME`` says it needs (podmortem.cli.diagnose_cluster).
READER_RULES = [
    {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
]


def reader_kubeconfig(plane: ControlPlane, namespace: str, tmp: Path) -> Path:
    name = "diagnoser"
    plane.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
    )
    grant(plane, namespace=namespace, account_ns=namespace, account=name, name=name, rules=READER_RULES)
    return plane.service_account_kubeconfig(tmp / "diagnoser.kubeconfig", namespace=namespace, name=name)


def oom_killed_pod(plane: ControlPlane, namespace: str) -> str:
    """A bare pod that ran, printed its last lines and was OOM-killed; its name."""
    name = f"trainer-{uuid.uuid4().hex[:5]}"
    plane.serve_logs(namespace, name, [CONTAINER])
    with plane.pod_log_file(namespace, name, CONTAINER).open("a") as log:
        for line in ("epoch 1 loss 0.93", "epoch 2 loss 0.71", "allocating the next batch"):
            log.write(cri_line(line))
    plane.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                 "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                          "containers": [{"name": CONTAINER, "image": "registry.example.com/trainer:1.0",
                                          "resources": {"limits": {"memory": "1Gi"}}}]}})

    def running() -> dict[str, Any] | None:
        body = plane.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return body if body and body.get("status", {}).get("phase") == "Running" else None

    plane.give_container_ids(plane.wait(running, what=f"kwok running pod {name}", timeout=120))
    kubelet_kill(plane, namespace=namespace, pod=name)
    return name


def diagnose(kubeconfig: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    return subprocess.run([PODMORTEM, "diagnose", *argv, "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)


def test_diagnose_names_the_oom_kill_of_a_pod_read_from_the_real_api(
        control_plane: ControlPlane, namespace: str, tmp_path: Path) -> None:
    name = oom_killed_pod(control_plane, namespace)
    kubeconfig = reader_kubeconfig(control_plane, namespace, tmp_path)

    as_json = diagnose(kubeconfig, f"pod/{name}", "--json")
    assert as_json.returncode == 0, as_json.stderr
    reports = json.loads(as_json.stdout)["reports"]
    assert len(reports) == 1, reports
    report = reports[0]
    assert report["pod"]["name"] == name and report["pod"]["namespace"] == namespace
    assert report["pod"]["exitCode"] == 137
    assert report["verdict"] == "memcg-limit"
    assert report["evidence"]["log"]["lines"] == 3  # the log tail came through the API server's log proxy
    assert "forbidden" not in as_json.stderr.lower(), as_json.stderr  # the documented rights are enough

    text = diagnose(kubeconfig, f"pod/{name}", "-n", namespace)
    assert text.returncode == 0, text.stderr
    assert "137" in text.stdout and "OOM" in text.stdout, text.stdout


def test_diagnose_of_a_pod_that_is_not_there_is_one_line(
        control_plane: ControlPlane, namespace: str, tmp_path: Path) -> None:
    kubeconfig = reader_kubeconfig(control_plane, namespace, tmp_path)
    done = diagnose(kubeconfig, "pod/no-such-pod")
    assert done.returncode != 0 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "no-such-pod" in done.stderr, done.stderr
