"""The kopf handlers: each one hands its event to ``watching.service.OperatorService``.

kopf logs in through :func:`build`'s login handler, which takes its credentials
from :class:`podmortem.kube.connection.Connection` (the one kubeconfig and
service-account loader the agent and the CLI use too) and only once the API
server has accepted them.

They are registered into a fresh ``kopf.OperatorRegistry`` (no global state), so
an operator can be built more than once in one process (tests, the benchmark).
Only event handlers are used: they persist nothing on the objects (no kopf
annotations or ``status.kopf``), and every service call is idempotent, so a
replayed or repeated event does no harm. Pods, the one kind with thousands of
objects, are watched by ``pod_watch`` instead (kopf's per-event cost).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf

from podmortem.kube import clients, owners
from podmortem.kube.bodies import Body
from podmortem.kube.connection import Connection
from podmortem.operator import jobs
from podmortem.operator.settings import (
    TRAININGJOB_GROUP,
    TRAININGJOB_PLURAL,
    TRAININGJOB_VERSION,
    OperatorSettings,
)
from podmortem.operator.watching.pod_watch import PodWatches
from podmortem.operator.watching.service import OperatorService

logger = logging.getLogger(__name__)


def build(
    *,
    service: OperatorService,
    settings: OperatorSettings,
    connection: Connection,
    pod_watches: PodWatches | None = None,
) -> kopf.OperatorRegistry:
    """All kopf handlers of the operator, logging in through ``connection``.

    Pods are watched by ``pod_watches`` (`pod_watch`), not kopf; its stop comes first at cleanup."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry, errors=kopf.ErrorsMode.PERMANENT)
    async def login(**_: Any) -> kopf.AiohttpSession:
        # Called at start and again whenever kopf's credentials were refused (401): each time the
        # token file is re-read and a plugin run again, and the server must accept them first.
        access = await connection.login()
        expiration = None
        if connection.access.plugin:
            expiration = datetime.now(UTC) + timedelta(seconds=clients.PLUGIN_CREDENTIALS_S)
        return kopf.AiohttpSession(
            server=access.server,
            default_namespace=access.namespace,
            aiohttp_session=clients.aiohttp_session(access),
            expiration=expiration,
        )

    @kopf.on.event(TRAININGJOB_GROUP, TRAININGJOB_VERSION, TRAININGJOB_PLURAL, registry=registry)
    async def trainingjob_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        if type == "DELETED":
            service.forget_owner(Body(body).uid)
            return
        await service.on_trainingjob(body)

    for kind in settings.foreign_kinds:
        selector: tuple[str, ...] = (
            (kind.group, kind.version, kind.resource) if kind.version else (kind.group, kind.resource)
        )
        plural = kind.resource

        @kopf.on.event(*selector, registry=registry, id=f"foreign-{kind.resource}.{kind.group}")
        async def foreign_event(type: str | None, body: kopf.Body, _plural: str = plural, **_: Any) -> None:
            if type == "DELETED":
                service.forget_owner(Body(body).uid)
                return
            await service.on_foreign(body, plural=_plural)

    @kopf.on.cleanup(registry=registry)
    async def graceful_stop(**_: Any) -> None:
        if pod_watches is not None:
            await pod_watches.stop()  # no pod event reaches the service once it stops
        await service.stop()

    return registry


def maybe_followed(body: Mapping[str, Any]) -> bool:
    """Cheap pre-filter: a pod is a candidate when it has owners or the watch annotation."""
    pod = Body(body)
    return (
        bool(pod.owner_references)
        or owners.WATCH_ANNOTATION in pod.annotations
        or jobs.TRAININGJOB_UID_LABEL in pod.labels
    )


def pod_filter(settings: OperatorSettings) -> Callable[[Mapping[str, Any]], bool]:
    """`maybe_followed`, widened to the pods the follow selector picks (which may have neither owners nor
    the annotation). Client-side: the pod watch cannot ask the API server for these alone, since the
    annotated pods and the jobs' pods must still come (a label selector cannot say "or")."""
    selector = settings.follow_selector
    if selector is None:
        return maybe_followed

    def accept(body: Mapping[str, Any]) -> bool:
        pod = Body(body)
        return maybe_followed(body) or selector.selects(pod.namespace, pod.labels)

    return accept
