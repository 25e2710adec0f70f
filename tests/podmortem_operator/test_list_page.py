"""A list page decoded item by item as its bytes arrive: the same items and metadata as ``json.loads``
however the bytes are cut, within its budgets, and an estimate of each item's decoded size."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podmortem.operator.watching.list_page import ListPage, PageTooLong, decoded_estimate

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _decode(data: bytes, cuts: Sequence[int] = (), **limits: int) -> tuple[list[Any], dict[str, Any]]:
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    parts = [data[a:b] for a, b in itertools.pairwise(bounds)]
    page = ListPage(limit=limits.get("limit", 1 << 30), item_limit=limits.get("item_limit", 1 << 20))
    items = [item async for item, _ in page.items(_chunks(parts))]
    return items, page.metadata


@given(items=st.lists(_json, max_size=8), meta=st.dictionaries(st.text(max_size=6), _json, max_size=3),
       meta_first=st.booleans(), extra=st.dictionaries(st.sampled_from(["kind", "apiVersion", "x"]), _json),
       indent=st.sampled_from([None, 0, 2]), ascii_only=st.booleans(),
       cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
async def test_items_and_metadata_are_json_loads_however_the_bytes_are_cut(
    items: list[Any], meta: dict[str, Any], meta_first: bool, extra: dict[str, Any], indent: int | None,
    ascii_only: bool, cuts: list[int],
) -> None:
    doc = {**extra, "metadata": meta, "items": items} if meta_first else {**extra, "items": items,
                                                                          "metadata": meta}
    data = json.dumps(doc, indent=indent, ensure_ascii=ascii_only).encode()
    got, metadata = await _decode(data, cuts)
    assert got == json.loads(data)["items"]
    assert metadata == meta


async def test_a_number_cut_between_chunks_is_read_whole() -> None:
    data = b'{"kind": 123456, "metadata": {"resourceVersion": "9"}, "items": [{"n": 1}]}'
    for cut in range(len(data)):
        assert await _decode(data, [cut]) == ([{"n": 1}], {"resourceVersion": "9"})


async def test_a_page_over_its_budget_is_refused_before_it_is_read_whole() -> None:
    data = json.dumps({"items": [{"n": "x" * 100}] * 50}).encode()
    with pytest.raises(PageTooLong, match="page is over 1000 bytes"):
        await _decode(data, list(range(0, len(data), 100)), limit=1000)


async def test_an_item_over_its_budget_is_refused() -> None:
    data = json.dumps({"items": [{"n": 1}, {"n": "x" * 5000}]}).encode()
    with pytest.raises(PageTooLong, match="item of a pod list page is over 1000 bytes"):
        await _decode(data, list(range(0, len(data), 100)), item_limit=1000)


@pytest.mark.parametrize("data", [b"", b"[]", b'{"items": [1, 2', b'{"items": [1} ', b'{"items": []} x',
                                  b'{"items": [{"a": 1}]', b"\xff\xfe"])
async def test_what_is_not_a_list_page_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        await _decode(data)


async def test_a_page_in_many_chunks_holds_one_item_not_the_page() -> None:
    """2,000 items of 1 KB in 4 KB chunks: the decoder's peak is a few items, not the 2 MB page."""
    data = json.dumps({"items": [{"n": i, "pad": "x" * 1000} for i in range(2000)]}).encode()
    parts = [data[at:at + 4096] for at in range(0, len(data), 4096)]
    page = ListPage(limit=1 << 30, item_limit=1 << 20)
    count = 0
    tracemalloc.start()
    try:
        async for _item, _ in page.items(_chunks(parts)):
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 2000 and peak < 300_000


@given(value=st.lists(_json) | st.dictionaries(st.text(), _json), ascii_only=st.booleans())
def test_the_estimate_covers_what_an_item_holds_once_decoded(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    tracemalloc.start()
    try:
        decoded = json.loads(text)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del decoded
    assert decoded_estimate(text) >= held
    assert decoded_estimate(text.encode()) >= held  # a watch event's line: its bytes
