"""An annotation anyone with `patch` on a job can write is data: the operator's handlers never raise on it.

Before, a ``podmortem.io/failure-report`` annotation nested 1,000 deep (or one whose ``pod`` is
a number) raised RecursionError (AttributeError) out of the pod handler when the job's pod
died, and no report was written.
"""

from __future__ import annotations

import json

import pytest

from podmortem_demo.harness import Harness, kill, run_pod

from .test_operator_e2e import evidence_for


@pytest.mark.parametrize("planted", [
    "[" * 1000 + "]" * 1000,
    json.dumps({"pod": 5, "verdict": "memcg-limit"}),
    json.dumps({"pod": {"uid": ["x"], "containerID": {}}}),
    "{" * 100_000,
])
def test_a_planted_report_annotation_is_replaced_by_the_real_report(
    agent_cluster: Harness, planted: str
) -> None:
    h = agent_cluster
    name = f"planted-{abs(hash(planted)) % 10**6}"
    job = h.create(
        "/apis/batch/v1/namespaces/default/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": "default", "annotations": {
                "podmortem.io/watch": "true", "podmortem.io/failure-report": planted,
            }},
            "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}},
        },
    )
    pod = f"{name}-abcde"
    h.create(
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": "default", "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": name,
                "uid": job["metadata"]["uid"], "controller": True,
            }]},
            "spec": {"containers": [{"name": "trainer", "image": "x"}]},
        },
    )
    uid = run_pod(h, name=pod)
    h.sync(lambda: h.agent.evidence.__setitem__(uid, evidence_for(uid, "02-k8s-v1-syslog-kmem-runc-el7.log")))
    kill(h, name=pod)

    def report() -> dict[str, object] | None:
        obj = h.get(f"/apis/batch/v1/namespaces/default/jobs/{name}") or {}
        raw = obj.get("metadata", {}).get("annotations", {}).get("podmortem.io/failure-report")
        return json.loads(raw) if raw and raw != planted else None

    summary = h.wait(report, what="the report replacing the planted annotation")
    assert summary["verdict"] == "memcg-limit"
    assert h.operator_error is None
