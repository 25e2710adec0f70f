"""Typed views of the object bodies the API hands us: a pod, a job of any kind, a lease.

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

    def has_started_containers(self) -> bool:
        """Whether any container ran (is running, has ended, or has an id): its log can be read."""
        for cs in self.container_statuses:
            state = _map(cs.get("state"))
            if "running" in state or "terminated" in state or cs.get("containerID"):
                return True
        return False
