"""Pod documents shaped to hurt the reader: aliases that expand without end, nesting past Python's stack.

From issue 36: 586 bytes of YAML whose aliases stand for a billion nodes kept ``podmortem diagnose``
walking for ever, a deeply nested object gave a traceback (both from the adversarial shapes of
bench/parser_complexity.py), and 2 KiB of nested flow brackets took half a second (bench/fuzz.py).
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
    with pytest.raises(pasted.BadInput, match="nested"):
        pod_documents.pods_from_document(text)


def test_deep_flow_nesting_is_refused_before_the_yaml_scanner_works_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PyYAML's scanner re-checks every open flow level on each token: 2 KiB of ``[`` (what bench/fuzz.py
    found) took half a second. Counted by the scanner's own check, no clock."""
    import yaml.scanner

    calls = 0
    real = yaml.scanner.Scanner.stale_possible_simple_keys

    def counting(self: yaml.scanner.Scanner) -> None:
        nonlocal calls
        calls += 1
        real(self)

    monkeypatch.setattr(yaml.scanner.Scanner, "stale_possible_simple_keys", counting)
    with pytest.raises(pasted.BadInput, match="nested"):
        pod_documents.pods_from_document(_POD + "  a: " + "[" * 2000 + "\n")
    assert calls < 100


def test_flow_style_a_pod_uses_still_reads() -> None:
    text = _POD + "  containerStatuses: [{name: c, lastState: {terminated: {exitCode: 137}}}]\n"
    [pod] = pod_documents.pods_from_document(text)
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 137
