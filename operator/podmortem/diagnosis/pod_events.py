"""A pod's end as people paste it without the pod: Events rows, describe's ``Message:``, the kubelet's words.

Why a reader of its own: a person asked why a training pod died often has only what ``kubectl get
events`` printed, one row of describe's Events table, describe's ``Message:`` line, or the kubelet's
eviction message copied out of any of them. Each is read here into the pod object the operator
would have seen (`pods_from_events`), so that the operator's own rules give the verdict.

The forms, from kubectl's printers (k8s.io/kubectl and kubernetes/pkg/printers/internalversion):

* ``kubectl get events``: the columns ``LAST SEEN  TYPE  REASON  OBJECT  MESSAGE`` (``NAMESPACE``
  first with ``-A``; ``-o wide`` adds ``SUBOBJECT  SOURCE`` before ``MESSAGE`` and ``FIRST SEEN
  COUNT  NAME`` after it), the object as ``kind/name`` in lower case; cells are padded with at
  least three spaces by the tab writer;
* ``kubectl describe``'s Events: ``Type  Reason  Age  From  Message``, each row indented;
* describe's pod ``Message:`` field, which holds ``status.message``;
* the messages themselves, as the catalogue holds them (`podmortem.diagnosis.catalogue`, kind
  "pod"): the kubelet's eviction (``The node was low on resource: %v.``...), its shutdown, the
  scheduler's preemption.

Which event means what: the kubelet's ``Evicted`` sets the pod's reason and message; the scheduler's
``Preempted`` (``Preempted by pod %v on node %v``) and the taint manager's ``TaintManagerEviction``
are the pod's ``DisruptionTarget`` condition. Other events (``Killing``, ``BackOff``...) say nothing
of the cause and are passed over. Pure: text in, pod objects out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from podmortem.diagnosis import catalogue

#: Event reasons that carry a pod's end, and what they set: the pod's reason, or a DisruptionTarget's.
_POD_REASONS = {"Evicted": "Evicted"}
_DISRUPTIONS = {"Preempted": "PreemptionByScheduler", "TaintManagerEviction": "DeletionByTaintManager"}
#: Volcano's reason for any pod its scheduler evicts (pkg/scheduler/cache/cache.go): a preemption only when
#: its message says the action was ``preempt`` or ``reclaim`` (the catalogue's volcano-evict entries).
_VOLCANO_EVICT = "Evict"
_KNOWN = frozenset({*_POD_REASONS, *_DISRUPTIONS, _VOLCANO_EVICT})
#: ``kubectl get events``' header, any of its column sets.
_HEADER = re.compile(
    r"(?:NAMESPACE\s+)?LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+(?:SUBOBJECT\s+SOURCE\s+)?MESSAGE\b"
)
#: describe's Events row: ``Warning  Evicted  4m51s  kubelet  message`` (the age may be ``3m (x2 over 5m)``).
_DESCRIBE_ROW = re.compile(
    r"\s*(?P<type>Normal|Warning)\s{2,}(?P<reason>[A-Za-z]{2,64})\s{2,}(?P<age>\S.{0,40}?)\s{2,}"
    r"(?P<source>\S.{0,120}?)\s{2,}(?P<message>\S.*)"
)
#: ``kubectl get events`` row whose header was cut off (a ``-w`` listing's excerpt, a grep): ``[NAMESPACE]
#: LAST SEEN  TYPE  REASON  kind/name  MESSAGE``, cells apart by two spaces or more (the tab writer's
#: padding is at least three).
_GET_ROW = re.compile(
    r"\s*(?:(?P<namespace>[a-z0-9][a-z0-9-]{0,62})\s{2,})?(?P<age>[<>\w]{1,20})\s{2,}"
    r"(?P<type>Normal|Warning)\s{2,}(?P<reason>[A-Za-z]{2,64})\s{2,}"
    r"(?P<kind>[a-z][a-z.]{0,62})/(?P<name>\S{1,253})\s{2,}(?P<message>\S.*)"
)
_MESSAGE_FIELD = re.compile(r"\s*Message:\s+(?P<message>\S.*)")
_POD_MESSAGES = tuple(e for e in catalogue.ENTRIES if e.kind == "pod")
_VOLCANO_MESSAGES = tuple(e for e in _POD_MESSAGES if e.key.startswith("volcano-evict"))
#: The kubelet's messages that name the container they are about (``Container X was using ...``,
#: ``Container X exceeded its local ephemeral storage limit ...``), as catalogued.
_CONTAINER_MESSAGES = tuple(e for e in _POD_MESSAGES if any(f.name == "container" for f in e.fields))
#: A container's name is a DNS label.
_CONTAINER_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
#: A paste this short can be one row or one message; longer texts are logs that may quote them.
LONE_LINES = 12
#: An event's message is at most 1 KiB (client-go's recorder and events.k8s.io's note limit); a line
#: four times longer is none of these forms.
LINE_MAX = 4096


def kind_of(lines: Sequence[str]) -> bool:
    """Whether pasted ``lines`` (as `pasted.pasted_lines` gives them) are one of this module's forms."""
    if not lines:
        return False
    if any(_HEADER.match(line.strip()) for line in lines[:3]):
        return True
    if _headerless(lines):
        return True
    if len(lines) > LONE_LINES:
        return False
    return any(_lone(line) is not None for line in lines)


def _lone(line: str) -> tuple[str, str] | None:
    """A describe Events row of a known reason, a ``Message:`` line or a message alone: (reason, message)."""
    if len(line) > LINE_MAX:
        return None  # no event message is this long; the row's bounded cells stay cheap on any line
    row = _DESCRIBE_ROW.fullmatch(line)
    if row is not None:
        return (row["reason"], row["message"].strip()) if row["reason"] in _KNOWN else None
    field = _MESSAGE_FIELD.fullmatch(line)
    text = field["message"].strip() if field is not None else line.strip()
    found = catalogue.find(text, _POD_MESSAGES)
    if found is None or found.entry.verdict is None:
        return None
    if found.entry.verdict == "preempted":
        reason = "Shutdown" if found.entry.key == "kubelet-node-shutdown" else "Preempted"
    else:
        reason = "Evicted"
    return reason, text


def pods_from_events(lines: Sequence[str]) -> list[dict[str, Any]]:
    """The pods these pasted lines tell the end of, as pod objects; empty when they tell none."""
    events: list[tuple[str, str, str, str]] = []  # (namespace, pod, reason, message)
    header = next((i for i, line in enumerate(lines[:3]) if _HEADER.match(line.strip())), None)
    if header is not None:
        events = _table(lines[header], lines[header + 1:])
    elif rows := _headerless(lines):
        events = rows
    elif len(lines) <= LONE_LINES:
        events = [("", "", reason, message) for line in lines if (read := _lone(line)) is not None
                  for reason, message in [read]]
    pods: dict[tuple[str, str], dict[str, Any]] = {}
    for namespace, name, reason, message in events:
        if reason == _VOLCANO_EVICT:
            found = catalogue.find(message, _VOLCANO_MESSAGES)
            if found is None or found.entry.verdict != "preempted":
                continue
            reason = "Preempted"
        if reason not in _KNOWN and reason != "Shutdown":
            continue
        pod = pods.setdefault((namespace, name), _pod(namespace, name))
        status = pod["status"]
        if reason in _POD_REASONS:
            status.update(phase="Failed", reason=_POD_REASONS[reason], message=message)
        elif reason == "Shutdown":
            status.update(phase="Failed", reason="Terminated", message=message)
            status["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                     "reason": "TerminationByKubelet", "message": message}]
        else:
            status["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                     "reason": _DISRUPTIONS[reason], "message": message}]
        named = catalogue.find(message, _CONTAINER_MESSAGES)
        container = named.fields["container"] if named is not None else ""
        if _CONTAINER_NAME.fullmatch(container) and not pod["spec"]["containers"]:
            pod["spec"]["containers"].append({"name": container})
    return list(pods.values())


def _headerless(lines: Sequence[str]) -> list[tuple[str, str, str, str]]:
    """The pod events of ``kubectl get events`` rows without their header, when more than half the
    lines are such rows and one of them is of a reason that ends a pod (`_KNOWN`); else none."""
    rows = [m for line in lines if len(line) <= LINE_MAX and (m := _GET_ROW.fullmatch(line.rstrip()))]
    if 2 * len(rows) <= len(lines) or not any(m["reason"] in _KNOWN for m in rows):
        return []
    return [(m["namespace"] or "", m["name"], m["reason"], m["message"].strip()) for m in rows
            if m["kind"] == "pod"]


def _pod(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace or "default", "labels": {}, "annotations": {}},
        "spec": {"containers": [], "initContainers": [], "volumes": []},
        "status": {"containerStatuses": [], "initContainerStatuses": [], "conditions": []},
    }


def _table(header: str, rows: Sequence[str]) -> list[tuple[str, str, str, str]]:
    """``kubectl get events`` rows. The tab writer starts every cell where its header's column starts,
    an empty cell too (``-o wide``'s ``SUBOBJECT``): a row that keeps that alignment is cut there;
    one whose spaces a paste squeezed is split at runs of two spaces or more, the message the rest
    of the row up to ``-o wide``'s columns after it."""
    head = header.rstrip()
    starts = [(m.group(0), m.start()) for m in re.finditer(r"\S+(?: \S+)*", head)]
    columns = [name for name, _ in starts]
    at = columns.index("MESSAGE")
    after = len(columns) - at - 1
    out: list[tuple[str, str, str, str]] = []
    for row in rows:
        row = row.rstrip()
        if all(s == 0 or (len(row) > s and row[s - 1] == " ") for _, s in starts[:at + 1]):
            bounds = [s for _, s in starts] + [len(row)]
            cell = {name: row[bounds[i]:bounds[i + 1]].strip() for i, (name, _) in enumerate(starts)}
        else:
            cells = re.split(r"\s{2,}", row.strip())
            if len(cells) < len(columns):
                continue
            cell = dict(zip(columns[:at], cells[:at], strict=True))
            cell["MESSAGE"] = "  ".join(cells[at:len(cells) - after])
        kind, _, name = cell.get("OBJECT", "").partition("/")
        if kind.lower() != "pod" or not name:
            continue
        out.append((cell.get("NAMESPACE", ""), name, cell.get("REASON", ""), cell.get("MESSAGE", "")))
    return out
