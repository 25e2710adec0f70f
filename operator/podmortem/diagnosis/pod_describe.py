"""`kubectl describe pod` text back into the pod object the operator would see.

kubectl's describe printer decides: its field names and their print order place each line, and
indentation only where the paste kept it, so flattened, joined or partial pastes read too
(`pods_from_describe`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from podmortem.diagnosis.pasted import DESCRIBE_NAME, DNS_LABEL, BadInput, pasted_lines

#: ``Key:   value`` at any indentation; keys are words with spaces ("Exit Code", "Last State").
_FIELD = re.compile(r"(?P<indent> *)(?P<key>[A-Za-z_][\w .()/-]*?):(?:[ \t]+(?P<value>.*\S))?[ \t]*$")
_MOUNT = re.compile(r"\s*(?P<path>/\S*) from (?P<name>\S+)")
_TIME_FORMS = ("%a, %d %b %Y %H:%M:%S %z", "%a, %d %b %Y %H:%M:%S")
_STATE_FIELDS = {"Reason": "reason", "Message": "message", "Exit Code": "exitCode", "Signal": "signal",
                 "Started": "startedAt", "Finished": "finishedAt"}
#: The pod's own fields as kubectl's describe printer writes them (``k8s.io/kubectl/pkg/describe``,
#: ``describePod``), in its order; every kubectl release prints some of them, in this order.
_POD_ORDER = (
    "Name", "Namespace", "Priority", "Priority Class Name", "Runtime Class Name", "Service Account",
    "Node", "Start Time", "Labels", "Annotations", "Status", "Termination Grace Period", "Reason",
    "Message", "SeccompProfile", "IP", "IPs", "Controllers", "Controlled By", "NominatedNodeName",
    "Init Containers", "Containers", "Ephemeral Containers", "Readiness Gates", "Conditions", "Volumes",
    "QoS Class", "QoS Tier", "Node-Selectors", "Tolerations", "Topology Spread Constraints", "Events",
)
_POD_RANK = {key: rank for rank, key in enumerate(_POD_ORDER)}
_CONTAINER_SECTIONS = ("Init Containers", "Containers", "Ephemeral Containers")
#: A container's fields (``describeContainers``); ``Last Termination State`` is kubectl 1.0's.
_CONTAINER_FIELDS = frozenset({
    "Container ID", "Image", "Image ID", "Port", "Ports", "Host Port", "Host Ports", "SeccompProfile",
    "Command", "Args", "State", "Last State", "Last Termination State", "Ready", "Restart Count",
    "Restart Policy", "Limits", "Requests", "Liveness", "Readiness", "Startup",
    "Environment Variables from", "Environment", "Mounts", "Devices",
})
_STATES = ("State", "Last State", "Last Termination State")
#: Where a paste joined describe's lines into one: before each field name of the printer.
_KNOWN_KEYS = frozenset({*_POD_ORDER, *_CONTAINER_FIELDS, *_STATE_FIELDS})
_JOINED = re.compile(
    r"(?:^|\s)(?P<key>" + "|".join(re.escape(k) for k in sorted(_KNOWN_KEYS, key=len, reverse=True))
    + r"):(?=\s|$)"
)
#: ``kubectl describe`` shows conditions as Type and Status only; the Event that comes with a
#: disruption names what the condition's reason would have said.
_DISRUPTION_EVENTS = {"Preempted": "PreemptionByScheduler", "TaintManagerEviction": "DeletionByTaintManager"}
#: The DisruptionTarget reason when ``kubectl describe`` shows the condition and no Event names it.
DESCRIBE_HIDES_REASON = "reason not shown by kubectl describe; kubectl get pod -o yaml has it"


def _describe_time(value: str) -> str | None:
    """``Mon, 01 May 2024 10:05:00 +0000`` as RFC3339; None for kubectl's zero time (year 1) or ``<none>``."""
    for form in _TIME_FORMS:
        try:
            parsed = datetime.strptime(value.strip(), form)
        except ValueError:
            continue
        if parsed.year <= 1:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.isoformat()
    return None


def _value(value: str | None) -> str | None:
    return None if value is None or value.strip() in ("", "<none>", "<unset>") else value.strip()


def _describe_lines(text: str) -> list[tuple[int, str]]:
    """describe's lines as (indentation, text): a paste's prompts, fences and elisions left out, and
    a line that holds several of the printer's fields (a paste that joined lines) split before each."""
    out: list[tuple[int, str]] = []
    for line in pasted_lines(text):
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if known_key(body) is not None:
            cuts = [m.start("key") for m in _JOINED.finditer(body)]
            if len(cuts) > 1:
                out += [(indent, body[a:b].strip()) for a, b in itertools.pairwise([*cuts, len(body)])]
                continue
        out.append((indent, body))
    return out


def known_key(body: str) -> str | None:
    """The printer's field name a line begins with, if it does."""
    m = _FIELD.fullmatch(body)
    return m["key"] if m is not None and m["key"] in _KNOWN_KEYS else None


def pods_from_describe(text: str) -> list[dict[str, Any]]:
    """The pods of ``kubectl describe pod`` output (several when it describes several), as pod objects.

    What a report needs is read: name, namespace, node, labels, annotations, the pod's status,
    reason and message (``Terminating`` for a pod being deleted), every container's and init
    container's State and Last State (Reason, Exit Code, Started, Finished, Message), their
    environment (``TZ``, ``RANK``) and mounts, the volumes (an ``EmptyDir`` at ``/dev/shm``, its
    medium and size limit), the conditions (``DisruptionTarget``) and the Events.

    The printer's field names say where a line belongs, its indentation only where the paste kept
    it: describe text whose indentation was lost (``flat``), whose lines were joined, or a part of
    it (the ``Containers`` alone, one container's ``State:`` lines, the pod's ``Status:``/``Reason:``
    /``Message:``) reads as the whole would. A part without a container name stands for one
    container named "". Each pod begins at its ``Name:`` line (followed by ``Namespace:``).
    """
    lines = _describe_lines(text)
    starts = [
        i for i, (indent, body) in enumerate(lines)
        if DESCRIBE_NAME.match(body) and body.startswith("Name:")
        and (indent == 0 or (i + 1 < len(lines) and lines[i + 1][1].startswith("Namespace:")))
    ]
    if not starts:
        if not any(known_key(body) for _, body in lines):
            raise BadInput("no 'Name:' line: not kubectl describe pod output")
        pod = _describe_one(lines)
        status = pod["status"]
        if not (status["containerStatuses"] or status["initContainerStatuses"] or status.get("reason")
                or status.get("phase")):
            raise BadInput("no 'Name:' line and no pod status: not kubectl describe pod output")
        return [pod]
    bounds = [*starts, len(lines)]
    return [_describe_one(lines[a:b]) for a, b in itertools.pairwise(bounds)]


@dataclass
class _Describe:
    meta: dict[str, Any] = field(default_factory=lambda: {"labels": {}, "annotations": {}})
    spec: dict[str, Any] = field(
        default_factory=lambda: {"containers": [], "initContainers": [], "volumes": []}
    )
    status: dict[str, Any] = field(
        default_factory=lambda: {"containerStatuses": [], "initContainerStatuses": [], "conditions": []}
    )
    events: list[tuple[str, str]] = field(default_factory=list)

    def pod(self) -> dict[str, Any]:
        disrupted = [c for c in self.status["conditions"] if c["type"] == "DisruptionTarget"]
        for cond in disrupted:
            named = [(_DISRUPTION_EVENTS[r], m) for r, m in self.events if r in _DISRUPTION_EVENTS]
            cond["reason"], cond["message"] = named[-1] if named else (DESCRIBE_HIDES_REASON, "")
        evicted = [m for r, m in self.events if r == "Evicted"]
        if evicted and not self.status.get("reason"):
            # The Events alone: the kubelet's Evicted event carries the message it set on the pod.
            self.status.update(
                phase=self.status.get("phase") or "Failed", reason="Evicted", message=evicted[-1]
            )
        return {"apiVersion": "v1", "kind": "Pod", "metadata": self.meta, "spec": self.spec,
                "status": self.status}


@dataclass
class _Reading:
    """Where `_describe_one` is in the text: the pod's section, the container, its field and state."""

    section: str = ""
    rank: int = -1
    spec: dict[str, Any] | None = None
    cs: dict[str, Any] | None = None
    name_indent: int | None = None
    field_indent: int | None = None
    field_key: str = ""
    state: dict[str, Any] | None = None
    state_indent: int = 0
    volume: dict[str, Any] | None = None

    def leave_container(self) -> None:
        self.spec = self.cs = self.state = self.volume = None
        self.name_indent = self.field_indent = None
        self.field_key = ""


def _describe_one(lines: Sequence[tuple[int, str]]) -> dict[str, Any]:
    d = _Describe()
    # The printer's own fields: a line of prose ending in a colon before a pasted part is no field.
    fields = [indent for indent, body in lines if _FIELD.fullmatch(body) and known_key(body) is not None] or \
        [indent for indent, body in lines if _FIELD.fullmatch(body)]
    # Indentation lost: every line at the margin or one space in, or all at one depth (a part pasted
    # into a list item or a Markdown fence, its own indentation flattened). Then only the printer's
    # field names and their order tell where a line belongs.
    flat = max(fields, default=0) <= 1 or (len(fields) > 1 and max(fields) == min(fields))
    base = min(fields, default=0)
    r = _Reading()
    for indent, body in lines:
        m = _FIELD.fullmatch(body)
        key = m["key"] if m is not None else None
        # A container state's own fields: deeper than its State line, or anywhere when flat.
        if r.state is not None and key in _STATE_FIELDS and (flat or indent > r.state_indent):
            _state_field(r.state, key, m["value"] if m is not None else None)
            continue
        if key is not None and _pod_field(key, indent, flat=flat, base=base, rank=r.rank):
            r.leave_container()
            r.section, r.rank = key, _POD_RANK.get(key, r.rank)
            _describe_top(d, key, m["value"] if m is not None else None)
            continue
        section = r.section
        if section in ("Labels", "Annotations"):
            _describe_top(d, section, body)
        elif section in _CONTAINER_SECTIONS or (key in _CONTAINER_FIELDS and (flat or indent <= base)):
            _container_line(d, r, indent, body, m, flat=flat)
        elif section == "Conditions":
            cells = body.split()
            if len(cells) >= 2 and cells[0] != "Type" and ":" not in cells[0]:
                d.status["conditions"].append({"type": cells[0], "status": cells[1]})
        elif section == "Volumes" and m is not None:
            value = _value(m["value"])
            if flat:  # a volume's name: a DNS label alone on its line
                named = DNS_LABEL.fullmatch(m["key"]) is not None
            else:
                named = r.volume is None or indent <= r.volume["_indent"]
            if not m["value"] and named:
                r.volume = {"name": m["key"], "_indent": indent}
                d.spec["volumes"].append(r.volume)
            elif r.volume is not None:
                _describe_volume(r.volume, m["key"], value)
        elif section == "Events":
            cells = re.split(r"\s{2,}", body, maxsplit=4)
            if len(cells) == 5 and cells[0] in ("Normal", "Warning"):
                d.events.append((cells[1], cells[4]))
    for vol in d.spec["volumes"]:
        vol.pop("_indent", None)
    return d.pod()


def _pod_field(key: str, indent: int, *, flat: bool, base: int, rank: int) -> bool:
    """Whether a ``key:`` line is one of the pod's own fields (a section of describe).

    With indentation, one at the margin is, unless it is a container's field (a part of describe that
    begins at a container's ``State:``); flat, one the printer writes after the last one read is.
    """
    if flat:
        return _POD_RANK.get(key, -1) > rank
    return indent <= base and (key in _POD_RANK or key not in _CONTAINER_FIELDS)


def _container_line(
    d: _Describe, r: _Reading, indent: int, body: str, m: re.Match[str] | None, *, flat: bool
) -> None:
    """A line of a container: its name, one of its fields, or a line under a field (env, mounts)."""
    key = m["key"] if m is not None else None
    init = r.section == "Init Containers"
    if (
        m is not None and key is not None and not m["value"] and r.section in _CONTAINER_SECTIONS
        and key not in _CONTAINER_FIELDS and key not in _STATE_FIELDS
        and (DNS_LABEL.fullmatch(key) if flat else (r.name_indent is None or indent <= r.name_indent))
    ):
        r.leave_container()
        r.name_indent = indent
        _new_container(d, r, key, init=init)
        return
    is_field = key is not None and (
        key in _CONTAINER_FIELDS if flat else (r.field_indent is None or indent <= r.field_indent)
    )
    if is_field and key is not None and m is not None:
        if r.spec is None:  # a part of describe that shows a container's fields without its name
            _new_container(d, r, "", init=init)
        assert r.cs is not None
        r.field_indent, r.field_key, r.state = indent, key, None
        value = _value(m["value"])
        if key == "Container ID" and value:
            r.cs["containerID"] = value
        elif key in _STATES and value:
            r.state, r.state_indent = {}, indent
            r.cs["state" if key == "State" else "lastState"] = {value.split()[0].lower(): r.state}
        return
    if r.spec is None:
        return
    if r.field_key == "Environment" and m is not None and key is not None:
        r.spec["env"].append({"name": key, "value": _value(m["value"]) or ""})
    elif r.field_key == "Mounts":
        mount = _MOUNT.match(body)
        if mount is not None:
            r.spec["volumeMounts"].append({"name": mount["name"], "mountPath": mount["path"]})


def _new_container(d: _Describe, r: _Reading, name: str, *, init: bool) -> None:
    r.spec = {"name": name, "env": [], "volumeMounts": []}
    r.cs = {"name": name}
    d.spec["initContainers" if init else "containers"].append(r.spec)
    d.status["initContainerStatuses" if init else "containerStatuses"].append(r.cs)


def _state_field(state: dict[str, Any], key: str | None, raw: str | None) -> None:
    name = _STATE_FIELDS.get(key or "")
    value = _value(raw)
    if name in ("exitCode", "signal") and value and re.fullmatch(r"-?\d+", value):
        state[name] = int(value)
    elif name in ("startedAt", "finishedAt") and value:
        state[name] = _describe_time(value)
    elif name is not None and value:
        state[name] = value


def _describe_top(d: _Describe, key: str, raw: str | None) -> None:
    value = _value(raw)
    if key == "Name" and value:
        d.meta["name"] = value
    elif key == "Namespace" and value:
        d.meta["namespace"] = value
    elif key == "Node" and value:
        d.spec["nodeName"] = value.split("/", 1)[0]
    elif key == "Start Time" and value:
        d.status["startTime"] = _describe_time(value)
    elif key == "Status" and value:
        if value.startswith("Terminating"):  # "Terminating (lasts 10h)": a deletionTimestamp is set
            d.meta["deletionTimestamp"] = value
        else:
            d.status["phase"] = value
    elif key == "Reason" and value:
        d.status["reason"] = value
    elif key == "Message" and value:
        d.status["message"] = value
    elif key == "Conditions" and value:  # the table's rows joined into its line by a paste
        cells = value.split()
        for kind, state in itertools.pairwise(cells):
            if state in ("True", "False", "Unknown") and kind not in ("True", "False", "Unknown"):
                d.status["conditions"].append({"type": kind, "status": state})
    elif key == "Labels" and value:
        name, sep, label = value.partition("=")
        if sep:
            d.meta["labels"][name] = label
    elif key == "Annotations" and value:
        name, sep, note = value.partition(": ")
        if sep and re.fullmatch(r"[\w./-]+", name):
            d.meta["annotations"][name] = note.strip()


def _describe_volume(volume: dict[str, Any], key: str, value: str | None) -> None:
    if key == "Type" and value:
        if value.startswith("EmptyDir"):
            volume["emptyDir"] = {}
        else:
            volume["source"] = value.split(" (", 1)[0]
    elif key == "Medium" and value and "emptyDir" in volume:
        volume["emptyDir"]["medium"] = value
    elif key == "SizeLimit" and value and "emptyDir" in volume:
        volume["emptyDir"]["sizeLimit"] = value


# -- log tails -------------------------------------------------------------------------------------
