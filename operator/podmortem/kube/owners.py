"""Pods whose owner is an annotated job of a foreign kind: a batch Job, a Kubeflow PyTorchJob, ...

A platform that runs training as a batch/v1 Job or a PyTorchJob annotates that
object ``podmortem.io/watch: "true"``, not its pods (their template may not be
the platform's to change). The pods carry an ownerReference to it: a Job's pods
to the Job, a PyTorchJob's pods to the PyTorchJob directly. Further up the
chain counts too, through objects of configured kinds (a JobSet's Jobs, a
CronJob's Jobs), up to `MAX_OWNER_DEPTH` owners.

An ownerReference names its owner by ``apiVersion`` and ``kind``; the chart
configures kinds by group, resource and version. API discovery says which kind
a resource is (``PyTorchJob`` for ``pytorchjobs``); until it answers, a plural
guess stands in. An owner is read with one GET (the chart grants get on these
kinds) and its answer cached for ``cache_s``, so a node with many pods of one
job asks once. The owner's uid must match the reference: an object recreated
under the same name is not the pod's owner.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from podmortem.kube.api import KubeApi, KubeError
from podmortem.kube.bodies import Body

logger = logging.getLogger(__name__)

#: The annotation that opts a pod or a job of a foreign kind in: ``podmortem.io/watch: "true"``.
WATCH_ANNOTATION = "podmortem.io/watch"

#: How far up a pod's owner chain a watch annotation is looked for, through objects of configured
#: kinds (pod → Job → JobSet → TrainJob); the operator and the node agent follow the same rule.
MAX_OWNER_DEPTH = 3


@dataclass(frozen=True)
class ForeignKind:
    """A kind of object whose pods are sampled when the object is annotated."""

    group: str
    resource: str
    #: Empty means the group's preferred version (asked from API discovery).
    version: str = ""

    def __str__(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @classmethod
    def from_json(cls, data: Any) -> ForeignKind:
        """The chart's form: ``{"group": "batch", "resource": "jobs", "version": "v1"}``."""
        if not isinstance(data, dict):
            raise ValueError(f"foreign kind {data!r}: expected an object with group, resource, version")
        resource = str(data.get("resource") or data.get("plural") or "")
        if not resource:
            raise ValueError(f"foreign kind {json.dumps(data)}: 'resource' is required")
        return cls(
            group=str(data.get("group") or ""), resource=resource, version=str(data.get("version") or "")
        )

    @classmethod
    def parse(cls, text: str) -> ForeignKind:
        """``resource.group`` or ``group/version/resource``: ``kubeflow.org/v1/pytorchjobs``"""
        parts = text.strip().split("/")
        if len(parts) == 3 and parts[2]:
            return cls(group=parts[0], version=parts[1], resource=parts[2])
        if len(parts) == 1 and "." in parts[0]:
            resource, group = parts[0].split(".", 1)
            if resource and group:
                return cls(group=group, resource=resource)
        raise ValueError(
            f"foreign kind {text!r}: expected RESOURCE.GROUP or GROUP/VERSION/RESOURCE, e.g. jobs.batch"
        )


#: What the operator follows when nothing is configured (the chart's default ``foreignKinds``).
DEFAULT_FOREIGN_KINDS: tuple[ForeignKind, ...] = (
    ForeignKind("batch", "jobs", "v1"),
    ForeignKind("kubeflow.org", "pytorchjobs", "v1"),
    # A JobSet's pods belong to its child Jobs (followed above); annotate the JobSet to get one report.
    ForeignKind("jobset.x-k8s.io", "jobsets", "v1alpha2"),
)


def parse_foreign_kinds(text: str | None) -> tuple[ForeignKind, ...]:
    """``PODMORTEM_FOREIGN_KINDS``: the chart's JSON list (``[]``: none), comma list; unset: defaults."""
    if text is None or not text.strip():
        return DEFAULT_FOREIGN_KINDS
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"foreign kinds: not valid JSON: {exc}") from exc
        if not isinstance(items, list) or not all(
            isinstance(item, dict) and all(isinstance(v, str) for v in item.values()) for item in items
        ):
            raise ValueError("foreign kinds: the JSON must be a list of objects with string group, version "
                             "and resource")
        return tuple(ForeignKind.from_json(item) for item in items)
    return tuple(ForeignKind.parse(part) for part in text.split(",") if part.strip())


def split_api_version(api_version: str) -> tuple[str, str]:
    """``batch/v1`` → ("batch", "v1"); ``v1`` (the core group) → ("", "v1")."""
    group, sep, version = api_version.rpartition("/")
    return (group, version) if sep else ("", api_version)


def guess_kind_matches(kind: str, resource: str) -> bool:
    """Whether ``kind`` plausibly is ``resource`` (``Job``/``jobs``, ``Policy``/``policies``)."""
    lower = kind.lower()
    return resource in (lower + "s", lower + "es", lower[:-1] + "ies" if lower.endswith("y") else lower + "s")


def _group_path(group: str, version: str) -> str:
    return f"/api/{version}" if not group else f"/apis/{group}/{version}"


_OwnerKey = tuple[str, str, str, str, str]


@dataclass
class _Resolved:
    version: str
    kind: str


class OwnerResolver:
    """Answers "is an owner up this pod's chain an annotated object of a foreign kind?", with a cache."""

    def __init__(
        self,
        *,
        api: KubeApi,
        kinds: tuple[ForeignKind, ...],
        watch_annotation: str,
        cache_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.kinds = kinds
        self.watch_annotation = watch_annotation
        self.cache_s = cache_s
        self.clock = clock
        self.last_error: str | None = None
        #: Owner GETs made (for tests and the debug log: the cache should keep this small).
        self.fetches = 0
        self._resolved: dict[ForeignKind, _Resolved] = {}
        self._discovery_failed: set[ForeignKind] = set()
        #: (namespace, group, resource, name, uid) → (watched, its own ownerReferences, checked at).
        self._cache: dict[_OwnerKey, tuple[bool, tuple[Mapping[str, Any], ...], float]] = {}
        self._used: set[_OwnerKey] = set()

    # -- discovery --------------------------------------------------------------------------------

    async def _discover(self, kind: ForeignKind) -> _Resolved | None:
        version = kind.version
        if not version:
            if not kind.group:
                version = "v1"
            else:
                group = await self.api.get_json(f"/apis/{kind.group}")
                version = str((group.get("preferredVersion") or {}).get("version") or "")
                if not version:
                    raise KubeError(0, f"/apis/{kind.group}", "names no preferred version")
        listing = await self.api.get_json(_group_path(kind.group, version))
        for entry in listing.get("resources") or []:
            if entry.get("name") == kind.resource and entry.get("kind"):
                return _Resolved(version=version, kind=str(entry["kind"]))
        raise KubeError(
            404, f"the API serves no resource {kind.resource!r} in {kind.group or 'core'}/{version}"
        )

    async def resolve_kinds(self) -> None:
        """Ask discovery for the kinds not known yet; failures are logged once and retried later."""
        for kind in self.kinds:
            if kind in self._resolved:
                continue
            try:
                resolved = await self._discover(kind)
            except KubeError as exc:
                if kind not in self._discovery_failed:
                    logger.warning(
                        "foreign kind %s: API discovery failed (%s); matching owners by a plural guess",
                        kind,
                        exc,
                    )
                    self._discovery_failed.add(kind)
                continue
            if resolved is not None:
                self._resolved[kind] = resolved
                self._discovery_failed.discard(kind)
                logger.info("foreign kind %s is %s in version %s", kind, resolved.kind, resolved.version)

    def kind_of(self, ref: Mapping[str, Any]) -> tuple[ForeignKind, str] | None:
        """The configured kind an ownerReference points to, and the version to read it with."""
        group, ref_version = split_api_version(str(ref.get("apiVersion") or ""))
        ref_kind = str(ref.get("kind") or "")
        for kind in self.kinds:
            if kind.group != group:
                continue
            resolved = self._resolved.get(kind)
            if resolved is not None:
                if resolved.kind == ref_kind:
                    return kind, resolved.version
            elif guess_kind_matches(ref_kind, kind.resource):
                return kind, kind.version or ref_version
        return None

    # -- owners -----------------------------------------------------------------------------------

    async def _owner(
        self, namespace: str, kind: ForeignKind, version: str, ref: Mapping[str, Any]
    ) -> tuple[bool, tuple[Mapping[str, Any], ...]]:
        """Whether the object ``ref`` names is annotated, and its own ownerReferences (cached)."""
        name, uid = str(ref.get("name") or ""), str(ref.get("uid") or "")
        key = (namespace, kind.group, kind.resource, name, uid)
        self._used.add(key)
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and now - cached[2] < self.cache_s:
            return cached[0], cached[1]
        path = f"{_group_path(kind.group, version)}/namespaces/{namespace}/{kind.resource}/{name}"
        self.fetches += 1
        try:
            owner = await self.api.get_json(path)
        except KubeError as exc:
            if exc.status == 404:
                self._cache[key] = (False, (), now)
                return False, ()
            self.last_error = f"reading {kind} {namespace}/{name}: {exc}"
            if exc.status == 403:
                self.last_error += f" (the agent's ClusterRole needs get on {kind})"
            logger.warning("%s", self.last_error)
            # The last answer stands while the API is away.
            return (cached[0], cached[1]) if cached is not None else (False, ())
        body = Body(owner)
        same = body.uid == uid
        watched = same and body.annotations.get(self.watch_annotation, "").strip().lower() == "true"
        parents = tuple(body.owner_references) if same else ()
        self._cache[key] = (watched, parents, now)
        return watched, parents

    async def watching_owner(self, pod: Mapping[str, Any]) -> str | None:
        """``"Kind/name"`` of the nearest annotated foreign-kind owner up the pod's owner chain, or None.

        The chain is followed through objects of configured kinds only, at most
        `MAX_OWNER_DEPTH` owners up (pod → Job → JobSet → TrainJob).
        """
        body = Body(pod)
        namespace = body.namespace
        level: list[Mapping[str, Any]] = body.owner_references
        seen: set[str] = set()
        for _ in range(MAX_OWNER_DEPTH):
            above: list[Mapping[str, Any]] = []
            for ref in level:
                found = self.kind_of(ref)
                uid = str(ref.get("uid") or "")
                if found is None or uid in seen:
                    continue
                seen.add(uid)
                kind, version = found
                watched, parents = await self._owner(namespace, kind, version, ref)
                if watched:
                    return f"{ref.get('kind')}/{ref.get('name')}"
                above.extend(parents)
            if not above:
                break
            level = above
        return None

    def begin_round(self) -> None:
        """Start a listing round: owners not asked about by its end are forgotten (bounded cache)."""
        self._used = set()
        self.last_error = None

    def end_round(self) -> None:
        self._cache = {key: value for key, value in self._cache.items() if key in self._used}
