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
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from podmortem.diagnosis import in_pod_evidence as in_pod
from podmortem.diagnosis import job_root_cause as jrc
from podmortem.diagnosis import pod_describe, pod_events, sidecar_findings, verdicts
from podmortem.diagnosis import termination as term_mod
from podmortem.diagnosis.log_staleness import STALE_AFTER
from podmortem.diagnosis.pasted import DESCRIBE_NAME, YAML_FIRST, pasted_lines
from podmortem.diagnosis.pasted import BadInput as BadInput
from podmortem.diagnosis.pod_describe import known_key
from podmortem.diagnosis.pod_documents import pods_from_document as pods_from_document
from podmortem.diagnosis.termination import Termination
from podmortem.kube.bodies import PodBody
from podmortem.reports.evidence import PodEvidence
from podmortem.reports.failure import FailureReport, KillSummary
from podmortem.reports.oom_record import OomKillRecord
from podmortem.reports.sidecar_evidence import SidecarEvidence

Kind = Literal["kernel", "pod", "describe", "log"]
KINDS: tuple[Kind, ...] = ("kernel", "pod", "describe", "log")

#: A pod object or ``kubectl describe`` text is a few KiB; anything bigger is not one.
DOCUMENT_MAX_BYTES = 16 * 2**20
#: The exit code a log alone is read with: CPython exits 1 on an uncaught exception, torchrun too
#: when a worker failed. ``--exit-code`` gives the real one.
ASSUMED_EXIT = 1


# -- which kind of text ----------------------------------------------------------------------------

_JSON_POD = re.compile(
    r'"kind"\s*:\s*"(?:Pod|PodList|List)"|"(?:containerStatuses|initContainerStatuses)"\s*:'
    r'|"(?:terminated|termination)"\s*:\s*\{'
)
_YAML_KIND = re.compile(r'^kind:[ \t]*["\']?(?:Pod|PodList|List)["\']?[ \t]*$', re.MULTILINE)
_YAML_TOP = re.compile(r"^(?:apiVersion|metadata|status|spec|items):", re.MULTILINE)
_YAML_STATUS = re.compile(r"^containerStatuses:", re.MULTILINE)
_DESCRIBE_NAMESPACE = re.compile(r"(?:^|\s)Namespace:[ \t]", re.MULTILINE)
#: A pod's status as ``kubectl describe`` prints it, whatever became of its indentation: a container
#: state (``State:``/``Last State:`` and its word), or the pod's phase with a reason (an eviction).
_DESCRIBE_STATE = re.compile(r"(?:^|\s)(?:Last (?:Termination )?)?State:\s+(?:Terminated|Running|Waiting)\b")
_DESCRIBE_PHASE = re.compile(r"(?:^|\s)Status:\s+(?:Failed|Pending|Running|Succeeded|Unknown)\b")
_DESCRIBE_REASON = re.compile(r"(?:^|\s)Reason:\s+\S")
#: A key line of the API's YAML or JSON: a lowerCamel key (``lastState:``), a label's, annotation's
#: or resource's (``nvidia.com/gpu:``), a quoted one (``"oom-test":``), or a list item.
_API_LINE = re.compile(
    r"""\s*(?:-\s+)?(?:"[^"]+"|'[^']+'|[a-z_][\w./-]*)\s*:(?:\s|$)|\s*-\s+\S"""
)
_BRACKETS = re.compile(r"\s*[\[\]{}]+,?\s*")
#: A container that ended, or an evicted pod, in the API's own words (YAML or JSON): a ``terminated``
#: state (``termination`` in the 2014 API), a ``containerStatuses`` list, ``reason: Evicted``.
_API_STATE = re.compile(
    r"""(?:^|[\s{,])["']?(?:terminated|termination)["']?\s*:\s*(?:\{\s*)?$"""
    r"""|(?:^|[\s{,])["']?(?:containerStatuses|initContainerStatuses)["']?\s*:"""
    r"""|(?:^|[\s{,])["']?reason["']?\s*:\s*["']?Evicted\b""",
    re.MULTILINE,
)
#: describe's Events table with the kubelet's eviction: "Warning  Evicted  4m51s  kubelet  …".
_EVICTED_EVENT = re.compile(r"^\s*Warning\s+Evicted\s+\S+\s+kubelet\b", re.MULTILINE)
#: A pod condition object as ``jq`` prints it: ``"type": "DisruptionTarget"``.
_DISRUPTION_JSON = re.compile(r'^\s*"type"\s*:\s*"DisruptionTarget"', re.MULTILINE)
#: Fields a describe part needs when other text comes before it: a log may quote a line or two.
_FIELDS_AFTER_TEXT = 4
#: Lines looked at to tell a fragment's kind.
_SNIFF_LINES = 200


def sniff(text: str) -> Kind | None:
    """``pod`` (a pod object, a list of them or a pod's status, YAML or JSON), ``describe`` (``kubectl
    describe pod``), or None: kernel log text or a training log, which the caller tells apart.

    ``text`` is the input's beginning (the first 64 KiB is plenty): every form names itself in its
    first lines. A JSON-lines training log or a pod object quoted inside a log is not a pod: the
    whole text must start as one. A part of one is read too (`fragment_kind`): a grep'ed or elided
    ``-o yaml``/``-o json``, the ``lastState`` of one container, describe's ``State:`` lines alone,
    describe text whose indentation was lost, after a shell prompt or inside Markdown fences.
    """
    body = text.lstrip("\ufeff \t\r\n")
    if body.startswith(("{", "[")):
        return "pod" if _JSON_POD.search(text) else None
    lines = pasted_lines(body[: 64 * 1024])
    kind = _whole_kind(lines, body) or fragment_kind(lines[:_SNIFF_LINES])
    if kind is None and _fenced_state(body[: 64 * 1024]):
        return "describe"
    return kind


def whole_kind(text: str) -> Kind | None:
    """`sniff`'s answer when the text names itself a whole pod object or describe output (not a part
    of one, which `fragment_kind` tells): such a text that does not read is an input error."""
    body = text.lstrip("\ufeff \t\r\n")
    if body.startswith(("{", "[")):
        return "pod" if _JSON_POD.search(text) else None
    return _whole_kind(pasted_lines(body[: 64 * 1024]), body)


def _whole_kind(lines: Sequence[str], body: str) -> Kind | None:
    if not lines:
        return None
    first = lines[0].strip()
    if DESCRIBE_NAME.match(first) and _DESCRIBE_NAMESPACE.search(body):
        return "describe"
    if first.startswith(("{", "[")):  # JSON after a prompt or a fence
        return "pod" if _JSON_POD.search(body) else None
    if not YAML_FIRST.match(lines[0]):
        return None
    if _YAML_KIND.search(body) and _YAML_TOP.search(body):
        return "pod"  # a pod or a list of them
    if _YAML_STATUS.search(body) and _mostly_keys(lines):
        return "pod"  # a pod's status alone (``yq .status``)
    return None


def _mostly_keys(lines: Sequence[str]) -> bool:
    """More than half of the lines are the API's keys, list items or brackets."""
    lines = lines[:_SNIFF_LINES]
    return 2 * sum(1 for line in lines if _API_LINE.match(line) or _BRACKETS.fullmatch(line)) > len(lines)


#: Lines a describe ``Message:`` may have been wrapped into by a copy (the printer writes it on one).
_MESSAGE_WRAPS = 3


def _field_lines(part: Sequence[str]) -> int:
    """Lines that are describe's fields, a ``Message:`` field's wrapped lines after it included."""
    count = wraps = 0
    for line in part:
        key = known_key(line.strip())
        if key is not None:
            count += 1
            wraps = _MESSAGE_WRAPS if line.strip().startswith("Message:") else 0
        elif wraps:
            count += 1
            wraps -= 1
    return count


def _terminated_block(part: Sequence[str]) -> bool:
    """``part`` is a terminated state alone: its ``State:``/``Last State:  Terminated`` line, then its
    ``Reason:``, and only the state's fields after them."""
    return (len(part) >= 2 and _field_lines(part) == len(part) and _TERMINATED_LINE.match(part[0]) is not None
            and part[1].strip().startswith("Reason:"))


#: A Markdown code fence's line (``` or ~~~, a language after it), at any indentation.
_FENCE = re.compile(r"\s{0,16}(?:```|~~~)[\w+-]{0,32}\s*")


def _fenced_state(body: str) -> bool:
    """A Markdown code block that holds a terminated state alone (`_terminated_block`): a person's paste
    of describe's ``Last State:  Terminated`` / ``Reason:  OOMKilled`` set apart from their prose. A log
    that prints such lines among its own is no fenced block of them."""
    block: list[str] | None = None
    for line in body.splitlines()[:_SNIFF_LINES]:
        if _FENCE.fullmatch(line):
            if block is not None and _terminated_block(block):
                return True
            block = None if block is not None else []
        elif block is not None and line.strip():
            block.append(line)
    return False


#: describe's line of a terminated state: ``State:  Terminated``, ``Last State:  Terminated``.
_TERMINATED_LINE = re.compile(r"\s*(?:Last (?:Termination )?)?State:\s+Terminated\s*$")


def fragment_kind(lines: Sequence[str]) -> Kind | None:
    """The kind of a part of a pod's status (pasted lines, as `pasted_lines` gives them), or None.

    Describe text from its first line that is one of the describe printer's fields (prose or a
    command may come before: then at least four fields), when it shows a container state (``State:
    Terminated``...) or the pod's phase with a reason and more than half its lines from there are
    the printer's fields, or when it is the Events table with the kubelet's ``Evicted``; the API's
    YAML or JSON when its first line is a key (``lastState:``, ``"oom-test": {``) or a bracket, it
    shows a ``terminated`` state, ``containerStatuses`` or ``reason: Evicted``, and more than half
    its lines are keys, list items or brackets, or a ``DisruptionTarget`` condition object on lines
    of its own. A training log, prose or a config dump that quotes such a line is neither.
    """
    if not lines:
        return None
    # The part may follow the poster's prose or commands: it starts at the first of its own lines.
    start = next((i for i, line in enumerate(lines) if known_key(line.strip()) is not None), None)
    if start is not None:
        part = lines[start:]
        joined = "\n".join(part)
        if _EVICTED_EVENT.search(joined):
            return "describe"  # describe's Events alone, the kubelet's eviction among them
        phase = _DESCRIBE_PHASE.search(joined) and _DESCRIBE_REASON.search(joined)
        if _DESCRIBE_STATE.search(joined) or phase:
            fields = _field_lines(part)
            # After other text, a whole state block (State, Reason, Exit Code...), not a quoted line.
            if 2 * fields > len(part) and (start == 0 or fields >= _FIELDS_AFTER_TEXT):
                return "describe"
    joined = "\n".join(lines)
    if (_API_LINE.match(lines[0]) or _BRACKETS.fullmatch(lines[0])) and _API_STATE.search(joined):
        return "pod" if _mostly_keys(lines) else None
    if _terminated_alone(lines):
        return "pod"  # ``yq '.status.containerStatuses[0].lastState.terminated'``: the state's fields alone
    if "{" in lines and _DISRUPTION_JSON.search(joined):
        return "pod"  # ``jq '.status.conditions[]'``: a pod's DisruptionTarget condition alone
    if pod_events.kind_of(lines):
        return "describe"  # ``kubectl get events``, an Events row, ``Message:`` or the kubelet's words alone
    return None


#: A field of the API's ContainerStateTerminated (k8s.io/api/core/v1 types.go), as YAML prints it.
_TERMINATED_KEY = re.compile(
    r"\s{0,16}(exitCode|signal|reason|message|startedAt|finishedAt|containerID)[ \t]*:[ \t]+\S"
)
#: Shell commands (``$ kubectl get pod ... | yq ...``) that may come before a terminated state's fields.
_COMMAND_LINES = 3
_PROMPT = ("$ ", "% ")


def _terminated_alone(lines: Sequence[str]) -> bool:
    """The fields of one terminated state, at one indentation and nothing after them (``exitCode`` among
    them), after at most a few shell commands: a query's output (yq, ``-o jsonpath``) of
    ``lastState.terminated`` or ``state.terminated`` at whatever depth it was taken, its own key left
    behind. A log that quotes such lines after its own is none."""
    head = lines[:_COMMAND_LINES + 1]
    start = next((i for i, line in enumerate(head) if _TERMINATED_KEY.match(line)), None)
    if start is None or not all(line.lstrip().startswith(_PROMPT) for line in head[:start]):
        return False
    part = lines[start:_SNIFF_LINES]
    keys = [m.group(1) for line in part if (m := _TERMINATED_KEY.match(line))]
    indents = {len(line) - len(line.lstrip()) for line in part}
    return len(keys) == len(part) and len(keys) >= 2 and "exitCode" in keys and len(indents) == 1


# -- pod objects -----------------------------------------------------------------------------------


def pods_from_describe(text: str) -> list[dict[str, Any]]:
    """The pods of ``kubectl describe pod`` text (`pod_describe.pods_from_describe`), or, where it is
    none, of what people paste instead: ``kubectl get events`` rows, one Events row, the ``Message:``
    line or the kubelet's message alone (`pod_events.pods_from_events`)."""
    try:
        return pod_describe.pods_from_describe(text)
    except BadInput:
        pods = pod_events.pods_from_events(pasted_lines(text))
        if pods:
            return pods
        raise


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
    body = PodBody(pod)
    for cs in (*body.statuses, *body.init_statuses):
        for value in (cs.container_id, *(t.container_id for t in cs.terminations())):
            if value:
                ids.append(value.split("://", 1)[-1])
    return ids


def default_container(pod: Mapping[str, Any]) -> str | None:
    """The container ``kubectl logs POD`` shows: the ``kubectl.kubernetes.io/default-container``
    annotation's, else the first in the spec."""
    body = PodBody(pod)
    named = body.annotations.get("kubectl.kubernetes.io/default-container")
    if named:
        return named
    containers = body.containers
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
        if not found and (pending := term_mod.being_disrupted(source.pod)) is not None:
            found = [pending]
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
        uid = PodBody(pod).uid
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
        body = PodBody(source.pod)
        name = body.name
        key: tuple[str, str] | int = (body.namespace, name) if name else id(source)
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
    report = verdicts.diagnose_termination(
        termination=t,
        evidence=evidence,
        last_line_ns=case.log.last_line_ns if case.log is not None else None,
        stale_after_s=stale_after_s,
        log_tail=case.log.lines if case.log is not None else (),
    )
    sidecar = None if case.records else sidecar_evidence(t)
    if sidecar is not None:
        # Sidecar mode: the operator's report where no kernel record came (`rediagnose`'s order).
        report = sidecar_findings.apply(report, t, sidecar)
    if report.kill is None and not case.records and _killed(t):
        container_id = t.container_id or _status_container_id(case.source.pod, t.container)
        if container_id:
            runtime, _, bare = container_id.rpartition("://")
            report = report.model_copy(update={"kill": KillSummary(
                pod_uid=t.pod_uid or None, container_id=bare or None, runtime=container_runtime(runtime),
            )})
    return report


def sidecar_evidence(t: Termination) -> SidecarEvidence | None:
    """The evidence the pod's ``podmortem sidecar`` left in its termination message, read and checked
    against the kubelet as the operator reads it (`sidecar_findings.read`); None when there is none,
    or it does not read, or it contradicts the kubelet.

    The operator reads only the container it injected, known by its configured image and command.
    Off the cluster that configuration is not at hand: the native sidecar that runs ``podmortem
    sidecar`` (the command the operator injects) is taken as the injected one, with its own image.
    """
    for candidate in t.sidecars:
        runs = any(w.rsplit("/", 1)[-1] == "podmortem" and n == "sidecar"
                   for w, n in itertools.pairwise(candidate.command))
        if not (candidate.native_sidecar and candidate.plain and candidate.image and runs):
            continue
        identity = in_pod.SidecarIdentity(image=candidate.image, command=candidate.command)
        read = sidecar_findings.read(t, identity)
        if read.evidence is not None:
            return read.evidence
    return None


#: The runtime a pod status's ``containerID`` names (``<type>://<id>``, the CRI runtime's name), in
#: the words the kernel record's cgroup paths give (`podmortem.cgroups.paths`).
_ID_RUNTIMES = {"containerd": "containerd", "cri-containerd": "containerd", "cri-o": "cri-o", "crio": "cri-o",
                "docker": "docker", "podman": "podman"}


def container_runtime(scheme: str) -> str | None:
    """``containerd`` for ``containerd://...``, ``cri-o`` for ``cri-o://...``; another scheme as it is."""
    scheme = scheme.strip().lower()
    return _ID_RUNTIMES.get(scheme, scheme) or None


def _killed(t: Termination) -> bool:
    """The container was killed, not exited: OOMKilled, a signal's exit code (128+n), an eviction or a
    disruption. Its report's ``kill`` names the container the status shows, without a kernel record."""
    return (t.reason == "OOMKilled" or (t.exit_code is not None and t.exit_code > 128)
            or t.pod_reason == "Evicted" or t.disruption is not None)


def _status_container_id(pod: Mapping[str, Any], container: str) -> str | None:
    """The container's ID in the pod status, where the termination has none (an evicted pod's
    container that was still running, as describe shows it)."""
    for cs in PodBody(pod).statuses:
        if cs.name == container and cs.container_id:
            return cs.container_id
    return None


def pod_facts(case: Case) -> jrc.PodFacts:
    """The job report's facts of this container (`job_section.pod_facts` reads the same)."""
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

