"""Adding ``podmortem sidecar`` to a training pod: the native sidecar and the shared PID namespace. Pure.

One decision for both ways a pod gets the sidecar: the pods the operator creates from
TrainingJobs (:func:`podmortem.operator.jobs.build_pod`) and the pods of other kinds the
admission webhook sees (:mod:`podmortem.operator.watching.admission`). :func:`plan` takes a pod
(or a pod template: ``metadata`` and ``spec``) and returns both the changed spec and the RFC 6902
JSON Patch that makes the same change, or why it changes nothing.

What is added (docs/sidecar.md, "How it is started"): ``shareProcessNamespace: true``, and an
init container with ``restartPolicy: Always`` (a native sidecar, Kubernetes 1.29+), appended
after the pod's own init containers so that it starts just before the trainer, running as the
trainer's user and group with no capability, no privilege escalation, the RuntimeDefault seccomp
profile and a read-only root: admitted under Pod Security "restricted". Its evidence goes to
``/dev/termination-log`` (``terminationMessagePolicy: File``), where the operator reads it.

A container of the pod named ``podmortem-sidecar`` that is not exactly the one this operator injects
(`is_injected`: the configured image, the injected command, no arguments, no environment, a native
sidecar) is rewritten: replaced by the injected one, so that a pod's own image can never pose as the
sidecar whose message the operator reads (issue 36). A pod is left as it is, with the reason, when it
already has the injected sidecar, or runs ``podmortem sidecar`` under another name (never twice), when it
opts out (label or annotation ``podmortem.io/sidecar: "false"``, or ``shareProcessNamespace:
false`` written out), when its trainer runs as root or as a user the spec does not say (a
sidecar without capabilities could read neither), and when it is not a pod spec at all: the
webhook's pods come from outside, so every field read is checked for its type first.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podmortem.diagnosis import in_pod_evidence, termination
from podmortem.operator.settings import SidecarInjectionSettings

#: The sidecar container's name (the report reads its termination message by it); a pod with a
#: container of this name already has it.
SIDECAR_CONTAINER = termination.SIDECAR_CONTAINER
#: Label or annotation; ``"false"`` keeps the sidecar out of a pod.
OPT_OUT_KEY = "podmortem.io/sidecar"
#: Where the kubelet reads the sidecar's termination message (the sidecar's default ``--termination-log``).
TERMINATION_LOG = "/dev/termination-log"
#: The annotation kubectl reads for a pod's main container; the trainer, when it names one.
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
#: Largest uid/gid the API server accepts (int32).
MAX_ID = 2**31 - 1


@dataclass(frozen=True)
class Injection:
    """What adding the sidecar comes to for one pod."""

    #: RFC 6902 operations on the pod object (paths under ``/spec``); empty: the pod stays as it is.
    patch: tuple[dict[str, Any], ...]
    #: The pod spec with the patch applied: a new map, with new lists where the patch changes them;
    #: what the patch leaves alone is shared with the input, which is never changed. (A deep copy of
    #: the whole pod cost the webhook time that grew faster than the pod: issue 36's complexity bench.)
    spec: dict[str, Any]
    #: Why nothing is added, in words, when ``patch`` is empty.
    skipped: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.patch)


def _skip(spec: Any, reason: str) -> Injection:
    return Injection(patch=(), spec=dict(spec) if isinstance(spec, Mapping) else {}, skipped=reason)


def _mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a map, else an empty one (an absent or null field)."""
    return value if isinstance(value, Mapping) else {}


def _id(value: Any) -> int | None:
    """A runAsUser/runAsGroup: a whole number 0..2**31-1 (not a bool, not text), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_ID:
        return value
    return None


def _items(value: Any) -> list[Any]:
    """A list field's items (anything else: none)."""
    return value if isinstance(value, list) else []


def _words(value: Any) -> list[str]:
    """A command or args list's words (anything else: none)."""
    return [w for w in value if isinstance(w, str)] if isinstance(value, list) else []


def opted_out(metadata: Mapping[str, Any]) -> bool:
    """Whether the pod's labels or annotations say ``podmortem.io/sidecar: "false"``."""
    for part in ("labels", "annotations"):
        value = _mapping(metadata.get(part)).get(OPT_OUT_KEY)
        if isinstance(value, str) and value.strip().lower() == "false":
            return True
    return False


def is_injected(container: Mapping[str, Any], settings: SidecarInjectionSettings) -> bool:
    """Whether an init container is exactly the sidecar this operator injects, as far as what it runs
    and where its message comes from: the configured image, the injected command, no arguments, no
    environment, no volume over the message (a shared one could hold it), the message at /dev/termination-log,
    ``restartPolicy: Always``."""
    return (
        container.get("image") == settings.image
        and container.get("command") == sidecar_command(settings)
        and not container.get("args")
        and not container.get("env")
        and not container.get("envFrom")
        and not any(isinstance(m, Mapping) and in_pod_evidence.covers_termination_log(m.get("mountPath"))
                    for m in _items(container.get("volumeMounts")))
        and container.get("terminationMessagePath", TERMINATION_LOG) == TERMINATION_LOG
        and container.get("terminationMessagePolicy", "File") == "File"
        and container.get("restartPolicy") == "Always"
    )


def named_sidecar(spec: Mapping[str, Any]) -> tuple[str, int] | None:
    """Where a container named `SIDECAR_CONTAINER` is: (``initContainers`` or ``containers``, index)."""
    for part in ("initContainers", "containers"):
        items = spec.get(part)
        for index, container in enumerate(items if isinstance(items, list) else ()):
            if isinstance(container, Mapping) and container.get("name") == SIDECAR_CONTAINER:
                return part, index
    return None


def has_sidecar(spec: Mapping[str, Any], settings: SidecarInjectionSettings | None = None) -> bool:
    """Whether a container of the pod already is the sidecar: the injected one (named so and, given
    ``settings``, `is_injected`), or one running ``podmortem sidecar`` under another name."""
    for part in ("initContainers", "containers"):
        items = spec.get(part)
        for container in items if isinstance(items, list) else ():
            if not isinstance(container, Mapping):
                continue
            if container.get("name") == SIDECAR_CONTAINER:
                if settings is None or (part == "initContainers" and is_injected(container, settings)):
                    return True
                continue
            command, args = _words(container.get("command")), _words(container.get("args"))
            words = command + args
            if any(word.rsplit("/", 1)[-1] == "podmortem" and after == "sidecar"
                   for word, after in itertools.pairwise(words)):
                return True
            # The image's entrypoint is podmortem (as the chart runs it): args alone say "sidecar".
            if not command and args[:1] == ["sidecar"] and "podmortem" in str(container.get("image", "")):
                return True
    return False


def trainer_of(
    spec: Mapping[str, Any], metadata: Mapping[str, Any], *, leave_out: str | None = None
) -> Mapping[str, Any] | None:
    """The trainer container: the one kubectl's default-container annotation names, else the first
    (``leave_out``: a container name that cannot be it)."""
    containers = [c for c in spec.get("containers") or []
                  if isinstance(c, Mapping) and (leave_out is None or c.get("name") != leave_out)]
    named = _mapping(metadata.get("annotations")).get(DEFAULT_CONTAINER_ANNOTATION)
    for container in containers:
        if named and container.get("name") == named:
            return container
    return containers[0] if containers else None


def trainer_identity(spec: Mapping[str, Any], trainer: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(uid, gid) the trainer runs as, as the spec says: the container's, else the pod's; None: unsaid."""
    own = _mapping(trainer.get("securityContext"))
    pod = _mapping(spec.get("securityContext"))
    uid = _id(own.get("runAsUser")) if "runAsUser" in own else _id(pod.get("runAsUser"))
    gid = _id(own.get("runAsGroup")) if "runAsGroup" in own else _id(pod.get("runAsGroup"))
    return uid, gid


def sidecar_command(settings: SidecarInjectionSettings) -> list[str]:
    """The injected container's whole command (the operator reads evidence only from a container
    running exactly this, in the configured image)."""
    command = ["podmortem", "sidecar"]
    if settings.comm:
        command += ["--comm", settings.comm]
    return command


def identity(settings: SidecarInjectionSettings) -> in_pod_evidence.SidecarIdentity:
    """The sidecar container this operator injects, as the report finds it: its image and whole command
    (`podmortem.diagnosis.sidecar_findings.read` reads evidence only from that container)."""
    return in_pod_evidence.SidecarIdentity(image=settings.image, command=tuple(sidecar_command(settings)))


def sidecar_container(settings: SidecarInjectionSettings, *, uid: int, gid: int | None) -> dict[str, Any]:
    """The sidecar's init container, as the trainer's user, with nothing more than it needs."""
    command = sidecar_command(settings)
    security: dict[str, Any] = {
        "runAsUser": uid,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if gid is not None:
        security["runAsGroup"] = gid
    return {
        "name": SIDECAR_CONTAINER,
        "image": settings.image,
        "imagePullPolicy": settings.pull_policy,
        "command": command,
        "restartPolicy": "Always",
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        "resources": copy.deepcopy(dict(settings.resources)),
        "securityContext": security,
    }


def plan(pod: Mapping[str, Any], settings: SidecarInjectionSettings) -> Injection:
    """The sidecar added to ``pod`` (a Pod, or a template: ``metadata`` and ``spec``), or why not.

    Never raises on a malformed pod: it is left unchanged, the reason says what was wrong.
    """
    if not isinstance(pod, Mapping):
        return _skip({}, "not an object")
    spec = pod.get("spec")
    metadata = _mapping(pod.get("metadata"))
    if not isinstance(spec, Mapping):
        return _skip({}, "the pod has no spec")
    if not isinstance(spec.get("containers"), list) or not spec["containers"]:
        return _skip(spec, "the pod spec lists no containers")
    init = spec.get("initContainers")
    if init is not None and not (isinstance(init, list) and all(isinstance(c, Mapping) for c in init)):
        return _skip(spec, "spec.initContainers is not a list of containers")
    if has_sidecar(spec, settings):
        return _skip(spec, "the pod already has the podmortem sidecar")
    impostor = named_sidecar(spec)
    if opted_out(metadata):
        return _skip(spec, f'the pod says {OPT_OUT_KEY}: "false"')
    if spec.get("shareProcessNamespace") is False:
        return _skip(spec, "the pod sets shareProcessNamespace: false, which the sidecar needs true")
    if _mapping(spec.get("os")).get("name") == "windows":
        return _skip(spec, "a Windows pod: the sidecar reads Linux /proc")
    if spec.get("hostPID") is True:
        return _skip(spec, "the pod uses the host's PID namespace (hostPID), which cannot be shared")
    if not settings.image:
        return _skip(spec, "no sidecar image is set (the chart's sidecar.image)")
    trainer = trainer_of(spec, metadata, leave_out=SIDECAR_CONTAINER if impostor is not None else None)
    if trainer is None:
        return _skip(spec, "the pod spec lists no containers")
    uid, gid = trainer_identity(spec, trainer)
    if uid is None:
        return _skip(spec, "the trainer's runAsUser is not set in the pod spec: the sidecar must run as "
                           "the same user, so set securityContext.runAsUser")
    if uid == 0:
        return _skip(spec, "the trainer runs as root: a sidecar without capabilities cannot read its "
                           "processes, so run the trainer as a non-root user")
    container = sidecar_container(settings, uid=uid, gid=gid)
    out = dict(spec)
    patch: list[dict[str, Any]] = []
    if out.get("shareProcessNamespace") is not True:
        patch.append({"op": "add", "path": "/spec/shareProcessNamespace", "value": True})
        out["shareProcessNamespace"] = True
    if impostor is not None:
        part, index = impostor
        if part == "initContainers":  # rewritten in place: the injected sidecar where the other one was
            patch.append({"op": "replace", "path": f"/spec/initContainers/{index}", "value": container})
            out["initContainers"] = [*out["initContainers"][:index], copy.deepcopy(container),
                                     *out["initContainers"][index + 1:]]
            return Injection(patch=tuple(patch), spec=out)
        patch.append({"op": "remove", "path": f"/spec/containers/{index}"})
        out["containers"] = [c for i, c in enumerate(out["containers"]) if i != index]
    if init is None:  # absent or null: the list is made with the sidecar in it
        patch.append({"op": "add", "path": "/spec/initContainers", "value": [container]})
        out["initContainers"] = [container]
    else:
        patch.append({"op": "add", "path": "/spec/initContainers/-", "value": container})
        out["initContainers"] = [*out["initContainers"], copy.deepcopy(container)]
    return Injection(patch=tuple(patch), spec=out)
