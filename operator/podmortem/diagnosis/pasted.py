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
        out.append(line)
    return out
