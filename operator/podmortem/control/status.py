"""Writing a TrainingJob's status: one writer per job, conditions merged, never a lost update.

A JSON merge patch replaces arrays whole, so two writers that each set "their"
condition would erase each other's. All status writes of one job therefore go
through one lock, and the writer keeps the job's current conditions (seeded
from the object kopf last saw) to patch the complete list every time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from podmortem.control import kube as kube_mod
from podmortem.control.jobs import trainingjob_path


def set_condition(
    conditions: list[dict[str, Any]], *, type_: str, status: bool, reason: str, message: str, now: str
) -> list[dict[str, Any]]:
    """The list with ``type_`` set; ``lastTransitionTime`` changes only when the status flips."""
    wanted = "True" if status else "False"
    out: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") != type_:
            out.append(cond)
            continue
        found = True
        changed = cond.get("status") != wanted
        out.append(
            {
                "type": type_,
                "status": wanted,
                "reason": reason,
                "message": message,
                "lastTransitionTime": now if changed else cond.get("lastTransitionTime", now),
            }
        )
    if not found:
        out.append(
            {"type": type_, "status": wanted, "reason": reason, "message": message, "lastTransitionTime": now}
        )
    return out


class StatusWriter:
    """Serializes the status patches of TrainingJobs and keeps their conditions current."""

    def __init__(self, *, kube: kube_mod.Kube) -> None:
        self.kube = kube
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._conditions: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def seed(self, *, namespace: str, name: str, status: Mapping[str, Any] | None) -> None:
        """Take the conditions from the object as last seen, unless this writer knows newer ones."""
        key = (namespace, name)
        if key not in self._conditions:
            self._conditions[key] = [dict(c) for c in (status or {}).get("conditions") or []]

    def forget(self, *, namespace: str, name: str) -> None:
        self._conditions.pop((namespace, name), None)
        self._locks.pop((namespace, name), None)

    def conditions(self, *, namespace: str, name: str) -> list[dict[str, Any]]:
        return list(self._conditions.get((namespace, name), []))

    async def patch(
        self,
        *,
        namespace: str,
        name: str,
        fields: Mapping[str, Any] | None = None,
        conditions: Sequence[tuple[str, bool, str, str]] = (),
    ) -> dict[str, Any] | None:
        """Merge ``fields`` into the status and set each (type, status, reason, message) condition.

        Returns the patched object, or None when the TrainingJob is gone.
        """
        key = (namespace, name)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            body: dict[str, Any] = dict(fields or {})
            if conditions:
                current = self._conditions.get(key, [])
                now = kube_mod.now_rfc3339()
                for type_, status, reason, message in conditions:
                    current = set_condition(
                        current, type_=type_, status=status, reason=reason, message=message, now=now
                    )
                self._conditions[key] = current
                body["conditions"] = current
            if not body:
                return None
            try:
                return await self.kube.merge_patch(
                    trainingjob_path(namespace, name, "status"), {"status": body}
                )
            except kube_mod.KubeError as exc:
                if exc.status == 404:
                    return None
                raise
