"""The apiserver's checks of a core/v1 Event on create (``pkg/apis/core/validation/events.go``,
``legacyValidateEvent``), for the emulated API.

Measured on kube-apiserver v1.36.3 (``tests/controlplane/test_events_real.py``): an Event without
``eventTime`` (what podmortem posts) must be in its object's namespace and has no length limits; one
with ``eventTime`` also needs ``reportingComponent``, ``reportingInstance``, ``action`` and ``reason``,
and its message may have at most 1024 bytes, its reason, action and instance at most 128. A refusal is
422 ``Invalid``, every error named in the message.
"""

from __future__ import annotations

import json
from typing import Any

#: Limits of an Event with ``eventTime`` (Go's ``len``: bytes of UTF-8).
NOTE_MAX_BYTES = 1024
REASON_MAX_BYTES = 128
ACTION_MAX_BYTES = 128
REPORTING_INSTANCE_MAX_BYTES = 128


def _size(value: Any) -> int:
    return len(str(value or "").encode())


def event_errors(event: dict[str, Any], *, namespace: str) -> list[tuple[str, str, str]]:
    """(field, cause reason, message) for each error the apiserver finds in a core/v1 Event."""
    involved = event.get("involvedObject") or {}
    involved_ns = str(involved.get("namespace") or "")
    errors: list[tuple[str, str, str]] = []

    def invalid(field: str, value: str, detail: str) -> None:
        errors.append((field, "FieldValueInvalid", f"Invalid value: {json.dumps(value)}: {detail}"))

    def required(field: str) -> None:
        errors.append((field, "FieldValueRequired", "Required value"))

    if not event.get("eventTime"):
        if involved_ns:
            if namespace != involved_ns:
                invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
        elif namespace not in ("", "default"):
            invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
        return errors
    if not involved_ns and namespace not in ("default", "kube-system"):
        invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
    limits = (("reportingComponent", None), ("reportingInstance", REPORTING_INSTANCE_MAX_BYTES),
              ("action", ACTION_MAX_BYTES), ("reason", REASON_MAX_BYTES))
    for field, limit in limits:
        if not event.get(field):
            required(field)
        elif limit is not None and _size(event.get(field)) > limit:
            invalid(field, "", f"can have at most {limit} characters")
    if _size(event.get("message")) > NOTE_MAX_BYTES:
        invalid("message", "", f"can have at most {NOTE_MAX_BYTES} characters")
    return errors


def invalid_status(kind: str, name: str, errors: list[tuple[str, str, str]]) -> dict[str, Any]:
    """The 422 Status the apiserver answers with (``errors.NewInvalid``)."""
    texts = [f"{field}: {message}" for field, _, message in errors]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f"{kind} {json.dumps(name)} is invalid: {joined}", "reason": "Invalid",
            "details": {"name": name, "kind": kind,
                        "causes": [{"reason": reason, "message": message, "field": field}
                                   for field, reason, message in errors]},
            "code": 422}
