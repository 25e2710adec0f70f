"""Sidecar mode end to end: the real operator with no node agent, and a real kill's sidecar evidence.

On the real kernel, as `tests/sidecar/test_sidecar_kernel.py` runs them: a trainer with a forked worker
in a capped memory cgroup is OOM-killed while ``podmortem sidecar`` (a separate process of the same
unprivileged user) watches it and writes its termination message. The emulated cluster plays the
kubelet's part, which this machine cannot: the pod (annotated, the sidecar in its init containers)
gets the trainer's OOMKilled status and the sidecar's message, as the kubelet copies it into
``initContainerStatuses[].state.terminated.message``. The operator runs with the agent disabled.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.sidecar import pod as sidecar_pod

from podmortem.diagnosis.termination import SIDECAR_CONTAINER
from podmortem.operator.settings import AgentAccessSettings, SidecarInjectionSettings
from podmortem_demo import sandbox
from podmortem_demo.harness import Harness, harness, run_pod

from .test_operator_e2e import TJ_PATH, trainingjob

pytestmark = pytest.mark.kernel

LIMIT = 160 * sidecar_pod.MIB


@pytest.fixture
def message() -> Iterator[str]:
    """The termination message the sidecar wrote for a real OOM kill."""
    reason = sidecar_pod.why_not()
    if reason is not None:
        pytest.skip(reason)
    home = sidecar_pod.user_dir("podmortem-sidecar-e2e-")
    log, out = home / "sidecar.log", home / "termination-log"
    try:
        with sandbox.MemoryCgroup(limit_bytes=LIMIT, prefix="podmortem-sidecar-e2e") as cgroup:
            trainer, _ = sidecar_pod.start_trainer(cgroup, trainer_mib=40, worker_mib=24)
            sidecar: subprocess.Popen[bytes] | None = None
            try:
                with log.open("wb") as sink:
                    sidecar = subprocess.Popen(sidecar_pod.sidecar_args(
                        termination_log=out, container_cgroup=sidecar_pod.cgroup_line(trainer.pid),
                        interval=0.2), stdout=sink, stderr=subprocess.STDOUT)
                deadline = time.monotonic() + 60
                while "trainer container found" not in log.read_text():
                    assert sidecar.poll() is None and time.monotonic() < deadline, log.read_text()
                    time.sleep(0.05)
                time.sleep(0.5)  # a few samples with both processes holding their memory
                sidecar_pod.go(trainer)
                assert trainer.wait(timeout=60) == -9
                assert sidecar.wait(timeout=60) == 0, log.read_text()
            finally:
                for proc in (trainer, sidecar):
                    if proc is not None and proc.poll() is None:
                        proc.kill()
                        proc.wait()
                for pipe in (trainer.stdin, trainer.stdout):
                    if pipe is not None:
                        pipe.close()
        yield out.read_text()
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def no_agent(tmp_path: Path) -> Iterator[Harness]:
    with harness(tmp_path) as h:
        settings = h.settings(log_http_auth=False, patch_pods=True, agent=AgentAccessSettings(enabled=False))
        h.start_operator(settings)
        yield h
        assert h.operator_error is None, h.operator_error


def test_a_pod_with_the_sidecar_and_no_agent_gets_a_report_of_its_containers_limit(
    message: str, no_agent: Harness
) -> None:
    h = no_agent
    h.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sidecar-mode", "namespace": "default",
                     "annotations": {"podmortem.io/watch": "true"}},
        "spec": {"shareProcessNamespace": True,
                 "initContainers": [
                     {"name": SIDECAR_CONTAINER, "image": "podmortem", "restartPolicy": "Always"}],
                 "containers": [{"name": "trainer", "image": "x"}]},
    })
    run_pod(h, name="sidecar-mode")
    pod = h.get("/api/v1/namespaces/default/pods/sidecar-mode") or {}
    [trainer] = pod["status"]["containerStatuses"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    terminated = {"exitCode": 137, "reason": "OOMKilled", "containerID": trainer["containerID"],
                  "startedAt": "2024-05-01T10:00:00Z", "finishedAt": now}
    h.patch("/api/v1/namespaces/default/pods/sidecar-mode", {"status": {
        "phase": "Failed",
        "containerStatuses": [{**trainer, "state": {"terminated": terminated}}],
        "initContainerStatuses": [{"name": SIDECAR_CONTAINER, "containerID": "containerd://side", "state": {
            "terminated": {"exitCode": 0, "reason": "Completed", "message": message, "finishedAt": now}}}],
    }})

    def report() -> dict[str, Any] | None:  # the report as its page serves it (the annotation's form)
        status, body = h.http_get(f"{h.running[0].log_url}/reports/default/sidecar-mode?format=json")
        doc = json.loads(body) if status == 200 else None
        return doc if doc and any(f["code"] == "sidecar-evidence" for f in doc["findings"]) else None

    summary = h.wait(report, what="the report made from the sidecar's evidence", timeout=30)
    codes = [f["code"] for f in summary["findings"]]
    assert summary["verdict"] == "memcg-limit" and codes[0] == "memcg-limit", codes
    evidence = json.loads(message)
    assert summary["kill"]["pid"] == evidence["kill"]["victim"]["pid"]
    cause = summary["findings"][0]["message"]
    assert "reached its own memory limit of 160.0 MiB" in cause and "OOM-kill counter go from 0 to 1" in cause
    assert "anon-dominant" in codes and "fork-copies" in codes, codes
    assert summary["kernelRecord"] == "not-sought"



@pytest.fixture
def no_agent_sidecar_on(tmp_path: Path) -> Iterator[Harness]:
    with harness(tmp_path) as h:
        settings = h.settings(log_http_auth=False, agent=AgentAccessSettings(enabled=False),
                              sidecar=SidecarInjectionSettings(trainingjobs=True, image="podmortem:test"))
        h.start_operator(settings)
        yield h
        assert h.operator_error is None, h.operator_error


def test_a_trainingjob_gets_the_sidecar_and_its_report_names_the_containers_limit(
    message: str, no_agent_sidecar_on: Harness
) -> None:
    """The chart's sidecar.enabled with the agent off: the operator adds the sidecar to the pod it makes,
    and the job's status gets the report from the sidecar's evidence of a real kill."""
    h = no_agent_sidecar_on
    template = {"spec": {"securityContext": {"runAsUser": 1000, "runAsNonRoot": True},
                         "containers": [{"name": "trainer", "image": "pointgroup:1"}]}}
    h.create(TJ_PATH, trainingjob("sidecar-tj", template=template))
    pod = h.wait(lambda: h.get("/api/v1/namespaces/default/pods/sidecar-tj-train"), what="the training pod")
    [side] = [c for c in pod["spec"].get("initContainers", []) if c["name"] == SIDECAR_CONTAINER]
    assert pod["spec"]["shareProcessNamespace"] is True and side["restartPolicy"] == "Always"
    assert side["image"] == "podmortem:test" and side["securityContext"]["runAsUser"] == 1000

    run_pod(h, name="sidecar-tj-train")
    running = h.get("/api/v1/namespaces/default/pods/sidecar-tj-train") or {}
    trainer = running["status"]["containerStatuses"][0]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    h.patch("/api/v1/namespaces/default/pods/sidecar-tj-train", {"status": {
        "phase": "Failed",
        "containerStatuses": [{**trainer, "state": {"terminated": {
            "exitCode": 137, "reason": "OOMKilled", "containerID": trainer["containerID"],
            "startedAt": "2024-05-01T10:00:00Z", "finishedAt": now}}}],
        "initContainerStatuses": [{"name": SIDECAR_CONTAINER, "containerID": "containerd://side", "state": {
            "terminated": {"exitCode": 0, "reason": "Completed", "message": message, "finishedAt": now}}}],
    }})

    def report() -> dict[str, Any] | None:
        status = (h.get(f"{TJ_PATH}/sidecar-tj") or {}).get("status") or {}
        doc = status.get("failureReport")
        return doc if doc and any(f["code"] == "sidecar-evidence" for f in doc.get("findings", [])) else None

    doc = h.wait(report, what="the TrainingJob's report from the sidecar's evidence", timeout=30)
    codes = [f["code"] for f in doc["findings"]]
    assert doc["verdict"] == "memcg-limit" and {"anon-dominant", "fork-copies"} <= set(codes), codes
    assert doc["findings"][0]["evidence"]["limit_bytes"] == LIMIT
    assert doc["evidence"]["sidecar"]["state"] == "attached"
    assert "not available in sidecar mode" in doc["evidence"]["kernelRecord"]["note"]
