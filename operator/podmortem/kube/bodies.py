"""Typed views of the object bodies the API hands us: a pod and its container statuses, a job of any kind.

A body is JSON: any field may be absent, null, or (for a hand-edited object, or an emulator) of
another type. Rather than each module digging through ``body.get("metadata", {}) or {}`` with its
own idea of what an absent field reads as, these views read every field once, here, by the
same rules: text fields read as ``""`` when absent or not text, maps as ``{}``, lists as ``[]``
(keeping only their object items). A view never raises and never copies the body.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_EMPTY: Mapping[str, Any] = {}


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _objects(value: object) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _strings(value: object) -> dict[str, str]:
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(
        value, Mapping
    ) else {}


def _int(value: object) -> int | None:
    """An integer (a JSON number without a fraction), never a bool; None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Terminated:
    """A container's ``terminated`` state (``state`` or ``lastState``): how one instance ended."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw

    @property
    def exit_code(self) -> int | None:
        return _int(self.raw.get("exitCode"))

    @property
    def signal(self) -> int | None:
        return _int(self.raw.get("signal"))

    @property
    def reason(self) -> str:
        return _text(self.raw.get("reason"))

    @property
    def message(self) -> str:
        return _text(self.raw.get("message"))

    @property
    def container_id(self) -> str:
        return _text(self.raw.get("containerID"))

    @property
    def started_at(self) -> str:
        return _text(self.raw.get("startedAt"))

    @property
    def finished_at(self) -> str:
        return _text(self.raw.get("finishedAt"))


def _terminated(state: object) -> Terminated | None:
    term = _map(state).get("terminated")
    return Terminated(term) if isinstance(term, Mapping) and term else None


class ContainerStatus:
    """One entry of a pod's ``containerStatuses`` (or the init and ephemeral ones): the instance now,
    how it ended and how the one before it ended."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw

    @property
    def name(self) -> str:
        return _text(self.raw.get("name"))

    @property
    def container_id(self) -> str:
        """The current (or last) instance's id; a new one means the container restarted."""
        return _text(self.raw.get("containerID"))

    @property
    def restart_count(self) -> int:
        return _int(self.raw.get("restartCount")) or 0

    @property
    def state(self) -> Mapping[str, Any]:
        return _map(self.raw.get("state"))

    @property
    def current(self) -> str:
        """``running``, ``terminated`` or ``waiting`` (also for a status that names no state yet)."""
        state = self.state
        return "running" if "running" in state else "terminated" if "terminated" in state else "waiting"

    @property
    def running_since(self) -> str:
        """``state.running.startedAt``; "" when not running or not said."""
        return _text(_map(self.state.get("running")).get("startedAt"))

    @property
    def terminated(self) -> Terminated | None:
        """``state.terminated``: how the current instance ended; None while it runs or waits."""
        return _terminated(self.raw.get("state"))

    @property
    def last_terminated(self) -> Terminated | None:
        """``lastState.terminated``: how the instance before this one ended (readable with previous=true)."""
        return _terminated(self.raw.get("lastState"))

    def terminations(self) -> list[Terminated]:
        """The current instance's end, then the one before it, those the status has."""
        return [t for t in (self.terminated, self.last_terminated) if t is not None]


class Body:
    """Any Kubernetes object: its metadata, and its spec and status as maps."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        self.raw: Mapping[str, Any] = raw if isinstance(raw, Mapping) else _EMPTY

    @property
    def metadata(self) -> Mapping[str, Any]:
        return _map(self.raw.get("metadata"))

    @property
    def name(self) -> str:
        return _text(self.metadata.get("name"))

    @property
    def namespace(self) -> str:
        return _text(self.metadata.get("namespace"))

    @property
    def uid(self) -> str:
        return _text(self.metadata.get("uid"))

    @property
    def resource_version(self) -> str | None:
        return _text(self.metadata.get("resourceVersion")) or None

    @property
    def labels(self) -> dict[str, str]:
        return _strings(self.metadata.get("labels"))

    @property
    def annotations(self) -> dict[str, str]:
        return _strings(self.metadata.get("annotations"))

    @property
    def owner_references(self) -> list[Mapping[str, Any]]:
        return _objects(self.metadata.get("ownerReferences"))

    @property
    def being_deleted(self) -> bool:
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def spec(self) -> Mapping[str, Any]:
        return _map(self.raw.get("spec"))

    @property
    def status(self) -> Mapping[str, Any]:
        return _map(self.raw.get("status"))

    @property
    def conditions(self) -> list[Mapping[str, Any]]:
        return _objects(self.status.get("conditions"))


class PodBody(Body):
    """A pod: where it runs, its containers, and their statuses."""

    __slots__ = ()

    @property
    def node_name(self) -> str:
        return _text(self.spec.get("nodeName"))

    @property
    def phase(self) -> str:
        return _text(self.status.get("phase"))

    @property
    def pod_ip(self) -> str:
        return _text(self.status.get("podIP"))

    @property
    def containers(self) -> list[Mapping[str, Any]]:
        return _objects(self.spec.get("containers"))

    @property
    def init_containers(self) -> list[Mapping[str, Any]]:
        return _objects(self.spec.get("initContainers"))

    @property
    def container_names(self) -> list[str]:
        return [name for c in self.containers if (name := _text(c.get("name")))]

    @property
    def container_statuses(self) -> list[Mapping[str, Any]]:
        return _objects(self.status.get("containerStatuses"))

    @property
    def init_container_statuses(self) -> list[Mapping[str, Any]]:
        return _objects(self.status.get("initContainerStatuses"))

    @property
    def statuses(self) -> list[ContainerStatus]:
        """``containerStatuses``, each read through `ContainerStatus`."""
        return [ContainerStatus(cs) for cs in self.container_statuses]

    @property
    def init_statuses(self) -> list[ContainerStatus]:
        """``initContainerStatuses`` (native sidecars among them), each read through `ContainerStatus`."""
        return [ContainerStatus(cs) for cs in self.init_container_statuses]

    @property
    def ephemeral_statuses(self) -> list[ContainerStatus]:
        return [ContainerStatus(cs) for cs in _objects(self.status.get("ephemeralContainerStatuses"))]

    def has_started_containers(self) -> bool:
        """Whether any container ran (is running, has ended, or has an id): its log can be read."""
        return any(cs.current != "waiting" or cs.container_id for cs in self.statuses)
