"""What a follower needs to know about a container from its pod's status."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podmortem.kube.bodies import PodBody


class Phase(enum.StrEnum):
    WAITING = "waiting"          # not started yet, or waiting to restart
    RUNNING = "running"
    TERMINATED = "terminated"


@dataclass(frozen=True)
class ContainerState:
    """One container's instance as the pod status shows it now."""

    name: str
    #: The current (or last) instance; a new value means the container restarted.
    container_id: str | None
    restart_count: int
    phase: Phase
    #: ``lastState.terminated.containerID``: the instance before this one, readable with previous=true.
    previous_id: str | None


def container_names(pod: dict[str, Any]) -> list[str]:
    """The pod's (non-init) container names, in spec order."""
    return PodBody(pod).container_names


def container_state(pod: dict[str, Any], name: str) -> ContainerState:
    """The named container's state; WAITING without an instance when the status has none yet."""
    for status in PodBody(pod).statuses:
        if status.name != name:
            continue
        last_terminated = status.last_terminated
        return ContainerState(
            name=name,
            container_id=status.container_id or None,
            restart_count=status.restart_count,
            phase=Phase(status.current),
            previous_id=(last_terminated.container_id if last_terminated is not None else "") or None,
        )
    return ContainerState(name=name, container_id=None, restart_count=0, phase=Phase.WAITING,
                          previous_id=None)


class WatchedPod:
    """The pod as the caller's watch delivered it last, kept current by the caller at every event.

    A follower starts from it, and checks a new stream's instance against it instead of reading the
    pod once more: at an operator's start over thousands of pods that read was one request per pod.
    Only a watch that agrees with the follower is trusted this way; any disagreement is settled by a
    fresh read (see the follower's module docstring).
    """

    __slots__ = ("body",)

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body: dict[str, Any] = dict(body)

    def update(self, body: Mapping[str, Any]) -> None:
        self.body = dict(body)
