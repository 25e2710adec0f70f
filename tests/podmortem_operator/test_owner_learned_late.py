"""A pod handled before any followed owner of it was known is handled again once one is.

kopf lists pods and jobs each on its own: at an operator's start the pods' list can be handled
before the jobs', and a pod that ended while the operator was down was then dropped for good (seen
once as a flake of `test_hostile_annotation_e2e`, 1 in 25 runs). Here the order is made certain:
the job is watched only after its pod has ended and been seen.
"""

from __future__ import annotations

import json

from podmortem_demo.harness import Harness, kill, run_pod

from .test_operator_e2e import evidence_for


def test_a_pod_that_ended_before_its_job_was_followed_is_reported_once_it_is(agent_cluster: Harness) -> None:
    h = agent_cluster
    job = h.create("/apis/batch/v1/namespaces/default/jobs", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "late", "namespace": "default"},  # not watched yet
        "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}},
    })
    h.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "late-abcde", "namespace": "default",
                     "annotations": {"big": "x" * 100_000, "batch.kubernetes.io/job-completion-index": "0"},
                     "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": "late", "uid": job["metadata"]["uid"],
            "controller": True,
        }]},
        "spec": {"containers": [{"name": "trainer", "image": "x"}]},
    })
    uid = run_pod(h, name="late-abcde")
    h.sync(lambda: h.agent.evidence.__setitem__(uid, evidence_for(uid, "02-k8s-v1-syslog-kmem-runc-el7.log")))
    kill(h, name="late-abcde")
    service = h.running[0].service
    h.wait(lambda: uid in service._unowned, what="the operator to see the ended pod of an unknown owner")
    kept = service._unowned[uid]["metadata"]["annotations"]  # bounded: the long value is left out
    assert kept == {"batch.kubernetes.io/job-completion-index": "0"}

    h.patch("/apis/batch/v1/namespaces/default/jobs/late",
            {"metadata": {"annotations": {"podmortem.io/watch": "true"}}})

    def report() -> dict[str, object] | None:
        obj = h.get("/apis/batch/v1/namespaces/default/jobs/late") or {}
        raw = obj.get("metadata", {}).get("annotations", {}).get("podmortem.io/failure-report")
        return json.loads(raw) if raw else None

    summary = h.wait(report, what="the report of the pod that ended before its job was followed")
    assert summary["verdict"] == "memcg-limit"
    assert uid not in service._unowned
