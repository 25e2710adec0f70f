"""The evidence document as the operator reads it: any text gives a document or `EvidenceInvalid`."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podmortem.reports import sidecar_evidence as ev

HEAD = '{"v": 1, "podmortem": "0.1.0", "reason": "sigterm", "at": "2026-03-01T12:00:00Z"'


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("{", "document"),
        ("[]", "document"),
        ('{"v": 2, "podmortem": "9", "reason": "sigterm", "at": "2026-03-01T12:00:00Z"}', "v"),
        ('{"v": 1, "podmortem": "0.1.0", "reason": "sigterm"}', "at"),
        ('{"v": 1, "podmortem": "0.1.0", "reason": "bored", "at": "2026-03-01T12:00:00Z"}', "reason"),
        ('{"v": 1, "podmortem": "0.1.0", "reason": "sigterm", "at": "2026-03-01T12:00:00"}', "at"),
        (
            HEAD + ', "samples": -1}',
            "samples",
        ),
        (
            HEAD + ', "samples": "3"}',
            "samples",
        ),
        (
            HEAD + ', "samples": true}',
            "samples",
        ),
        (
            HEAD + ', "interval_s": NaN}',
            "interval_s",
        ),
        (
            HEAD + ', "interval_s": 1e999}',
            "interval_s",
        ),
        (
            HEAD + ', "samples": ' + "9" * 30 + "}",
            "samples",
        ),
        (
            HEAD + ', "top": [' + ",".join(['{"pid": 1, "comm": "x", "role": "worker"}'] * 17) + "]}",
            "top",
        ),
        (
            HEAD + ", "
            '"kill": {"victim": {"pid": 0, "comm": "x", "role": "trainer"}, "at": "2026-03-01T12:00:00Z"}}',
            "kill",
        ),
        ("[" * 2000 + "]" * 2000, "document"),
        ('"' + "x" * 5000 + '"', "bytes"),
    ],
)
def test_parse_refuses_what_is_not_a_document(text: str, why: str) -> None:
    with pytest.raises(ev.EvidenceInvalid) as caught:
        ev.parse(text)
    message = str(caught.value)
    assert why in message
    assert len(message) <= ev.MAX_TEXT and "\n" not in message


def test_parse_refuses_invalid_utf8_and_other_types() -> None:
    with pytest.raises(ev.EvidenceInvalid):
        ev.parse(b'{"v": 1, "podmortem": "\xff"}')
    with pytest.raises(ev.EvidenceInvalid):
        ev.parse(12)  # type: ignore[arg-type]


def test_unknown_keys_from_a_newer_writer_are_ignored_and_strings_cleaned() -> None:
    text = (
        '{"v": 1, "podmortem": "0.2\\u0007", "reason": "sigterm", "at": "2026-03-01T12:00:00Z", '
        '"future": {"x": [1, 2]}}'
    )
    doc = ev.parse(text)
    assert doc.podmortem == "0.2?"
    assert doc.kill is None and doc.top == [] and doc.oom == ev.OomCounter()


@given(st.binary(max_size=ev.MAX_MESSAGE_BYTES + 64))
def test_any_bytes_give_a_document_or_the_one_error(data: bytes) -> None:
    try:
        doc = ev.parse(data)
    except ev.EvidenceInvalid as exc:
        assert len(str(exc)) <= ev.MAX_TEXT
        return
    assert len(ev.render(doc).encode()) <= ev.MAX_MESSAGE_BYTES


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@given(
    st.fixed_dictionaries(
        {
            "v": st.just(1) | _json,
            "podmortem": st.text(max_size=40) | _json,
            "reason": st.sampled_from(["sigterm", "trainer-gone"]) | _json,
            "at": st.just("2026-03-01T12:00:00Z") | _json,
        },
        optional={
            "mem": st.dictionaries(st.sampled_from(["usage", "limit", "peak", "age_s"]), _json),
            "top": _json,
            "kill": _json,
            "trend": st.lists(st.integers(), max_size=40) | _json,
            "oom": st.dictionaries(st.sampled_from(["before", "after"]), _json),
            "samples": _json,
        },
    )
)
def test_near_documents_give_a_document_or_the_one_error(data: dict[str, object]) -> None:
    text = json.dumps(data, allow_nan=True)
    try:
        doc = ev.parse(text)
    except ev.EvidenceInvalid:
        return
    for number in [
        doc.samples,
        *doc.trend,
        *(doc.mem.model_dump(exclude_none=True).values() if doc.mem else []),
    ]:
        assert 0 <= number <= ev.MAX_SECONDS or (isinstance(number, int) and 0 <= number <= ev.MAX_INT)
