"""What a followed pod belongs to, and the pod a TrainingJob runs. Pure: dicts in, dicts out.

A report goes to the thing a person looks at: the TrainingJob's status, or,
for a job kind podmortem does not own (batch Job, PyTorchJob) and for a bare
annotated pod, an annotation plus an Event on that object.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from podmortem.kube.api import resource_path
from podmortem.kube.bodies import Body
from podmortem.operator import sidecar_injection
from podmortem.operator.settings import (
    TRAININGJOB_GROUP,
    TRAININGJOB_KIND,
    TRAININGJOB_PLURAL,
    TRAININGJOB_VERSION,
    SidecarInjectionSettings,
)
from podmortem.operator.watch_options import WatchOptions

TRAININGJOB_LABEL = "podmortem.io/trainingjob"
TRAININGJOB_UID_LABEL = "podmortem.io/trainingjob-uid"
POD_SUFFIX = "-train"
MAX_NAME = 253


@dataclass(frozen=True)
class Target:
    """The object a pod's report and warnings are written to."""

    role: Literal["trainingjob", "foreign", "pod"]
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    #: Plural resource name, for the API path.
    plural: str
    options: WatchOptions

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def path(self, subresource: str | None = None) -> str:
        return resource_path(
            self.group, self.version, self.plural, self.namespace, self.name, subresource
        )

    def involved(self) -> dict[str, Any]:
        """The object reference an Event needs."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {"namespace": self.namespace, "name": self.name, "uid": self.uid},
        }

    @classmethod
    def of(
        cls,
        body: Mapping[str, Any],
        *,
        role: Literal["trainingjob", "foreign", "pod"],
        plural: str,
        options: WatchOptions,
    ) -> Target:
        obj = Body(body)
        return cls(
            role=role,
            api_version=str(body.get("apiVersion", "v1")),
            kind=str(body.get("kind", "Pod")),
            namespace=obj.namespace,
            name=obj.name,
            uid=obj.uid,
            plural=plural,
            options=options,
        )


def trainingjob_path(namespace: str, name: str, subresource: str | None = None) -> str:
    return resource_path(
        TRAININGJOB_GROUP, TRAININGJOB_VERSION, TRAININGJOB_PLURAL, namespace, name, subresource
    )


def pod_name(trainingjob_name: str) -> str:
    """The pod's name: stable, so a repeated create is a 409, never a second pod."""
    return trainingjob_name[: MAX_NAME - len(POD_SUFFIX)] + POD_SUFFIX


def template_problems(spec: Mapping[str, Any]) -> list[str]:
    """What makes a TrainingJob's pod template unusable, in words; empty when it looks runnable.

    The CRD schema checks most of this already; this repeats the checks that
    would otherwise surface only as an opaque pod-creation error.
    """
    template = spec.get("template")
    if not isinstance(template, Mapping):
        return ["spec.template is missing: it must hold a pod template with spec.containers"]
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, Mapping):
        return ["spec.template.spec is missing: it must be a PodSpec with containers"]
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return ["spec.template.spec.containers must list at least one container"]
    problems: list[str] = []
    names: set[str] = set()
    for i, c in enumerate(containers):
        if not isinstance(c, Mapping):
            problems.append(f"spec.template.spec.containers[{i}] is not an object")
            continue
        name = c.get("name")
        if not name:
            problems.append(f"spec.template.spec.containers[{i}] has no name")
        elif name in names:
            problems.append(f"spec.template.spec.containers[{i}]: duplicate name {name!r}")
        else:
            names.add(str(name))
        if not c.get("image"):
            problems.append(f"spec.template.spec.containers[{i}] ({name or '?'}) has no image")
    policy = pod_spec.get("restartPolicy")
    if policy not in (None, "Never", "OnFailure"):
        problems.append(f"spec.template.spec.restartPolicy {policy!r}: must be Never or OnFailure")
    return problems


def wants_sidecar(trainingjob: Mapping[str, Any], settings: SidecarInjectionSettings) -> bool:
    """Whether the job's pod gets the sidecar: ``spec.sidecar`` if it says, else the operator's default."""
    asked = (trainingjob.get("spec", {}) or {}).get("sidecar")
    return asked if isinstance(asked, bool) else settings.trainingjobs


def build_pod(
    trainingjob: Mapping[str, Any], *, sidecar: SidecarInjectionSettings | None = None
) -> dict[str, Any]:
    """The pod a TrainingJob runs, owned by it (deleting the job deletes the pod).

    With the sidecar wanted (:func:`wants_sidecar`; ``sidecar`` is the operator's
    ``OperatorSettings.sidecar``) the pod gets it as :func:`sidecar_injection.plan` says;
    a job that says ``spec.sidecar: false`` gets the opt-out annotation, so the admission
    webhook leaves its pod alone too.
    """
    sidecar = sidecar or SidecarInjectionSettings()
    tj = Body(trainingjob)
    spec = tj.spec
    template = copy.deepcopy(dict(spec.get("template") or {}))
    tmeta = dict(template.get("metadata") or {})
    labels = dict(tmeta.get("labels") or {})
    annotations = dict(tmeta.get("annotations") or {})
    name = tj.name
    if len(name) <= 63:
        labels[TRAININGJOB_LABEL] = name
    labels[TRAININGJOB_UID_LABEL] = tj.uid
    pod_spec = dict(template.get("spec") or {})
    pod_spec.setdefault("restartPolicy", "Never")
    if spec.get("sidecar") is False:
        annotations[sidecar_injection.OPT_OUT_KEY] = "false"
    elif wants_sidecar(trainingjob, sidecar):
        pod_spec = sidecar_injection.plan({"metadata": tmeta, "spec": pod_spec}, sidecar).spec
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name),
            "namespace": tj.namespace or None,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": f"{TRAININGJOB_GROUP}/{TRAININGJOB_VERSION}",
                    "kind": TRAININGJOB_KIND,
                    "name": name,
                    "uid": tj.uid or None,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": pod_spec,
    }


def owner_uids(pod: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(uid, kind, name) of the pod's owners."""
    refs = Body(pod).owner_references
    return [(str(r.get("uid", "")), str(r.get("kind", "")), str(r.get("name", ""))) for r in refs]


def trainingjob_owner(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the owning TrainingJob, if a TrainingJob owns this pod."""
    for r in Body(pod).owner_references:
        if r.get("kind") == TRAININGJOB_KIND and str(r.get("apiVersion", "")).startswith(
            TRAININGJOB_GROUP + "/"
        ):
            return str(r.get("name", "")), str(r.get("uid", ""))
    return None
