"""Spot the terminations worth a failure report in a pod's status: every failed exit, OOMKilled, eviction.

The kubelet reports a cgroup OOM kill as reason ``OOMKilled`` (exit 137); a
plain SIGKILL (deletion, preemption, a failed liveness probe) is exit 137 with
another reason or none; an eviction is the *pod's* reason ``Evicted``, often
with containers that never got a terminated state. Any other non-zero exit (a CUDA OOM's 1,
SIGBUS's 135, SIGSEGV's 139) gets a report too, read from the log tail
(`podmortem.diagnosis.exit_causes`). Pure: takes the pod as a dict.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from podmortem.diagnosis import exit_causes
from podmortem.diagnosis import sibling_oom as sibling_oom_mod
from podmortem.diagnosis.in_pod_evidence import TERMINATION_LOG, InPodContainer, covers_termination_log
from podmortem.kube.bodies import PodBody
from podmortem.reports.times import parse_time

SIGKILL_EXIT = 137

#: The name the operator gives the injected ``podmortem sidecar`` container (see `docs/sidecar.md`).
#: Not how its evidence is found: that is by image and command (`podmortem.diagnosis.in_pod_evidence`).
SIDECAR_CONTAINER = "podmortem-sidecar"
#: Containers kept as possible sidecars of one pod (named so, or running ``podmortem sidecar``).
MAX_SIDECAR_CANDIDATES = 4
#: Characters of a sidecar's termination message kept: the kubelet keeps 4096 bytes; one more
#: character than that lets the reader tell an overlong (edited) message from a whole one.
SIDECAR_MESSAGE_MAX = 4097


@dataclass(frozen=True)
class Termination:
    """One container instance's end that needs a report."""

    namespace: str
    pod: str
    pod_uid: str
    node: str | None
    container: str
    #: The container instance; a report is written once per instance.
    container_id: str | None
    exit_code: int | None
    #: The container's terminated reason (``OOMKilled``, ``Error``…), if any.
    reason: str | None
    #: The pod-level reason and message (``Evicted``, ``DeadlineExceeded``, ``Preempting``…).
    pod_reason: str | None
    pod_message: str | None
    started_at: datetime | None
    finished_at: datetime | None
    #: The pod had a deletionTimestamp when it was seen: the kill may be the deletion's.
    deleting: bool
    #: The pod's DisruptionTarget condition (reason, message) when True: preemption, taint, drain.
    disruption: tuple[str, str] | None = None
    #: The container's /dev/shm size, for a shm-full finding.
    shm: exit_causes.ShmSize | None = None
    #: Another container of the pod OOM-killed shortly before this one ended (a sidecar's kill).
    sibling_oom: sibling_oom_mod.SiblingOom | None = None
    #: The container's ``TZ`` (an IANA zone like ``Europe/Berlin``), for times in the pod's local time.
    time_zone: str | None = None
    #: The pod runs the ``podmortem sidecar`` (`SIDECAR_CONTAINER`), and what its termination message
    #: says once it has ended (raw text, untrusted: the operator parses it), None until then.
    sidecar: bool = False
    sidecar_message: str | None = None
    #: The containers that may be the sidecar, with their spec and terminated state: the operator
    #: reads the evidence only from the one it injected (`in_pod_evidence.identify`).
    sidecars: tuple[InPodContainer, ...] = ()
    #: The container's ``resources.limits.memory`` in the spec, bytes (None: none set).
    memory_limit_bytes: int | None = None

    @property
    def key(self) -> str:
        """What makes a termination unique, for reporting once."""
        return f"{self.pod_uid}/{self.container}/{self.container_id or 'evicted'}"


def time_zone(pod: Mapping[str, Any], container: str) -> str | None:
    """The container's ``TZ`` when it is a literal IANA zone name (``Europe/Berlin``); else None.

    Training logs print local time when the image sets ``TZ``: the report shows both.
    """
    for c in PodBody(pod).containers:
        if c.get("name") != container:
            continue
        for env in c.get("env") or []:
            value = env.get("value") if env.get("name") == "TZ" else None
            if isinstance(value, str) and _ZONE.fullmatch(value.lstrip(":")):
                return value.lstrip(":")
    return None


_ZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,3}")


def find(pod: Mapping[str, Any]) -> list[Termination]:
    """Every termination in this pod's status that deserves a report."""
    body = PodBody(pod)
    spec, status = body.spec, body.status
    pod_reason = status.get("reason")
    found: list[Termination] = []
    base = _pod_fields(pod)
    # An init container that failed (killed at its limit, or exited non-zero) stopped the pod from
    # starting: its end is the pod's. A native sidecar (an init container with restartPolicy Always)
    # is stopped with the pod by SIGTERM, and its end says nothing of its own.
    sidecars = {c.get("name") for c in body.init_containers if c.get("restartPolicy") == "Always"}
    for cs in (*(c for c in body.init_statuses if c.name not in sidecars), *body.statuses):
        for term in cs.terminations():
            code, reason = term.exit_code, term.reason or None
            if code not in (None, 0) or reason == "OOMKilled" or pod_reason == "Evicted":
                found.append(
                    Termination(
                        container=cs.name,
                        container_id=term.container_id or cs.container_id or None,
                        exit_code=code,
                        reason=reason,
                        started_at=parse_time(term.started_at),
                        finished_at=parse_time(term.finished_at),
                        shm=exit_causes.shm_size(pod, cs.name),
                        sibling_oom=sibling_oom_mod.find(
                            pod, cs.name, parse_time(term.finished_at)
                        ) if reason != "OOMKilled" else None,
                        time_zone=time_zone(pod, cs.name),
                        memory_limit_bytes=memory_limit(body, cs.name),
                        **base,
                    )
                )
    if pod_reason == "Evicted" and not found:
        # Evicted pods may show no terminated container at all.
        found.append(_pod_level(spec, status, base))
    return found


def being_disrupted(pod: Mapping[str, Any]) -> Termination | None:
    """A pod Kubernetes is stopping from outside (a True ``DisruptionTarget`` condition) whose
    containers have not ended yet: what a status pasted during its grace period shows. The operator
    reports the containers once they end; `podmortem diagnose` reports the pod as it is given."""
    if exit_causes.disruption_of(pod) is None or find(pod):
        return None
    body = PodBody(pod)
    return _pod_level(body.spec, body.status, _pod_fields(pod))


def memory_limit(pod: PodBody, container: str) -> int | None:
    """The container's ``resources.limits.memory`` in bytes as the spec says; None: unset or unreadable."""
    for c in pod.containers:
        if c.get("name") == container:
            resources = c.get("resources")
            limits = resources.get("limits") if isinstance(resources, Mapping) else None
            value = limits.get("memory") if isinstance(limits, Mapping) else None
            return exit_causes.quantity_bytes(str(value)) if isinstance(value, str | int) else None
    return None


def _words(value: Any) -> tuple[str, ...]:
    return tuple(w for w in value if isinstance(w, str)) if isinstance(value, list) else ()


def _plain(c: Mapping[str, Any]) -> bool:
    """No environment, no volume over the termination log, the message read from it as a file."""
    mounts = c.get("volumeMounts")
    return (not c.get("env") and not c.get("envFrom")
            and not any(isinstance(m, Mapping) and covers_termination_log(m.get("mountPath"))
                        for m in (mounts if isinstance(mounts, list) else ()))
            and c.get("terminationMessagePath", TERMINATION_LOG) == TERMINATION_LOG
            and c.get("terminationMessagePolicy", "File") == "File")


def sidecar_candidates(pod: PodBody) -> tuple[InPodContainer, ...]:
    """The containers that may be the sidecar (named `SIDECAR_CONTAINER`, or running ``podmortem sidecar``),
    each with the terminated state that holds its message (the current one first, else the last)."""
    statuses = {cs.name: cs for cs in (*pod.init_statuses, *pod.statuses)}
    found: list[InPodContainer] = []
    for native, items in ((True, pod.init_containers), (False, pod.containers)):
        for c in items:
            command, args = _words(c.get("command")), _words(c.get("args"))
            words = command + args
            runs = any(w.rsplit("/", 1)[-1] == "podmortem" and n == "sidecar"
                       for w, n in itertools.pairwise(words))
            if c.get("name") != SIDECAR_CONTAINER and not runs:
                continue
            name = c.get("name")
            cs = statuses.get(name) if isinstance(name, str) else None
            ends = cs.terminations() if cs is not None else []
            term = ends[0] if ends else None
            message = term.message if term is not None else ""
            found.append(InPodContainer(
                name=str(c.get("name", "")),
                image=str(c.get("image", "")),
                command=command,
                args=args,
                native_sidecar=native and c.get("restartPolicy") == "Always",
                plain=_plain(c),
                message=message[:SIDECAR_MESSAGE_MAX] if message.strip() else None,
                exit_code=term.exit_code if term is not None else None,
                reason=(term.reason or None) if term is not None else None,
                started_at=parse_time(term.started_at) if term is not None else None,
                finished_at=parse_time(term.finished_at) if term is not None else None,
                restarts=cs.restart_count if cs is not None else 0,
            ))
            if len(found) >= MAX_SIDECAR_CANDIDATES:
                return tuple(found)
    return tuple(found)


def sidecar_message(pod: PodBody) -> tuple[bool, str | None]:
    """Whether the pod runs the sidecar, and its termination message once it has ended."""
    present = any(c.get("name") == SIDECAR_CONTAINER for c in (*pod.init_containers, *pod.containers))
    for cs in (*pod.init_statuses, *pod.statuses):
        if cs.name != SIDECAR_CONTAINER:
            continue
        for term in cs.terminations():
            if term.message.strip():
                return True, term.message[:SIDECAR_MESSAGE_MAX]
    return present, None


def _pod_fields(pod: Mapping[str, Any]) -> dict[str, Any]:
    body = PodBody(pod)
    status = body.status
    present, message = sidecar_message(body)
    return {
        "sidecar": present,
        "sidecar_message": message,
        "sidecars": sidecar_candidates(body),
        "namespace": body.namespace,
        "pod": body.name,
        "pod_uid": body.uid,
        "node": body.node_name or None,
        "pod_reason": status.get("reason"),
        "pod_message": status.get("message"),
        "deleting": body.being_deleted,
        "disruption": exit_causes.disruption_of(pod),
    }


def _pod_level(spec: Mapping[str, Any], status: Mapping[str, Any], base: Mapping[str, Any]) -> Termination:
    """The pod as one termination, named by its first container, with no exit code."""
    first = (spec.get("containers") or [{}])[0]
    return Termination(
        container=first.get("name", ""),
        container_id=None,
        exit_code=None,
        reason=None,
        started_at=parse_time(status.get("startTime")),
        finished_at=None,
        **base,
    )

