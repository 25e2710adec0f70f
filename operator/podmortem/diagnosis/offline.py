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
from podmortem.reports.failure import FailureReport, KillSummary
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

#: What a paste adds around kubectl's output, and is no part of it: Markdown fences, the shell prompt
#: with the command that printed it (``$ kubectl describe pod ...``, ``oc get pod -o yaml | grep``),
#: and the marks a person leaves where lines were cut (``...``, ``…``, ``[...]``, ``<snip>``).
_FENCE = re.compile(r"\s*(?:```|~~~)")
_PROMPT = re.compile(
    r"\s*(?:\S*[$#%>]\s*)?(?:sudo\s+)?(?:kubectl|oc|k3s\s+kubectl|microk8s[.\s]kubectl)\s+[\w-]"
)
_ELISION = re.compile(r"\s*(?:\.{3,}|…|\[(?:\.{3,}|…|snip)\]|\((?:\.{3,}|…)\)|<(?:snip|\.{3,}|…)>)\s*")

_JSON_POD = re.compile(
    r'"kind"\s*:\s*"(?:Pod|PodList|List)"|"(?:containerStatuses|initContainerStatuses)"\s*:'
    r'|"(?:terminated|termination)"\s*:\s*\{'
)
_YAML_KIND = re.compile(r'^kind:[ \t]*["\']?(?:Pod|PodList|List)["\']?[ \t]*$', re.MULTILINE)
_YAML_TOP = re.compile(r"^(?:apiVersion|metadata|status|spec|items):", re.MULTILINE)
_YAML_STATUS = re.compile(r"^containerStatuses:", re.MULTILINE)
_YAML_FIRST = re.compile(r"(?:---|[A-Za-z][\w.-]*:(?:[ \t].*)?)$")
_DESCRIBE_NAME = re.compile(r"Name:[ \t]+\S")
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
#: Lines looked at to tell a fragment's kind.
_SNIFF_LINES = 200


def _pasted_lines(text: str) -> list[str]:
    """The lines of a paste that can be kubectl's output: without blank lines, Markdown fences,
    shell prompts and elision marks (tabs expanded, line ends stripped)."""
    out = []
    for raw in text.splitlines():
        line = raw.expandtabs(8).rstrip()
        if not line.strip() or _FENCE.match(line) or _PROMPT.match(line) or _ELISION.fullmatch(line):
            continue
        out.append(line)
    return out


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
    lines = _pasted_lines(body[: 64 * 1024])
    return _whole_kind(lines, body) or fragment_kind(lines[:_SNIFF_LINES])


def whole_kind(text: str) -> Kind | None:
    """`sniff`'s answer when the text names itself a whole pod object or describe output (not a part
    of one, which `fragment_kind` tells): such a text that does not read is an input error."""
    body = text.lstrip("\ufeff \t\r\n")
    if body.startswith(("{", "[")):
        return "pod" if _JSON_POD.search(text) else None
    return _whole_kind(_pasted_lines(body[: 64 * 1024]), body)


def _whole_kind(lines: Sequence[str], body: str) -> Kind | None:
    if not lines:
        return None
    first = lines[0].strip()
    if _DESCRIBE_NAME.match(first) and _DESCRIBE_NAMESPACE.search(body):
        return "describe"
    if first.startswith(("{", "[")):  # JSON after a prompt or a fence
        return "pod" if _JSON_POD.search(body) else None
    if not _YAML_FIRST.match(lines[0]):
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


def fragment_kind(lines: Sequence[str]) -> Kind | None:
    """The kind of a part of a pod's status (pasted lines, as `_pasted_lines` gives them), or None.

    Describe text when its first line is one of the describe printer's fields, it shows a container
    state (``State:  Terminated``...) or the pod's phase with a reason, and more than half its lines
    are the printer's fields; the API's YAML or JSON when its first line is a key (``lastState:``,
    ``"oom-test": {``) or a bracket, it shows a ``terminated`` state, ``containerStatuses`` or
    ``reason: Evicted``, and more than half its lines are keys, list items or brackets. A training
    log, prose or a config dump that quotes such a line is neither.
    """
    if not lines:
        return None
    joined = "\n".join(lines)
    if _known_key(lines[0].strip()) is not None and (
        _DESCRIBE_STATE.search(joined) or (_DESCRIBE_PHASE.search(joined) and _DESCRIBE_REASON.search(joined))
    ):
        fields = sum(1 for line in lines if _known_key(line.strip()) is not None)
        if 2 * fields > len(lines):
            return "describe"
    if (_API_LINE.match(lines[0]) or _BRACKETS.fullmatch(lines[0])) and _API_STATE.search(joined):
        return "pod" if _mostly_keys(lines) else None
    return None


# -- pod objects -----------------------------------------------------------------------------------

_STATUS_KEYS = ("containerStatuses", "initContainerStatuses", "phase", "conditions")
#: A pod's ``status`` alone (``-o jsonpath='{.status}'``, or kept from ``-o yaml``) has one of these.
_POD_STATUS_KEYS = (*_STATUS_KEYS, "reason", "message", "startTime", "hostIP", "podIP", "qosClass")
#: The kubelet's reason for a memcg OOM kill: ``OOMKilled``; the first one (kubernetes#3044, 2014)
#: wrote ``OOM Killed``.
_OOM_REASON = re.compile(r"oom[ _-]?killed", re.IGNORECASE)
#: Keys of the API that are not a container's name where a container status sits under one.
_API_WORDS = frozenset({
    "status", "state", "lastState", "containerStatuses", "initContainerStatuses",
    "ephemeralContainerStatuses", "info", "items", "currentState", "terminated", "termination",
    "running", "waiting", "-",
})
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


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

    A part of one is read as well (`_partial`): the ``containerStatuses`` or one container's
    ``lastState`` alone, a ``grep -A`` excerpt, lines elided with ``...``, JSON cut on both ends;
    the 2014 kubelet's container status too (``termination``, ``OOM Killed``, keyed by container
    name). Shell prompts and Markdown fences around the paste are left out. Other objects (a Job,
    an Event) hold no pod and are skipped. Raises `BadInput` when a whole document (one that begins
    as a pod object does) is neither valid JSON nor valid YAML.
    """
    body = "\n".join(_pasted_lines(text.lstrip("\ufeff")))
    if not body:
        return []
    partial = _partial(text, body)
    docs: list[Any]
    try:
        if body.lstrip().startswith(("{", "[")):
            try:
                docs = [json.loads(body)]
            except json.JSONDecodeError as exc:
                raise BadInput(f"not valid JSON: {exc}") from exc
        elif partial and body.lstrip().startswith('"'):  # JSON members without their braces
            raise BadInput("not valid JSON: members of an object without its braces")
        else:
            docs = _yaml_documents(body)
    except BadInput:
        if not partial:
            raise
        pods = _pods_of(_loose_documents(body))
        if not pods:
            raise
        return pods
    pods = _pods_of(docs)
    if not pods and partial:
        pods = _pods_of(_loose_documents(body))
    return pods


def _partial(text: str, body: str) -> bool:
    """The text is a part of a pod object, not a whole one: lines elided, its indentation lost, or it
    does not begin as a document does (``{``, ``[``, ``---`` or a key at the left margin)."""
    lines = body.splitlines()
    if any(_ELISION.fullmatch(line) for line in text.splitlines()):
        return True
    if len(lines) > 2 and all(line[:2] != "  " for line in lines):
        return True  # its indentation was lost
    first = lines[0]
    return not (first.startswith(("{", "[", "---")) or _YAML_FIRST.match(first))


def _pods_of(docs: Iterable[Any]) -> list[dict[str, Any]]:
    """The pods of parsed documents. A pod whose ``containerStatuses`` hold none (a part of a pod, a
    paste that lost its indentation) takes the container states found anywhere in it (`_harvest`);
    a document that is no pod is one when container states are found in it."""
    pods = []
    for doc in docs:
        found = _pods_in(doc)
        if not found:
            harvested = _harvest(doc)
            found = [harvested] if harvested is not None else []
        for pod in found:
            pod = _normalized(pod)
            status = pod.get("status") or {}
            if not status.get("containerStatuses") and not status.get("initContainerStatuses"):
                harvested = _harvest(pod)
                if harvested is not None and harvested["status"]["containerStatuses"]:
                    statuses = [_normalized_status(cs) for cs in harvested["status"]["containerStatuses"]]
                    pod["status"] = {**harvested["status"], **status, "containerStatuses": statuses}
            pods.append(pod)
    return pods


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
    status = doc.get("status")
    if kind is None and isinstance(status, dict) and any(key in status for key in _POD_STATUS_KEYS):
        return [doc]  # the ``status:`` part of ``-o yaml`` alone
    if kind is None and any(key in doc for key in _STATUS_KEYS):
        return [{"status": doc}]  # ``kubectl get pod -o jsonpath='{.status}'``
    return []


def _is_container_status(node: Mapping[str, Any]) -> bool:
    return any(isinstance(node.get(key), dict) and node[key] for key in ("state", "lastState"))


def _is_state(node: Mapping[str, Any]) -> bool:
    return any(isinstance(node.get(key), dict) and node[key] for key in ("terminated", "termination"))


def _is_terminated(node: Mapping[str, Any]) -> bool:
    """A terminated state's own fields, its ``terminated:`` line lost (a flattened or grep'ed paste)."""
    reason = node.get("reason")
    return "exitCode" in node or (isinstance(reason, str) and bool(_OOM_REASON.fullmatch(reason.strip())))


def _harvest(doc: Any) -> dict[str, Any] | None:
    """A pod object from a part of one: every container status, container state or terminated state in
    it (named by its ``name``, or by the key it sits under in the 2014 kubelet's map of them), and
    the pod's phase, reason and message from the mapping that has them. None: nothing of a status."""
    statuses: list[dict[str, Any]] = []
    status: dict[str, Any] = {}
    meta: dict[str, Any] = {}

    def name_of(node: Mapping[str, Any], key: str | None) -> str:
        if isinstance(node.get("name"), str):
            return str(node["name"])
        return key if key is not None and key not in _API_WORDS and _DNS_LABEL.fullmatch(key) else ""

    def walk(node: Any, key: str | None) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, key)
            return
        if not isinstance(node, dict):
            return
        if "phase" in node or key == "status":
            for field_ in ("phase", "reason", "message", "startTime", "conditions"):
                if field_ in node and not isinstance(node[field_], dict):
                    status.setdefault(field_, node[field_])
        slot = "lastState" if key == "lastState" else "state"
        if _is_container_status(node):
            statuses.append({**node, "name": name_of(node, key)})
            return
        if _is_state(node):
            statuses.append({"name": "", slot: node})
            return
        if _is_terminated(node):
            statuses.append({"name": name_of(node, None), slot: {"terminated": node}})
            return
        if key == "metadata":
            meta.update({k: v for k, v in node.items() if k in ("name", "namespace", "uid")})
        for child_key, child in node.items():
            walk(child, str(child_key))

    walk(doc, None)
    if not statuses and status.get("reason") is None:
        return None
    return {"metadata": meta, "status": {**status, "containerStatuses": statuses}}


def _normalized(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as `termination.find` reads it: ``metadata``/``spec``/``status`` as mappings, the
    container statuses as a list of mappings (a paste that lost the ``- `` of its only one has a
    mapping; the 2014 kubelet's map by name), the states as mappings, the 2014 API's ``termination``
    as ``terminated`` and its ``OOM Killed`` as ``OOMKilled``, exit codes and signals as numbers."""
    out = dict(pod)
    for key in ("metadata", "spec", "status"):
        if key in out and not isinstance(out[key], dict):
            out[key] = {}
    meta = dict(out.get("metadata") or {})
    for key in ("name", "namespace", "uid"):
        if key in meta and not isinstance(meta[key], str):
            meta[key] = "" if meta[key] is None else str(meta[key])
    if not isinstance(meta.get("annotations", {}), dict):
        meta["annotations"] = {}
    if "metadata" in out:
        out["metadata"] = meta
    spec = dict(out.get("spec") or {})
    for key in ("containers", "initContainers", "volumes"):
        if key in spec:
            spec[key] = _mapping_list(spec[key])
    for key in ("containers", "initContainers"):
        if key in spec:
            spec[key] = [{**c, **{k: _mapping_list(c[k]) for k in ("env", "volumeMounts") if k in c}}
                         for c in spec[key]]
    if "spec" in out:
        out["spec"] = spec
    status = dict(out.get("status") or {})
    old = out.get("currentState")  # the 2014 API: currentState.status is the phase, .info the containers
    if not status and isinstance(old, dict):
        status = {"phase": old.get("status"), "containerStatuses": old.get("info") or []}
        if isinstance(out.get("id"), str) and not meta.get("name"):  # and the pod's name was its id
            out["metadata"] = {**meta, "name": out["id"], "namespace": str(out.get("namespace") or "")}
        if isinstance(old.get("host"), str):
            out["spec"] = {**spec, "nodeName": old["host"]}
    if "containerStatuses" not in status and isinstance(status.get("info"), dict):
        status["containerStatuses"] = status["info"]
    for key in ("containerStatuses", "initContainerStatuses"):
        if key in status:
            status[key] = [_normalized_status(cs) for cs in _status_list(status[key])]
    if "conditions" in status:
        status["conditions"] = _mapping_list(status["conditions"])
    if status or "status" in out:
        out["status"] = status
    return out


def _mapping_list(value: Any) -> list[dict[str, Any]]:
    """A list of mappings as the API has it: one mapping whose ``- `` was lost is a list of one."""
    if isinstance(value, dict):
        return [value]
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _status_list(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [cs for cs in value if isinstance(cs, dict)]
    if not isinstance(value, dict):
        return []
    if _is_container_status(value) or "name" in value:
        return [value]
    return [{**cs, "name": cs.get("name") or name} for name, cs in value.items() if isinstance(cs, dict)]


def _normalized_status(cs: dict[str, Any]) -> dict[str, Any]:
    out = dict(cs)
    for key in ("state", "lastState"):
        if key not in out:
            continue
        state = out[key]
        if not isinstance(state, dict):
            del out[key]
            continue
        state = {("terminated" if k == "termination" else k): v for k, v in state.items()}
        term = state.get("terminated")
        if isinstance(term, dict):
            term = dict(term)
            reason = term.get("reason")
            if isinstance(reason, str) and _OOM_REASON.fullmatch(reason.strip()):
                term["reason"] = "OOMKilled"
            for number in ("exitCode", "signal"):
                value = term.get(number)
                if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
                    term[number] = int(value)
            state["terminated"] = term
        elif "terminated" in state:
            del state["terminated"]
        out[key] = state
    return out


# -- a part of a pod object, read line by line -------------------------------------------------------

_LOOSE_KEY = re.compile(
    r"""(?:"(?P<dq>(?:[^"\\]|\\.)*)"\s*:\s*|'(?P<sq>(?:[^']|'')*)'\s*:(?:\s+|$)"""
    r"""|(?P<plain>[^\s"'#:{}\[\],-](?:[^:#]*[^\s:#])?|-[^\s:#](?:[^:#]*[^\s:#])?)[ \t]*:(?:\s+|$))"""
    r"""(?P<value>.*)$"""
)
_NUMBER = re.compile(r"-?\d+")


def _loose_documents(body: str) -> list[Any]:
    """A part of a pod object that YAML and JSON do not read, as the mappings its lines show.

    JSON cut on both ends is mended first (its braces balanced, trailing commas dropped); else the
    lines are read as YAML's block style would be, each ``key: value`` under the last key less
    indented than it, whatever does not fit left out: a ``grep`` excerpt that starts and ends
    inside a mapping, lines that lost their indentation, a list that lost its ``- ``.
    """
    if body.lstrip().startswith(("{", "[", '"')):
        mended = _mended_json(body)
        if mended is not None:
            return [mended]
    return [_loose_tree(body)]


#: What matters to JSON's nesting: a whole string, a bracket, or the quote of a string never closed.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]]|"')


def _mended_json(body: str) -> Any | None:
    """JSON cut on both ends, mended: unmatched closing brackets dropped, open ones closed, trailing
    commas dropped, members without their object's braces put in one. None: still not JSON."""
    body = body.strip().rstrip(",")
    out: list[str] = []
    stack: list[str] = []
    at = 0
    for m in _JSON_TOKENS.finditer(body):
        token = m.group()
        if token == '"':
            return None
        if token in ("{", "["):
            stack.append(token)
        elif token in ("}", "]"):
            if not stack or stack[-1] != ("{" if token == "}" else "["):
                out.append(body[at : m.start()])
                at = m.end()
                continue
            stack.pop()
    out.append(body[at:])
    text = "".join(out) + "".join("}" if c == "{" else "]" for c in reversed(stack))
    text = re.sub(r",(\s*[}\]])", r"\1", text)
    if text.lstrip().startswith('"'):
        text = "{" + text + "}"
    try:
        return json.loads(text)
    except ValueError:
        return None


@dataclass
class _Open:
    """A mapping or list being filled, opened by a line at ``indent``."""

    indent: int
    node: dict[str, Any] | list[Any]
    parent: dict[str, Any] | None = None
    key: str = ""
    item: bool = False


def _loose_tree(body: str) -> dict[str, Any]:
    root: dict[str, Any] = {}
    stack = [_Open(-1, root)]
    #: The last plain scalar (its mapping, key, indent), continued by deeper lines.
    last: tuple[dict[str, Any], str, int] | None = None
    #: A quoted scalar still open over lines: its mapping, key, quote and the key's indent (a line
    #: not deeper than the key is no part of it: the closing quote was lost).
    quoted: tuple[dict[str, Any], str, str, int] | None = None
    block = -1  # inside a ``|``/``>`` block scalar of a key at this indent
    for raw in body.splitlines():
        line = raw.expandtabs(8).rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        text = line.strip()
        if quoted is not None and indent <= quoted[3]:
            quoted = None
        if quoted is not None:
            mapping, key, quote, _ = quoted
            closed = text.endswith(quote) and not text.endswith("\\" + quote)
            mapping[key] += " " + (text[:-1] if closed else text)
            if closed:
                if quote == "'":
                    mapping[key] = mapping[key].replace("''", "'")
                quoted = None
            continue
        if block >= 0 and indent > block:
            continue
        block = -1
        dash = text.startswith("- ") or text == "-"
        if dash:
            text = text[1:].lstrip()
        content = indent + len(line.strip()) - len(text)  # where the content after a ``- `` begins
        text = text.rstrip(",").rstrip()
        if not dash and re.fullmatch(r"[\]}]+|\[", text):
            continue
        if dash or text == "{":
            while stack[-1].indent > indent or (stack[-1].indent == indent and stack[-1].item):
                stack.pop()
            top = stack[-1]
            if text == "{" and not dash and not isinstance(top.node, list):
                continue  # an object's own opening brace
            items = _list_at(top)
            if text in ("", "{"):
                item: dict[str, Any] = {}
                items.append(item)
                stack.append(_Open(indent, item, item=True))
                continue
            m = _LOOSE_KEY.match(text)
            if m is None:
                items.append(_scalar(text))
                continue
            item = {}
            items.append(item)
            stack.append(_Open(indent, item, item=True))
            indent = content
        else:
            m = _LOOSE_KEY.match(text)
            if m is None:
                if last is not None and indent > last[2] and isinstance(last[0].get(last[1]), str):
                    last[0][last[1]] += " " + text  # a plain scalar folded over lines
                continue
            while len(stack) > 1 and stack[-1].indent >= indent:
                stack.pop()
        if m["dq"] is not None:
            key = m["dq"]
        else:
            key = m["sq"].replace("''", "'") if m["sq"] is not None else m["plain"]
        value = m["value"].strip()
        mapping = _mapping_at(stack[-1])
        last = None
        if value in ("", "{", "["):
            child: dict[str, Any] | list[Any] = [] if value == "[" else {}
            mapping[key] = child
            stack.append(_Open(indent, child, parent=mapping, key=key))
        elif value[:1] in ("|", ">") and re.fullmatch(r"[|>][-+0-9]*", value):
            mapping[key] = ""
            block = indent
        elif value[:1] in ("'", '"') and (len(value) == 1 or not value.endswith(value[0])):
            mapping[key] = value[1:]
            quoted = (mapping, key, value[0], indent)
        else:
            mapping[key] = _scalar(value)
            last = (mapping, key, indent)
    return root


#: Keys whose value is a mapping in a pod object: a ``- `` under one is of a list whose key was elided.
_API_MAPPINGS = frozenset({
    "metadata", "spec", "status", "state", "lastState", "terminated", "running", "waiting", "labels",
    "annotations", "resources", "limits", "requests",
})


def _list_at(top: _Open) -> list[Any]:
    """The list a ``- `` line (or a JSON array's ``{``) adds to: the open one, or the mapping just
    opened turned into one; a mapping that already has keys gets its items under ``-``."""
    if isinstance(top.node, list):
        return top.node
    if not top.node and top.parent is not None and top.key not in _API_MAPPINGS:
        items: list[Any] = []
        top.parent[top.key] = items
        top.node = items
        return items
    held = top.node.setdefault("-", [])
    if not isinstance(held, list):
        held = top.node["-"] = []
    return held


def _mapping_at(top: _Open) -> dict[str, Any]:
    """The mapping a ``key: value`` line goes into; in a list that lost its ``- ``, its last item."""
    if isinstance(top.node, dict):
        return top.node
    if not top.node or not isinstance(top.node[-1], dict):
        top.node.append({})
    last: dict[str, Any] = top.node[-1]
    return last


def _scalar(value: str) -> Any:
    """A YAML or JSON scalar (or a flow mapping or list written on one line)."""
    if value[:1] == '"' and value.endswith('"') and len(value) > 1:
        try:
            return json.loads(value)
        except ValueError:
            return value[1:-1]
    if value[:1] == "'" and value.endswith("'") and len(value) > 1:
        return value[1:-1].replace("''", "'")
    if value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    value = re.sub(r"\s+#.*$", "", value)
    if _NUMBER.fullmatch(value):
        return int(value)
    return {"true": True, "false": False, "null": None, "~": None}.get(value, value)


# -- kubectl describe pod ----------------------------------------------------------------------------

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
    for line in _pasted_lines(text):
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if _known_key(body) is not None:
            cuts = [m.start("key") for m in _JOINED.finditer(body)]
            if len(cuts) > 1:
                out += [(indent, body[a:b].strip()) for a, b in itertools.pairwise([*cuts, len(body)])]
                continue
        out.append((indent, body))
    return out


def _known_key(body: str) -> str | None:
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
        if _DESCRIBE_NAME.match(body) and body.startswith("Name:")
        and (indent == 0 or (i + 1 < len(lines) and lines[i + 1][1].startswith("Namespace:")))
    ]
    if not starts:
        if not any(_known_key(body) for _, body in lines):
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
    fields = [indent for indent, body in lines if _FIELD.fullmatch(body)]
    # Indentation lost: every line at the margin or one space in. Then only the printer's field
    # names and their order tell where a line belongs.
    flat = max(fields, default=0) <= 1
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
                named = _DNS_LABEL.fullmatch(m["key"]) is not None
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
        and (_DNS_LABEL.fullmatch(key) if flat else (r.name_indent is None or indent <= r.name_indent))
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
    report = verdicts.diagnose_termination(
        termination=t,
        evidence=evidence,
        last_line_ns=case.log.last_line_ns if case.log is not None else None,
        stale_after_s=stale_after_s,
        log_tail=case.log.lines if case.log is not None else (),
    )
    if report.kill is None and not case.records and _killed(t):
        container_id = t.container_id or _status_container_id(case.source.pod, t.container)
        if container_id:
            runtime, _, bare = container_id.rpartition("://")
            report = report.model_copy(update={"kill": KillSummary(
                pod_uid=t.pod_uid or None, container_id=bare or None, runtime=container_runtime(runtime),
            )})
    return report


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
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == container and cs.get("containerID"):
            return str(cs["containerID"])
    return None


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

