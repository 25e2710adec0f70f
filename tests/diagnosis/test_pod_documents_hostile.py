"""Pod documents shaped to hurt the reader: aliases that expand without end, nesting past Python's stack.

Both came out of issue 36's adversarial shapes: 586 bytes of YAML whose aliases stand for a billion
nodes kept ``podmortem diagnose`` walking for ever, and a deeply nested object gave a traceback.
"""

from __future__ import annotations

import pytest

from podmortem.diagnosis import pasted, pod_documents

_POD = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nstatus:\n  phase: Failed\n"


def test_a_yaml_alias_is_refused() -> None:
    text = _POD + "  containerStatuses: &s\n  - name: c\n    lastState: {terminated: {exitCode: 137}}\n" \
        "  initContainerStatuses: *s\n"
    with pytest.raises(pasted.BadInput, match="alias"):
        pod_documents.pods_from_document(text)


def test_yaml_without_aliases_still_reads() -> None:
    text = _POD + "  containerStatuses:\n  - name: c\n" \
        "    lastState: {terminated: {exitCode: 137, reason: OOMKilled}}\n"
    [pod] = pod_documents.pods_from_document(text)
    assert pod["status"]["containerStatuses"][0]["name"] == "c"


@pytest.mark.parametrize("text", [
    '{"kind": "Pod", "status": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}",
    _POD + "  a: " + "[" * 5000 + "]" * 5000 + "\n",
], ids=["json", "yaml"])
def test_nesting_deeper_than_the_parser_goes_is_bad_input(text: str) -> None:
    with pytest.raises(pasted.BadInput, match="nested deeper"):
        pod_documents.pods_from_document(text)
