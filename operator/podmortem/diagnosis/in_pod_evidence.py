"""The pod's own testimony (the sidecar's evidence) checked against the kubelet's facts. Pure.

The sidecar runs in the training pod, beside a trainer of the same user that may be hostile
(docs/sidecar.md, "Trust model"), and its termination message is text in the pod's status. So
what it says is testimony, not fact, and is taken only when:

- it comes from the container the operator injected: a native sidecar (an init container with
  ``restartPolicy: Always``) running the configured image with exactly the injected command, no
  arguments, no environment, no volume over its message at /dev/termination-log (`identify`), never
  from whichever container is named ``podmortem-sidecar``;
- that container ended by itself (exit 0), as the sidecar does once it has written (a sidecar the
  trainer killed leaves exit 137 and whatever the file held);
- nothing in it contradicts what the kubelet says (`contradictions`): the trainer's memory limit in
  the spec, its container id and pod uid (where the cgroup path names them), the container's start
  and end, the order of the OOM-kill counter.

Even then, it never turns the verdict away from the kubelet's: an OOM kill the sidecar saw becomes
the verdict only when the kubelet itself reports one (`kubelet_reports_oom_kill`); otherwise it is a
finding beside the kubelet's verdict. The operator maps the parsed document to a `Testimony`, so this
module depends on no sidecar code.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

#: Slack on every time comparison: the sidecar and the kubelet read the same node's clock, but the
#: kubelet records a container's end when it notices it (its PLEG relists every second, more under load).
TIME_SLACK = timedelta(seconds=120)
#: The cgroup limit is the spec's rounded down to a page (64 KiB pages on some arm64 kernels).
LIMIT_SLACK_BYTES = 64 * 1024
_CONTAINER_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


@dataclass(frozen=True)
class InPodContainer:
    """A container of the pod that may be the sidecar: its spec and the state its message came from."""

    name: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    #: An init container with ``restartPolicy: Always`` (how the operator injects it).
    native_sidecar: bool
    #: Nothing more than the operator injects: no environment, no volume over /dev/termination-log (a
    #: volume the trainer shares could hold the message), the message read from that path as a file.
    plain: bool = True
    #: The termination message (raw, untrusted), and the terminated state it came from.
    message: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    restarts: int = 0


@dataclass(frozen=True)
class SidecarIdentity:
    """What the operator injects: the image and the whole command (`podmortem.operator.sidecar_injection`)."""

    image: str
    command: tuple[str, ...]


#: Where the kubelet reads the sidecar's message (the injected ``terminationMessagePath``).
TERMINATION_LOG = "/dev/termination-log"


def covers_termination_log(mount_path: object) -> bool:
    """Whether a volume mounted at ``mount_path`` would hold the termination log (a volume another
    container may share could then hold the message). The ServiceAccount token's mount does not."""
    if not isinstance(mount_path, str):
        return False
    path = "/" + mount_path.strip("/")
    return path in ("/", TERMINATION_LOG) or TERMINATION_LOG.startswith(path + "/")


def identify(candidates: Sequence[InPodContainer], identity: SidecarIdentity | None) -> InPodContainer | None:
    """The container the operator injected, by image and command; None when no container is it."""
    if identity is None or not identity.image:
        return None
    for candidate in candidates:
        if (candidate.native_sidecar and candidate.plain and candidate.image == identity.image
                and candidate.command == identity.command and not candidate.args):
            return candidate
    return None


@dataclass(frozen=True)
class Testimony:
    """What the sidecar's document claims, as plain data."""

    written_at: datetime
    reason: str
    kill: bool
    kill_at: datetime | None = None
    victim_pid: int | None = None
    gone: tuple[int, ...] = ()
    oom_before: int | None = None
    oom_after: int | None = None
    limit_bytes: int | None = None
    peak_bytes: int | None = None
    usage_bytes: int | None = None
    cgroup_path: str | None = None


@dataclass(frozen=True)
class KubeletFacts:
    """What the kubelet (and the spec) say about the trainer container and the sidecar."""

    container: str
    container_id: str | None
    pod_uid: str
    exit_code: int | None
    reason: str | None
    started_at: datetime | None
    finished_at: datetime | None
    #: The trainer's ``resources.limits.memory``, bytes; None when the spec sets none.
    limit_bytes: int | None
    sidecar: InPodContainer
    #: Other containers of the pod (the cgroup path must not name theirs).
    other_container_ids: tuple[str, ...] = field(default_factory=tuple)


def kubelet_reports_oom_kill(exit_code: int | None, reason: str | None) -> bool:
    """Whether the kubelet's own words for the container allow an OOM kill as its end."""
    return reason == "OOMKilled" or exit_code == 137


def _hex_id(container_id: str | None) -> str | None:
    if not container_id:
        return None
    tail = container_id.rsplit("://", 1)[-1].lower()
    return tail if _CONTAINER_ID.fullmatch(tail) else None


def contradictions(claim: Testimony, facts: KubeletFacts) -> list[str]:
    """Each way the testimony contradicts the kubelet's facts, in words; empty when none does."""
    found: list[str] = []
    sidecar = facts.sidecar
    if sidecar.exit_code is not None and sidecar.exit_code != 0:
        found.append(f"the sidecar ended with exit {sidecar.exit_code} ({sidecar.reason or 'no reason'}), "
                     "not by itself after writing (exit 0): its message may be anyone's")
    limit = facts.limit_bytes
    if (claim.limit_bytes is not None and limit is not None
            and abs(claim.limit_bytes - limit) > LIMIT_SLACK_BYTES):
        found.append(f"limit {claim.limit_bytes} B, but the spec's limit for {facts.container!r} is "
                     f"{limit} B")
    if claim.limit_bytes is not None and claim.limit_bytes <= 0:
        found.append("a limit of 0 B")
    for name, value in (("peak", claim.peak_bytes), ("usage", claim.usage_bytes)):
        ceiling = claim.limit_bytes if claim.limit_bytes is not None else limit
        if value is not None and ceiling is not None and value > ceiling + LIMIT_SLACK_BYTES:
            found.append(f"{name} {value} B over the limit of {ceiling} B")
    if claim.oom_before is not None and claim.oom_after is not None and claim.oom_after < claim.oom_before:
        found.append(f"the OOM-kill counter went down, from {claim.oom_before} to {claim.oom_after}")
    if claim.kill and claim.victim_pid is not None and claim.gone and claim.victim_pid not in claim.gone:
        found.append(f"the victim pid {claim.victim_pid} is not among the pids gone")
    found += _time_contradictions(claim, facts)
    found += _identity_contradictions(claim, facts)
    return found


def _time_contradictions(claim: Testimony, facts: KubeletFacts) -> list[str]:
    found: list[str] = []
    started = facts.started_at
    ended = facts.sidecar.finished_at
    if started is not None and claim.written_at < started - TIME_SLACK:
        found.append(f"written at {claim.written_at.isoformat()}, before {facts.container!r} started "
                     f"({started.isoformat()})")
    if ended is not None and claim.written_at > ended + TIME_SLACK:
        found.append(f"written at {claim.written_at.isoformat()}, after the sidecar ended "
                     f"({ended.isoformat()})")
    if (claim.reason == "trainer-gone" and facts.finished_at is not None
            and claim.written_at < facts.finished_at - TIME_SLACK):
        found.append(f"says every process of {facts.container!r} was gone at {claim.written_at.isoformat()}, "
                     f"but it ended at {facts.finished_at.isoformat()}")
    if claim.kill_at is not None:
        if started is not None and claim.kill_at < started - TIME_SLACK:
            found.append(f"a kill at {claim.kill_at.isoformat()}, before {facts.container!r} started")
        if facts.finished_at is not None and claim.kill_at > facts.finished_at + TIME_SLACK:
            found.append(f"a kill at {claim.kill_at.isoformat()}, after {facts.container!r} ended "
                         f"({facts.finished_at.isoformat()})")
        if claim.kill_at > claim.written_at + TIME_SLACK:
            found.append("a kill after the document was written")
    return found


def _identity_contradictions(claim: Testimony, facts: KubeletFacts) -> list[str]:
    path = (claim.cgroup_path or "").lower()
    found: list[str] = []
    own = _hex_id(facts.container_id)
    named = set(_CONTAINER_ID.findall(path))
    if named and own is not None and own not in named:
        found.append(f"its cgroup path names container {sorted(named)[0][:12]}, not {facts.container!r} "
                     f"({own[:12]})")
    uids = {u.replace("_", "-") for u in _POD_UID.findall(path)}
    if uids and facts.pod_uid and facts.pod_uid.lower() not in uids:
        found.append(f"its cgroup path names pod {sorted(uids)[0]}, not this pod ({facts.pod_uid})")
    return found
