"""The resources the operator, the agent and kubectl use, declared once for every emulated cluster.

kmock serves only what is declared; the demo, the test harness and the
benchmarks all declare the same table through :func:`declare`.
"""

from __future__ import annotations

import kmock

from podmortem.operator.settings import (
    TRAININGJOB_GROUP,
    TRAININGJOB_KIND,
    TRAININGJOB_PLURAL,
    TRAININGJOB_VERSION,
)

VERBS = frozenset({"get", "list", "watch", "create", "patch", "update", "delete"})


def declare(api: kmock.KubernetesEmulator) -> None:
    """TrainingJobs, pods (status, log), batch Jobs, PyTorchJobs, JobSets, namespaces, Leases and Events."""
    verbs = set(VERBS)
    api.resources[f"{TRAININGJOB_GROUP}/{TRAININGJOB_VERSION}/{TRAININGJOB_PLURAL}"] = kmock.ResourceInfo(
        kind=TRAININGJOB_KIND, singular="trainingjob", shortnames={"tj"}, namespaced=True,
        subresources={"status"}, verbs=verbs,
    )
    api.resources["v1/pods"] = kmock.ResourceInfo(
        kind="Pod", singular="pod", shortnames={"po"}, namespaced=True, subresources={"status", "log"},
        verbs=verbs,
    )
    api.resources["batch/v1/jobs"] = kmock.ResourceInfo(
        kind="Job", singular="job", namespaced=True, verbs=verbs,
    )
    # Multi-pod training jobs of the Kubeflow training operator (a foreign kind by default).
    api.resources["kubeflow.org/v1/pytorchjobs"] = kmock.ResourceInfo(
        kind="PyTorchJob", singular="pytorchjob", namespaced=True, verbs=verbs,
    )
    # JobSets (sigs.k8s.io/jobset): pod -> child Job -> JobSet, a foreign kind when configured.
    api.resources["jobset.x-k8s.io/v1alpha2/jobsets"] = kmock.ResourceInfo(
        kind="JobSet", singular="jobset", namespaced=True, verbs=verbs,
    )
    # kopf waits for namespaces to be discoverable even when it watches the whole cluster.
    api.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", singular="namespace", shortnames={"ns"}, namespaced=False,
        verbs={"get", "list", "watch", "create", "patch"},
    )
    api.resources["coordination.k8s.io/v1/leases"] = kmock.ResourceInfo(
        kind="Lease", singular="lease", namespaced=True, verbs=verbs,
    )
    api.resources["v1/events"] = kmock.ResourceInfo(
        kind="Event", singular="event", shortnames={"ev"}, namespaced=True, verbs={"create", "list", "get"},
    )
