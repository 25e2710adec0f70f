"""Writing a TrainingJob's status: one writer per job, conditions merged, never a lost update.

A JSON merge patch replaces arrays whole, so two writers that each set "their"
condition would erase each other's. All status writes of one job therefore go
through one lock, and the writer keeps the job's current conditions (seeded
from the object kopf last saw) to patch the complete list every time.

The writer also owns what the status holds (its fields and conditions as this writer last wrote
or seeded them): `StatusWriter.patch_if_changed` skips what would change nothing, and a report's
rewrite turns the status's report into the new one (`StatusWriter.fields` gives the old one). No
other object keeps a copy.

A condition's message is cut to the CRD's limit (:data:`MESSAGE_MAX_CHARS`): the
apiserver refuses a longer one, and with it the whole status patch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from podmortem.kube.api import Kube, KubeError, now_rfc3339
from podmortem.operator.jobs import trainingjob_path

#: The early warning's condition (see `podmortem.memory_line.projection`).
MEMORY_PRESSURE = "MemoryPressure"
#: Its reason once the job succeeded: the warning did not come true (or not before the job ended).
SUCCEEDED_REASON = "JobSucceeded"
#: ``maxLength`` of ``status.conditions[].message`` in the CRD (charts/podmortem/crds/trainingjob.yaml),
#: counted in characters as the apiserver counts them.
MESSAGE_MAX_CHARS = 32768


def capped_message(message: str, *, limit: int = MESSAGE_MAX_CHARS) -> str:
    """``message``, or its start with a marker saying how many characters were cut, within ``limit``."""
    if len(message) <= limit:
        return message
    longest_marker = len(_cut_marker(len(message)))
    keep = max(0, limit - longest_marker)
    return message[:keep] + _cut_marker(len(message) - keep)


def _cut_marker(cut: int) -> str:
    return f" ... [{cut} characters cut]"


def set_condition(
    conditions: list[dict[str, Any]], *, type_: str, status: bool, reason: str, message: str, now: str
) -> list[dict[str, Any]]:
    """The list with ``type_`` set; ``lastTransitionTime`` changes only when the status flips.

    ``message`` is cut to the CRD's limit (:func:`capped_message`).
    """
    wanted = "True" if status else "False"
    message = capped_message(message)
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


def settle_on_success(
    conditions: list[dict[str, Any]], *, phase: str | None, now: str
) -> list[dict[str, Any]]:
    """The list with a True ``MemoryPressure`` set False once the job has ``Succeeded``; else as is.

    A warning that the memory will cross the limit is about the future of a running job; once the
    job succeeded it is no longer true, and a ``Succeeded`` job showing ``MemoryPressure True`` tells
    two stories. The message keeps what was warned (the Warning Event keeps it too).
    """
    if phase != "Succeeded":
        return conditions
    for cond in conditions:
        if cond.get("type") == MEMORY_PRESSURE and cond.get("status") == "True":
            warned = cond.get("message") or ""
            message = "the job succeeded without reaching its memory limit" + (
                f"; the warning was: {warned}" if warned else ""
            )
            return set_condition(
                conditions,
                type_=MEMORY_PRESSURE,
                status=False,
                reason=SUCCEEDED_REASON,
                message=message,
                now=now,
            )
    return conditions


def merged(held: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``held`` with the JSON merge patch (RFC 7386) ``patch`` applied: what the server then holds."""
    out = dict(held)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            before = out.get(key)
            out[key] = merged(before if isinstance(before, Mapping) else {}, value)
        else:
            out[key] = value
    return out


class StatusWriter:
    """Serializes the status patches of TrainingJobs and owns what their status holds."""

    def __init__(self, *, kube: Kube) -> None:
        self.kube = kube
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._conditions: dict[tuple[str, str], list[dict[str, Any]]] = {}
        #: The status's fields but its conditions, as last written (or seen): what a patch changes.
        self._fields: dict[tuple[str, str], dict[str, Any]] = {}

    def seed(self, *, namespace: str, name: str, status: Mapping[str, Any] | None) -> None:
        """Take the status from the object as last seen, unless this writer knows a newer one."""
        key = (namespace, name)
        if key not in self._conditions:
            self._conditions[key] = [dict(c) for c in (status or {}).get("conditions") or []]
        if key not in self._fields:
            self._fields[key] = {k: v for k, v in (status or {}).items() if k != "conditions"}

    def forget(self, *, namespace: str, name: str) -> None:
        self._conditions.pop((namespace, name), None)
        self._locks.pop((namespace, name), None)
        self._fields.pop((namespace, name), None)

    def conditions(self, *, namespace: str, name: str) -> list[dict[str, Any]]:
        return list(self._conditions.get((namespace, name), []))

    def condition(self, *, namespace: str, name: str, type_: str) -> dict[str, Any] | None:
        """The condition ``type_`` as the status holds it, if it has one."""
        return next((c for c in self._conditions.get((namespace, name), ()) if c.get("type") == type_), None)

    def fields(self, *, namespace: str, name: str) -> dict[str, Any]:
        """The status's fields (not its conditions) as last written or seen."""
        return dict(self._fields.get((namespace, name), {}))

    async def patch_if_changed(
        self,
        *,
        namespace: str,
        name: str,
        fields: Mapping[str, Any] | None = None,
        conditions: Sequence[tuple[str, bool, str, str]] = (),
    ) -> bool:
        """`patch` with only the fields and conditions that differ from what the status holds; nothing
        when none does. Returns whether a patch was sent."""
        held = self._fields.get((namespace, name), {})
        changed = {k: v for k, v in (fields or {}).items() if held.get(k, None) != v}
        new_conditions = [
            c for c in conditions if not _holds(self.condition(namespace=namespace, name=name, type_=c[0]), c)
        ]
        if not changed and not new_conditions:
            return False
        await self.patch(namespace=namespace, name=name, fields=changed, conditions=new_conditions)
        return True

    async def patch(
        self,
        *,
        namespace: str,
        name: str,
        fields: Mapping[str, Any] | None = None,
        conditions: Sequence[tuple[str, bool, str, str]] = (),
    ) -> dict[str, Any] | None:
        """Merge ``fields`` into the status and set each (type, status, reason, message) condition.

        Once the phase is ``Succeeded`` (written now or before), a True ``MemoryPressure`` is set
        False in the same patch (see `settle_on_success`), whichever writer raised it and when.

        Returns the patched object, or None when the TrainingJob is gone.
        """
        key = (namespace, name)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            body: dict[str, Any] = dict(fields or {})
            held = merged(self._fields.get(key, {}), body)
            phase = held.get("phase")
            before = self._conditions.get(key, [])
            current = before
            now = now_rfc3339()
            for type_, status, reason, message in conditions:
                current = set_condition(
                    current, type_=type_, status=status, reason=reason, message=message, now=now
                )
            current = settle_on_success(current, phase=phase if isinstance(phase, str) else None, now=now)
            if conditions or current is not before:
                self._conditions[key] = current
                body["conditions"] = current
            if not body:
                return None
            try:
                patched = await self.kube.merge_patch(
                    trainingjob_path(namespace, name, "status"), {"status": body}
                )
            except KubeError as exc:
                if exc.status == 404:  # the TrainingJob is gone: so is what this writer held of it
                    self.forget(namespace=namespace, name=name)
                    return None
                raise
            if self._locks.get(key) is lock:  # else it was forgotten meanwhile (deleted)
                self._fields[key] = held
            return patched


def _holds(held: Mapping[str, Any] | None, wanted: tuple[str, bool, str, str]) -> bool:
    """Whether the condition ``held`` already says ``wanted`` (type, status, reason, message)."""
    if held is None:
        return False
    _type, status, reason, message = wanted
    return (held.get("status") == ("True" if status else "False") and held.get("reason") == reason
            and held.get("message") == capped_message(message))
