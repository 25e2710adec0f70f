"""What ``podmortem diagnose`` reads besides kernel records: pod objects, ``kubectl describe pod``, log tails.

The operator reports a failed training pod from three things: the pod's status (a `Termination`),
the container's last log lines, and the kernel record the node agent hands over. Off the cluster a
person has the same three as files: ``kubectl get pod -o yaml`` (or ``-o json``, or ``kubectl
describe pod``), ``kubectl logs --previous``, the node's ``dmesg``. This module tells which kind a
text is (`sniff`), reads pod objects and ``kubectl describe pod`` text into the pod object the
operator would see (`pods_from_document`, `pods_from_describe`), pairs each failed container with
its log and its kernel records, and runs the operator's own `verdicts.diagnose_termination` on
each (`combine`): one classification, whoever asks. Pure: text in, reports out; reading files
(streamed, bounded) is `podmortem.cli.diagnose_inputs`'.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from podmortem.diagnosis import job_root_cause as jrc
from podmortem.diagnosis import termination as term_mod
from podmortem.diagnosis import verdicts
from podmortem.diagnosis.logs import STALE_AFTER
from podmortem.diagnosis.termination import Termination
from podmortem.reports.evidence import PodEvidence
from podmortem.reports.failure import FailureReport
from podmortem.reports.oom_record import OomKillRecord

Kind = Literal["kernel", "pod", "describe", "log"]
KINDS: tuple[Kind, ...] = ("kernel", "pod", "describe", "log")

#: The operator's log tail (``podmortem.operator.following``: ``TAIL_LINES``, ``TAIL_LINE_BYTES``,
#: ``TAIL_BYTES``): the same lines reach the same rules offline. A test holds them equal.
TAIL_LINES = 50
TAIL_LINE_BYTES = 4096
TAIL_BYTES = 64 * 1024
#: A pod object or ``kubectl describe`` text is a few KiB; anything bigger is not one.
DOCUMENT_MAX_BYTES = 16 * 2**20
#: The exit code a log alone is read with: CPython exits 1 on an uncaught exception, torchrun too
#: when a worker failed. ``--exit-code`` gives the real one.
ASSUMED_EXIT = 1


class BadInput(ValueError):
    """A text that claims to be a pod object or ``kubectl describe`` output but cannot be read as one."""


def clip(head: bytes, length: int) -> bytes:
    """A line of ``length`` bytes that begins with ``head``, clipped as the operator clips its tail lines.

    ``head`` holds at least the first ``TAIL_LINE_BYTES + 1`` bytes when the line is longer: the
    line is cut there (never inside a UTF-8 character) and a marker says how much was left out.
    """
    if length <= TAIL_LINE_BYTES:
        return head[:length]
    cut = TAIL_LINE_BYTES
    for _ in range(3):  # back up over UTF-8 continuation bytes to a character's start
        if head[cut] & 0xC0 != 0x80:
            break
        cut -= 1
    return head[:cut] + b" [podmortem: %d more bytes]" % (length - cut)


# -- which kind of text ----------------------------------------------------------------------------

_JSON_POD = re.compile(r'"kind"\s*:\s*"(?:Pod|PodList|List)"|"containerStatuses"\s*:')
_YAML_KIND = re.compile(r'^kind:[ \t]*["\']?(?:Pod|PodList|List)["\']?[ \t]*$', re.MULTILINE)
_YAML_TOP = re.compile(r"^(?:apiVersion|metadata|status|spec|items):", re.MULTILINE)
_YAML_STATUS = re.compile(r"^containerStatuses:", re.MULTILINE)
_YAML_FIRST = re.compile(r"(?:---|[A-Za-z][\w.-]*:(?:[ \t].*)?)$")
_DESCRIBE_NAME = re.compile(r"Name:[ \t]+\S")
_DESCRIBE_NAMESPACE = re.compile(r"^Namespace:[ \t]", re.MULTILINE)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return line.rstrip()
    return ""


def sniff(text: str) -> Kind | None:
    """``pod`` (a pod object, a list of them or a pod's status, YAML or JSON), ``describe`` (``kubectl
    describe pod``), or None: kernel log text or a training log, which the caller tells apart.

    ``text`` is the input's beginning (the first 64 KiB is plenty): every form names itself in its
    first lines. A JSON-lines training log or a pod object quoted inside a log is not a pod: the
    whole text must start as one.
    """
    body = text.lstrip("\ufeff \t\r\n")
    if body.startswith(("{", "[")):
        return "pod" if _JSON_POD.search(text) else None
    first = _first_line(body)
    if _DESCRIBE_NAME.match(first) and _DESCRIBE_NAMESPACE.search(text):
        return "describe"
    if not _YAML_FIRST.match(first):
        return None
    if _YAML_KIND.search(text) and _YAML_TOP.search(text):
        return "pod"
    if _YAML_STATUS.search(text):  # a pod's status alone (``yq .status``)
        return "pod"
    return None


# -- pod objects -----------------------------------------------------------------------------------

_STATUS_KEYS = ("containerStatuses", "initContainerStatuses", "phase", "conditions")


def _yaml_documents(text: str) -> list[Any]:
    try:
        import yaml
    except ImportError as exc:
        raise BadInput(
            "reading YAML needs PyYAML (pip install pyyaml, or podmortem[operator]); "
            "or give the pod as JSON: kubectl get pod POD -o json"
        ) from exc
    try:
        return [_plain(doc) for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise BadInput(f"not valid YAML: {str(exc).splitlines()[0] if str(exc) else exc}") from exc


def _plain(doc: Any) -> Any:
    """YAML's unquoted timestamps as the API's strings (UTC when they name no zone), as JSON gives them."""
    if isinstance(doc, dict):
        return {key: _plain(value) for key, value in doc.items()}
    if isinstance(doc, list):
        return [_plain(value) for value in doc]
    if isinstance(doc, datetime):
        return (doc if doc.tzinfo is not None else doc.replace(tzinfo=UTC)).isoformat()
    return doc


def pods_from_document(text: str) -> list[dict[str, Any]]:
    """The pods in ``kubectl get pod -o yaml|json`` output: a Pod, a ``List`` of them, or a pod's ``status``.

    Other objects (a Job, an Event) hold no pod and are skipped. Raises `BadInput` when the text is
    neither valid JSON nor valid YAML.
    """
    body = text.lstrip("\ufeff \t\r\n")
    docs: list[Any]
    if body.startswith(("{", "[")):
        try:
            docs = [json.loads(body)]
        except json.JSONDecodeError as exc:
            raise BadInput(f"not valid JSON: {exc}") from exc
    else:
        docs = _yaml_documents(body)
    return [pod for doc in docs for pod in _pods_in(doc)]


def _pods_in(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, list):
        return [pod for item in doc for pod in _pods_in(item)]
    if not isinstance(doc, dict):
        return []
    kind = doc.get("kind")
    if kind in ("List", "PodList") or (kind is None and isinstance(doc.get("items"), list)):
        return _pods_in(doc.get("items") or [])
    if kind == "Pod" or (kind is None and ("metadata" in doc or "spec" in doc) and "status" in doc):
        return [doc]
    if kind is None and any(key in doc for key in _STATUS_KEYS):
        return [{"status": doc}]  # ``kubectl get pod -o jsonpath='{.status}'``
    return []


# -- kubectl describe pod ----------------------------------------------------------------------------

#: ``Key:   value`` at any indentation; keys are words with spaces ("Exit Code", "Last State").
_FIELD = re.compile(r"(?P<indent> *)(?P<key>[A-Za-z_][\w .()/-]*?):(?:[ \t]+(?P<value>.*?))?[ \t]*$")
_MOUNT = re.compile(r"\s*(?P<path>/\S*) from (?P<name>\S+)")
_NAME_LINE = re.compile(r"^Name:[ \t]", re.MULTILINE)
_TIME_FORMS = ("%a, %d %b %Y %H:%M:%S %z", "%a, %d %b %Y %H:%M:%S")
_STATE_FIELDS = {"Reason": "reason", "Message": "message", "Exit Code": "exitCode", "Signal": "signal",
                 "Started": "startedAt", "Finished": "finishedAt"}
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


def pods_from_describe(text: str) -> list[dict[str, Any]]:
    """The pods of ``kubectl describe pod`` output (several when it describes several), as pod objects.

    What a report needs is read: name, namespace, node, labels, annotations, the pod's status,
    reason and message (``Terminating`` for a pod being deleted), every container's and init
    container's State and Last State (Reason, Exit Code, Started, Finished, Message), their
    environment (``TZ``, ``RANK``) and mounts, the volumes (an ``EmptyDir`` at ``/dev/shm``, its
    medium and size limit), the conditions (``DisruptionTarget``) and the Events.
    """
    starts = [m.start() for m in _NAME_LINE.finditer(text)]
    if not starts:
        raise BadInput("no 'Name:' line: not kubectl describe pod output")
    bounds = [*starts, len(text)]
    return [_describe_one(text[a:b].splitlines()) for a, b in itertools.pairwise(bounds)]


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
        return {"apiVersion": "v1", "kind": "Pod", "metadata": self.meta, "spec": self.spec,
                "status": self.status}


def _describe_one(lines: Sequence[str]) -> dict[str, Any]:
    d = _Describe()
    section = ""
    # Inside Containers / Init Containers: the container, its field and the state being read.
    spec: dict[str, Any] | None = None
    cs: dict[str, Any] | None = None
    name_indent: int | None = None
    field_indent: int | None = None
    field_key = ""
    state: dict[str, Any] | None = None
    volume: dict[str, Any] | None = None
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        m = _FIELD.fullmatch(line)
        if indent == 0:
            section, spec, cs, state, volume = "", None, None, None, None
            name_indent = field_indent = None
            if m is None:
                continue
            section = m["key"]
            _describe_top(d, section, m["value"])
            continue
        if section in ("Labels", "Annotations"):
            _describe_top(d, section, line.strip())
        elif section in ("Containers", "Init Containers"):
            init = section == "Init Containers"
            if m is not None and not m["value"] and (name_indent is None or indent <= name_indent):
                name_indent, field_indent, field_key, state = indent, None, "", None
                spec = {"name": m["key"], "env": [], "volumeMounts": []}
                cs = {"name": m["key"]}
                d.spec["initContainers" if init else "containers"].append(spec)
                d.status["initContainerStatuses" if init else "containerStatuses"].append(cs)
                continue
            if spec is None or cs is None:
                continue
            if field_indent is None or indent <= field_indent:  # a field of the container
                if m is None:
                    continue
                field_indent, field_key, state = indent, m["key"], None
                value = _value(m["value"])
                if field_key == "Container ID" and value:
                    cs["containerID"] = value
                elif field_key in ("State", "Last State") and value:
                    state = {}
                    cs["state" if field_key == "State" else "lastState"] = {value.split()[0].lower(): state}
                continue
            if field_key in ("State", "Last State") and state is not None and m is not None:
                key = _STATE_FIELDS.get(m["key"])
                value = _value(m["value"])
                if key in ("exitCode", "signal") and value and re.fullmatch(r"-?\d+", value):
                    state[key] = int(value)
                elif key in ("startedAt", "finishedAt") and value:
                    state[key] = _describe_time(value)
                elif key is not None and value:
                    state[key] = value
            elif field_key == "Environment" and m is not None:
                spec["env"].append({"name": m["key"], "value": _value(m["value"]) or ""})
            elif field_key == "Mounts":
                mount = _MOUNT.match(line)
                if mount is not None:
                    spec["volumeMounts"].append({"name": mount["name"], "mountPath": mount["path"]})
        elif section == "Conditions":
            cells = line.split()
            if len(cells) >= 2 and cells[0] != "Type":
                d.status["conditions"].append({"type": cells[0], "status": cells[1]})
        elif section == "Volumes" and m is not None:
            if not m["value"] and (volume is None or indent <= volume["_indent"]):
                volume = {"name": m["key"], "_indent": indent}
                d.spec["volumes"].append(volume)
            elif volume is not None:
                _describe_volume(volume, m["key"], _value(m["value"]))
        elif section == "Events":
            cells = re.split(r"\s{2,}", line.strip(), maxsplit=4)
            if len(cells) == 5 and cells[0] in ("Normal", "Warning"):
                d.events.append((cells[1], cells[4]))
    for vol in d.spec["volumes"]:
        vol.pop("_indent", None)
    return d.pod()


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

#: ``kubectl logs --timestamps``: RFC3339 with nanoseconds, in UTC, then one space.
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")


@dataclass(frozen=True)
class LogTail:
    """A container's last lines as the operator keeps them, from a file."""

    label: str
    lines: tuple[str, ...]
    #: Lines in the whole file (what was read to reach the tail).
    total_lines: int = 0
    #: Nanoseconds since the epoch of the last line, when ``kubectl logs --timestamps`` stamped it.
    last_line_ns: int | None = None


def tail_of(label: str, raw_lines: Iterable[bytes], *, total_lines: int = 0) -> LogTail:
    """The tail as text, decoded as the operator decodes it; ``kubectl logs --timestamps`` stamps cut off."""
    lines: list[str] = []
    last_ns: int | None = None
    for raw in raw_lines:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        m = _STAMP.match(text)
        if m is not None:
            ns = _stamp_ns(m)
            if ns is not None:
                last_ns = ns
                text = text[m.end():]
        lines.append(text)
    return LogTail(label=label, lines=tuple(lines), total_lines=total_lines, last_line_ns=last_ns)


def _stamp_ns(m: re.Match[str]) -> int | None:
    zone = "+00:00" if m[3] == "Z" else m[3]
    try:
        seconds = datetime.fromisoformat(m[1] + zone)
    except ValueError:
        return None
    fraction = int((m[2] or "0").ljust(9, "0"))
    return int(seconds.timestamp()) * 1_000_000_000 + fraction


# -- pairing and diagnosis -------------------------------------------------------------------------


@dataclass(frozen=True)
class PodInput:
    """One pod object, read from a file (or made up for a log given alone)."""

    pod: Mapping[str, Any]
    #: The file it came from, and how it was read ("pod", "describe", or "log" when made up).
    label: str
    kind: Kind


@dataclass
class Case:
    """One failed container, with what was given about it, and the operator's report of it."""

    source: PodInput
    termination: Termination
    log: LogTail | None
    records: list[OomKillRecord]
    #: Kernel text was given at all: no record for this container then means none was logged.
    kernel_given: bool
    report: FailureReport = field(default_factory=FailureReport)
    #: The exit code was not read from a pod status but assumed (a log given alone).
    exit_assumed: bool = False
    #: The job-level role, as the job report names it ("consequence"), and its line; None: none.
    role: str | None = None
    role_line: str | None = None

    @property
    def kernel_state(self) -> str:
        """``evidence.kernelRecord.state`` as the operator's report says it."""
        if self.records:
            return "attached"
        return "not-found" if self.kernel_given else "not-sought"


@dataclass
class Combined:
    cases: list[Case]
    #: Kernel records no failed container claimed: reported on their own, as kernel text alone is.
    leftover: list[OomKillRecord]
    #: Logs no failed container took, and why.
    unused_logs: list[tuple[LogTail, str]]
    #: Pods whose status shows no failed container.
    not_failed: list[PodInput]


def log_only_pod(log: LogTail, exit_code: int) -> PodInput:
    """The pod a log given alone stands for: one container that exited with ``exit_code``."""
    name = re.sub(r"\.(?:log|txt|out)(?:\.gz)?$", "", log.label.rsplit("/", 1)[-1])
    pod = {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": ""}]},
        "status": {"containerStatuses": [{"name": "", "state": {"terminated": {"exitCode": exit_code}}}]},
    }
    return PodInput(pod=pod, label=log.label, kind="log")


def _uid_forms(uid: str) -> tuple[str, ...]:
    return (uid, uid.replace("-", "_")) if uid else ()


def _record_paths(record: OomKillRecord) -> list[str]:
    paths = [record.task_in_memcg, record.limit_of_memcg, record.oom_group_memcg, record.cpuset]
    if record.oom_kill is not None:
        paths += [record.oom_kill.task_memcg, record.oom_kill.oom_memcg, record.oom_kill.cpuset]
    return [p for p in paths if p]


def _names(record: OomKillRecord, needles: Iterable[str]) -> bool:
    wanted = [n for n in needles if n]
    return any(n in path for path in _record_paths(record) for n in wanted)


_POD_SEGMENT = re.compile(
    r"(?:kubepods(?:-burstable|-besteffort)?-pod[0-9a-f_]{32,36}\.slice|pod[0-9a-f-]{32,36})(?=/|$)"
)


def pod_cgroup(records: Sequence[OomKillRecord]) -> str | None:
    """The pod's own cgroup as the node agent would have found it: a record's path up to the pod's segment."""
    for record in reversed(records):
        for path in _record_paths(record):
            m = _POD_SEGMENT.search(path)
            if m is not None:
                return path[: m.end()]
    return None


def _container_ids(pod: Mapping[str, Any]) -> list[str]:
    ids = []
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or []:
            for value in (cs.get("containerID"), *[
                ((cs.get(s) or {}).get("terminated") or {}).get("containerID") for s in ("state", "lastState")
            ]):
                if value:
                    ids.append(str(value).split("://", 1)[-1])
    return ids


def default_container(pod: Mapping[str, Any]) -> str | None:
    """The container ``kubectl logs POD`` shows: the ``kubectl.kubernetes.io/default-container``
    annotation's, else the first in the spec."""
    meta = pod.get("metadata") or {}
    named = (meta.get("annotations") or {}).get("kubectl.kubernetes.io/default-container")
    if named:
        return str(named)
    containers = (pod.get("spec") or {}).get("containers") or []
    return str(containers[0].get("name", "")) if containers else None


def _log_target(log: LogTail, cases: Sequence[Case], several_logs: bool) -> Case | None:
    """The failed container a log belongs to.

    A file named after a pod or a container (``ddp-worker-1.log``, ``ddp-worker-1.trainer.log``)
    goes to it, the longest names matching; a single log of a single pod goes to its only failed
    container, else to the container ``kubectl logs POD`` shows when that one failed, else to the
    one failed container the status alone cannot explain (not OOMKilled, not evicted).
    """
    base = log.label.rsplit("/", 1)[-1]
    named: list[tuple[int, int, Case]] = []
    for index, case in enumerate(cases):
        t = case.termination
        score = sum(len(name) for name in (t.pod, t.container) if _named_in(name, base))
        if score:
            named.append((score, -index, case))
    if named:
        best = max(named, key=lambda n: (n[0], n[1]))[0]
        top = [c for s, _, c in named if s == best]
        if len({id(c.source) for c in top}) == 1:
            return _within_pod(top)
    if several_logs or not cases or len({id(c.source) for c in cases}) > 1:
        return None
    return _within_pod(cases)


def _named_in(name: str, base: str) -> bool:
    """``name`` is a whole part of the file name ``base`` (between ``.``, ``_``, ``-`` or its ends)."""
    return bool(name) and re.search(rf"(?:^|[._-]){re.escape(name)}(?:[._-]|$)", base) is not None


def _within_pod(cases: Sequence[Case]) -> Case | None:
    """Of one pod's failed containers, the one a log without a container name is of."""
    if len({c.termination.container for c in cases}) == 1:
        return _latest(cases)
    default = default_container(cases[0].source.pod)
    shown = [c for c in cases if c.termination.container == default]
    if shown:
        return _latest(shown)
    unexplained = [
        c for c in cases if c.termination.reason != "OOMKilled" and c.termination.pod_reason != "Evicted"
    ]
    if len({c.termination.container for c in unexplained}) == 1:
        return _latest(unexplained)
    return None


def _latest(cases: Sequence[Case]) -> Case:
    """The latest instance: a log is the last one's (``kubectl logs``) or the one before (``--previous``)."""
    return max(cases, key=lambda c: (c.termination.finished_at is not None,
                                     c.termination.finished_at or datetime.min.replace(tzinfo=UTC)))


def combine(
    pods: Sequence[PodInput],
    logs: Sequence[LogTail],
    records: Sequence[OomKillRecord],
    *,
    kernel_given: bool,
    exit_code: int | None = None,
    stale_after_s: float = STALE_AFTER.total_seconds(),
) -> Combined:
    """Every failed container of ``pods`` with its log and kernel records, diagnosed as the operator does.

    Without any pod, each log stands for a container that failed with ``exit_code`` (or
    `ASSUMED_EXIT`). Kernel records go to the pod whose UID or container ID their cgroup paths
    name (as the node agent matches them); when the pods' UIDs are not known (``kubectl
    describe`` shows none, a log alone has none) and there is one pod, all records are its.
    """
    assumed = False
    own_log: dict[int, LogTail] = {}
    sources = _distinct(pods)
    if not sources:
        assumed = exit_code is None
        for log in logs:
            sources.append(log_only_pod(log, ASSUMED_EXIT if exit_code is None else exit_code))
            own_log[id(sources[-1])] = log
    cases: list[Case] = []
    not_failed: list[PodInput] = []
    for source in sources:
        # Once per container instance, as the operator reports (``Termination.key``): an evicted
        # container's state and last state both read ContainerStatusUnknown with no container ID.
        found = list({t.key: t for t in reversed(term_mod.find(source.pod))}.values())[::-1]
        if not found:
            not_failed.append(source)
        cases += [Case(source=source, termination=t, log=own_log.get(id(source)), records=[],
                       kernel_given=kernel_given, exit_assumed=assumed) for t in found]

    # Logs: a made-up pod has its own; others are matched by name or by the default container.
    unused: list[tuple[LogTail, str]] = []
    if pods:
        for log in logs:
            target = _log_target(log, [c for c in cases if c.log is None], several_logs=len(logs) > 1)
            if target is None:
                why = ("no container of the pods given has failed" if not cases else
                       "cannot tell which failed container it belongs to: name the file after its pod or "
                       "container (POD.log, CONTAINER.log)")
                unused.append((log, why))
            else:
                target.log = log

    # Kernel records, as the agent would hand them over: the pod's own.
    left = list(records)
    by_pod: dict[int, list[Case]] = {}
    for case in cases:
        by_pod.setdefault(id(case.source), []).append(case)
    for group in by_pod.values():
        pod = group[0].source.pod
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        ids = _container_ids(pod)
        mine = [r for r in left if _names(r, (*_uid_forms(uid), *ids))]
        if not mine and not uid and len(by_pod) == 1:
            mine = list(left)
        left = [r for r in left if not any(r is m for m in mine)]
        for case in group:
            case.records = mine

    for case in cases:
        case.report = diagnose(case, stale_after_s=stale_after_s)
    _roles(cases)
    cases.sort(key=lambda c: (c.termination.finished_at is None,
                              c.termination.finished_at or datetime.min.replace(tzinfo=UTC)))
    return Combined(cases=cases, leftover=left, unused_logs=unused, not_failed=not_failed)


def _distinct(pods: Sequence[PodInput]) -> list[PodInput]:
    """Each pod once: the same pod given as an object and as describe text is one pod (the object,
    which has its UID, wins)."""
    kept: dict[tuple[str, str] | int, PodInput] = {}
    for source in sorted(pods, key=lambda p: p.kind != "pod"):
        meta = source.pod.get("metadata") or {}
        name = str(meta.get("name") or "")
        key: tuple[str, str] | int = (str(meta.get("namespace") or ""), name) if name else id(source)
        kept.setdefault(key, source)
    return [p for p in pods if any(p is k for k in kept.values())]


def diagnose(case: Case, *, stale_after_s: float = STALE_AFTER.total_seconds()) -> FailureReport:
    """The operator's report of one failed container: `verdicts.diagnose_termination`, fed as the operator
    feeds it (the agent's evidence holds the pod's kernel records and the cgroup they name)."""
    t = case.termination
    evidence: PodEvidence | None = None
    if case.kernel_given:
        evidence = PodEvidence(
            pod_uid=t.pod_uid, node=t.node or "", namespace=t.namespace, name=t.pod,
            cgroup_path=pod_cgroup(case.records), kernel_records=case.records,
        )
    return verdicts.diagnose_termination(
        termination=t,
        evidence=evidence,
        last_line_ns=case.log.last_line_ns if case.log is not None else None,
        stale_after_s=stale_after_s,
        log_tail=case.log.lines if case.log is not None else (),
    )


def pod_facts(case: Case) -> jrc.PodFacts:
    """The job report's facts of this container (`podmortem.operator.job_report.pod_facts` reads the same)."""
    t = case.termination
    ns = case.log.last_line_ns if case.log is not None else None
    headline = next((f.message for f in case.report.findings if f.code == case.report.verdict), None)
    return jrc.PodFacts(
        pod=t.pod or case.source.label,
        container=t.container,
        rank=jrc.rank_of(case.source.pod),
        exit_code=t.exit_code,
        reason=t.reason or t.pod_reason,
        finished_at=t.finished_at,
        last_line_at=datetime.fromtimestamp(ns / 1e9, UTC) if ns is not None else None,
        verdict=case.report.verdict,
        summary=headline,
        last_lines=case.log.lines if case.log is not None else (),
    )


def _roles(cases: Sequence[Case]) -> None:
    """The job report's role of each failed container: a ``consequence`` when its log or exit names a
    peer's failure and its own verdict is not a cause of its own (`job_root_cause.root_cause`'s rule)."""
    for case in cases:
        facts = pod_facts(case)
        if facts.verdict in jrc.OWN_CAUSES:
            continue
        line = jrc.peer_evidence(facts)
        if line is not None:
            case.role, case.role_line = "consequence", line


def first_failures(cases: Sequence[Case]) -> list[jrc.PodFacts]:
    """One `PodFacts` per pod: its container that ended first, as the job report takes it."""
    firsts: dict[int, Case] = {}
    for case in cases:
        key = id(case.source)
        held = firsts.get(key)
        if held is None or _ends_before(case, held):
            firsts[key] = case
    return [pod_facts(c) for c in firsts.values()]


def _ends_before(a: Case, b: Case) -> bool:
    def order(c: Case) -> tuple[bool, datetime, bool]:
        t = c.termination
        end = t.finished_at or datetime.max.replace(tzinfo=UTC)
        return (t.finished_at is None, end, t.reason != "OOMKilled")

    return order(a) < order(b)

