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
    try:
        with sandbox.MemoryCgroup(limit_bytes=LIMIT, prefix="podmortem-sidecar-e2e") as cgroup:
            kill = sidecar_pod.kill_watched(cgroup, home, trainer_mib=40, worker_mib=24, interval=0.2,
                                            settle_s=0.5)  # a few samples with both holding memory
        yield kill.message
    finally:
        shutil.rmtree(home, ignore_errors=True)


def oom_killed_with_message(h: Harness, name: str, message: str) -> None:
    """What the kubelet reports of the pod: the trainer OOMKilled, the sidecar ended with its message."""
    pod = h.get(f"/api/v1/namespaces/default/pods/{name}") or {}
    [trainer] = pod["status"]["containerStatuses"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    terminated = {"exitCode": 137, "reason": "OOMKilled", "containerID": trainer["containerID"],
                  "startedAt": "2024-05-01T10:00:00Z", "finishedAt": now}
    side = {"exitCode": 0, "reason": "Completed", "message": message, "finishedAt": now}
    h.patch(f"/api/v1/namespaces/default/pods/{name}", {"status": {
        "phase": "Failed",
        "containerStatuses": [{**trainer, "state": {"terminated": terminated}}],
        "initContainerStatuses": [
            {"name": SIDECAR_CONTAINER, "containerID": "containerd://side", "state": {"terminated": side}}],
    }})


@pytest.fixture
def no_agent(tmp_path: Path) -> Iterator[Harness]:
    with harness(tmp_path) as h:
        settings = h.settings(log_http_auth=False, patch_pods=True, agent=AgentAccessSettings(enabled=False),
                              sidecar=SidecarInjectionSettings(image="podmortem"))
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
                     {"name": SIDECAR_CONTAINER, "image": "podmortem", "restartPolicy": "Always",
                      "command": ["podmortem", "sidecar"]}],
                 "containers": [{"name": "trainer", "image": "x"}]},
    })
    run_pod(h, name="sidecar-mode")
    oom_killed_with_message(h, "sidecar-mode", message)

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
    oom_killed_with_message(h, "sidecar-tj-train", message)

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
