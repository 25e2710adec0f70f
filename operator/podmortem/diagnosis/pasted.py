"""What a paste adds around kubectl's output, and the kinds' first-line shapes, for every reader.

Shared by the pod-status readers (`pod_documents`, `pod_describe`) and by `offline`, which tells a
text's kind: Markdown fences, shell prompts and elision marks are no part of kubectl's output.
"""

from __future__ import annotations

import re


class BadInput(ValueError):
    """A text that claims to be a pod object or ``kubectl describe`` output but cannot be read as one."""


#: What a paste adds around kubectl's output, and is no part of it: Markdown fences, the shell prompt
#: with the command that printed it (``$ kubectl describe pod ...``, ``oc get pod -o yaml | grep``),
#: and the marks a person leaves where lines were cut (``...``, ``…``, ``[...]``, ``<snip>``).
FENCE = re.compile(r"\s*(?:```|~~~)")
PROMPT = re.compile(
    r"\s*(?:\S*[$#%>]\s*)?(?:sudo\s+)?(?:kubectl|oc|k3s\s+kubectl|microk8s[.\s]kubectl)\s+[\w-]"
)
ELISION = re.compile(r"\s*(?:\.{3,}|…|\[(?:\.{3,}|…|snip)\]|\((?:\.{3,}|…)\)|<(?:snip|\.{3,}|…)>)\s*")
YAML_FIRST = re.compile(r"(?:---|[A-Za-z][\w.-]*:(?:[ \t].*)?)$")
DESCRIBE_NAME = re.compile(r"Name:[ \t]+\S")
#: describe's pod fields glued on one line where a copy lost their line ends (the printer writes
#: ``Status:``, ``Reason:`` and ``Message:`` on lines of their own, the phase and reason single
#: words): "Status:   FailedReason:   EvictedMessage:  The node was low on resource: memory.".
_GLUED_STATUS = re.compile(
    r"(?P<indent>\s*)Status:\s+(?P<phase>Failed|Pending|Running|Succeeded|Unknown)"
    r"Reason:\s+(?P<reason>[A-Z][A-Za-z]{0,63}?)(?:Message:\s+(?P<message>.*))?"
)
#: A DNS-1123 label: a container's or volume's name.
DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def pasted_lines(text: str) -> list[str]:
    """The lines of a paste that can be kubectl's output: without blank lines, Markdown fences,
    shell prompts and elision marks (tabs expanded, line ends stripped)."""
    out = []
    for raw in text.splitlines():
        line = raw.expandtabs(8).rstrip()
        if not line.strip() or FENCE.match(line) or PROMPT.match(line) or ELISION.fullmatch(line):
            continue
        glued = _GLUED_STATUS.fullmatch(line) if "Reason:" in line else None
        if glued is not None:
            indent = glued["indent"]
            out += [f"{indent}Status:  {glued['phase']}", f"{indent}Reason:  {glued['reason']}"]
            if glued["message"] is not None:
                out.append(f"{indent}Message:  {glued['message']}")
            continue
        out.append(line)
    return out
