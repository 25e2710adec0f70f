"""The kernel record's state, read once for the operator, the report page and the demo."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from podmortem.reports.stored_fields import kernel_record_state


def test_both_forms_of_a_stored_report() -> None:
    assert kernel_record_state({"evidence": {"kernelRecord": {"state": "attached"}}}) == "attached"
    assert kernel_record_state({"kernelRecord": "pending"}) == "pending"  # the annotation's summary
    assert kernel_record_state(None) is None and kernel_record_state({}) is None


json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@given(st.dictionaries(st.sampled_from(["kernelRecord", "evidence", "pod"]), json, max_size=3))
def test_an_edited_report_gives_a_string_or_none_and_never_raises(document: dict[str, Any]) -> None:
    state = kernel_record_state(document)
    assert state is None or isinstance(state, str)
