"""Pod objects from pasted `kubectl get pod -o yaml|json` text, whole or in parts.

A whole document is read strictly; a part (a grep excerpt, elided, re-indented, JSON cut at both
ends) is read leniently, by indentation or by mending the JSON, and what it holds of a pod's
status is gathered into the pod object the operator would see (`pods_from_document`).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from podmortem.diagnosis.pasted import DNS_LABEL, ELISION, YAML_FIRST, BadInput, pasted_lines

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


#: Flow collections (``[`` and ``{``) open at once in a YAML text, at most: kubectl writes a pod in
#: block style, with flow style for a few short values only. PyYAML's scanner re-checks every open
#: level on each token, so 2 KiB of ``[`` took half a second (found by bench/fuzz.py).
MAX_FLOW_DEPTH = 64
_FLOW = re.compile(r"[\[\]{}]")


def _flow_depth(text: str) -> int:
    """How many flow brackets are open at most, quotes not told apart (linear, and cheap on a pod's YAML)."""
    depth = deepest = 0
    for m in _FLOW.finditer(text):
        if m.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_FLOW_DEPTH:
                    break
        elif depth:
            depth -= 1
    return deepest


def _yaml_documents(text: str) -> list[Any]:
    """The YAML documents of a text, refusing aliases (`_no_alias_loader`) and deep flow nesting."""
    try:
        import yaml
    except ImportError as exc:
        raise BadInput(
            "reading YAML needs PyYAML (pip install pyyaml, or podmortem[operator]); "
            "or give the pod as JSON: kubectl get pod POD -o json"
        ) from exc
    if _flow_depth(text) > MAX_FLOW_DEPTH:
        raise BadInput(f"not read as YAML: brackets nested over {MAX_FLOW_DEPTH} deep (kubectl writes a pod "
                       "in block style)")
    try:
        return [_plain(doc) for doc in yaml.load_all(text, Loader=_no_alias_loader()) if doc is not None]
    except yaml.YAMLError as exc:
        raise BadInput(f"not valid YAML: {str(exc).splitlines()[0] if str(exc) else exc}") from exc


def _no_alias_loader() -> Any:
    """PyYAML's safe loader, refusing aliases: kubectl never writes an anchor, and aliases let a few
    hundred bytes stand for a tree of a billion nodes that every walk below would visit."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None, "an alias (kubectl never writes one)", mark)
            return super().compose_node(parent, index)

    return NoAliasLoader


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
    as a pod object does) is neither valid JSON nor valid YAML, and for nesting deeper than Python's
    parsers go (a pod object is a dozen levels deep).
    """
    try:
        return _pods_from_document(text)
    except RecursionError:
        raise BadInput("nested deeper than the parser goes (a pod object is a dozen levels deep)") from None


def _pods_from_document(text: str) -> list[dict[str, Any]]:
    body = "\n".join(pasted_lines(text.lstrip("\ufeff")))
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
        pods = _pods_of(_loose_documents(body)) or _pods_of(_json_blocks(body))
        if not pods:
            raise
        return pods
    pods = _pods_of(docs)
    if not pods and partial:
        pods = _pods_of(_loose_documents(body))
    return pods


def _json_blocks(body: str) -> list[Any]:
    """JSON objects printed on lines of their own (``jq``'s output) amid a paste's prose and commands."""
    docs: list[Any] = []
    lines = body.splitlines()
    start: int | None = None
    for i, line in enumerate(lines):
        if line == "{":
            start = i
        elif line == "}" and start is not None:
            with contextlib.suppress(json.JSONDecodeError):
                docs.append(json.loads("\n".join(lines[start : i + 1])))
            start = None
    return docs


def _partial(text: str, body: str) -> bool:
    """The text is a part of a pod object, not a whole one: lines elided, its indentation lost, or it
    does not begin as a document does (``{``, ``[``, ``---`` or a key at the left margin)."""
    lines = body.splitlines()
    if any(ELISION.fullmatch(line) for line in text.splitlines()):
        return True
    if len(lines) > 2 and all(line[:2] != "  " for line in lines):
        return True  # its indentation was lost
    first = lines[0]
    return not (first.startswith(("{", "[", "---")) or YAML_FIRST.match(first))


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
    if kind is None and doc.get("type") == "DisruptionTarget" and "status" in doc:
        return [{"status": {"conditions": [doc]}}]  # ``jq '.status.conditions[]'``: the condition alone
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
        return key if key is not None and key not in _API_WORDS and DNS_LABEL.fullmatch(key) else ""

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
