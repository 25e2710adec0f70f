"""``since=`` takes ASCII only: ``٣h`` (an Arabic-Indic 3) or a no-break space is a 400, not 3 h.

Python's ``\\d`` and ``str.strip()`` know every Unicode digit and space; kubectl and the
apiserver know ASCII. A non-ASCII character in ``since`` is refused, except the micro sign
of Go's ``µs``, which means exactly ``us``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import test_utils
from hypothesis import given
from hypothesis import strategies as st

from podmortem.logs import timestamps
from podmortem.logs.serving import auth, http
from podmortem.logs.storage.store import LogStore, StoreSettings

NOW = 1_714_564_800 * 10**9

VALID = ["3h", "1h30m", "10m", "90s", "1.5h", "250ms", "10us", "10µs", "7ns",
         "2024-05-01T12:00:00Z", "2024-05-01T12:00:00.5+01:00", "2024-05-01T12:00:00.123456789Z"]


@pytest.mark.parametrize("value", [
    "٣h",                                # Arabic-Indic digit three
    "３h",                               # fullwidth digit three
    "1h٣0m",
    "1.٥h",
    "\u00a03h",                          # a no-break space, stripped by str.strip()
    "3h\u2028",                          # a line separator
    "\u30002024-05-01T12:00:00Z",        # an ideographic space before a valid time
    "٢024-05-01T12:00:00Z",
    "2024-05-01T12:00:00.١Z",
    "2024-05-01T12:00:00+0٣:00",
    "10μs",                              # a Greek mu, not the micro sign
])
def test_non_ascii_digits_and_spaces_are_refused(value: str) -> None:
    with pytest.raises(http.BadParams, match="since must be"):
        http.parse_since(value, now_ns=NOW)


def test_ascii_durations_and_times_still_parse() -> None:
    assert http.parse_since("3h", now_ns=NOW) == NOW - 3 * 3600 * 10**9
    assert http.parse_since(" 1h30m\t", now_ns=NOW) == NOW - 5400 * 10**9
    assert http.parse_since("10µs", now_ns=NOW) == http.parse_since("10us", now_ns=NOW) == NOW - 10_000
    assert http.parse_since("2024-05-01T13:00:00+01:00") == NOW


@pytest.mark.parametrize("stamp", [
    "٢024-05-01T12:00:00Z".encode(),
    "2024-05-01T12:00:00.١Z".encode(),
    "2024-05-01T12:00:00+0٣:00".encode(),
    b"2024-05-01T12:00:00+ 1:00",        # int() would take the space
    b"2024-05-01T12:00:00+-1:00",        # and a sign
    b"2024-05-01T12:00:00+01:+0",
])
def test_timestamps_take_ascii_digits_only(stamp: bytes) -> None:
    with pytest.raises(timestamps.BadTimestamp):
        timestamps.parse_ns(stamp)


def test_timestamp_offsets_still_parse() -> None:
    assert timestamps.parse_ns(b"2024-05-01T10:30:00-01:30") == NOW
    assert timestamps.parse_ns(b"2024-05-01T14:00:00+02:00") == NOW


#: Non-ASCII characters; the digits and spaces that ``\\d`` and ``str.strip()`` take are drawn often.
_NON_ASCII = st.one_of(
    st.sampled_from("\u0663\uff13\u0966\u00a0\u2028\u3000\u2009\u00b5\u03bc\u0660"),
    st.integers(0x80, 0x10FFFF).filter(lambda c: not 0xD800 <= c <= 0xDFFF).map(chr),
)
_ANY = st.text(st.one_of(st.integers(0, 0x7F).map(chr), _NON_ASCII), max_size=20)


@st.composite
def near_valid(draw: st.DrawFn) -> str:
    """A valid value with one non-ASCII character put in or swapped in; or any text with one."""
    if draw(st.booleans()):
        head, tail = draw(_ANY), draw(_ANY)
        return head + draw(_NON_ASCII) + tail
    base = draw(st.sampled_from([*VALID, " 3h ", "\t10m"]))
    at = draw(st.integers(0, len(base)))
    replace = draw(st.booleans()) and at < len(base)
    return base[:at] + draw(_NON_ASCII) + base[at + (1 if replace else 0):]


@given(near_valid())
def test_any_non_ascii_since_is_refused_or_means_its_ascii_spelling(value: str) -> None:
    try:
        got = http.parse_since(value, now_ns=NOW)
    except http.BadParams:
        return
    ascii_spelling = value.replace("µ", "u")  # the only non-ASCII character a duration may hold
    assert ascii_spelling.isascii(), f"{value!r} was taken as {got}"
    assert got == http.parse_since(ascii_spelling, now_ns=NOW)


@given(st.binary(), st.integers(0x80, 0xFF), st.binary())
def test_any_timestamp_with_a_non_ascii_byte_is_refused(head: bytes, byte: int, tail: bytes) -> None:
    with pytest.raises(timestamps.BadTimestamp):
        timestamps.parse_ns(head + bytes([byte]) + tail)


@pytest.fixture
async def log_store(tmp_path: Path) -> AsyncIterator[LogStore]:
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None)) as st_:
        yield st_


async def test_the_server_answers_400(log_store: LogStore) -> None:
    reviewer = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))
    app = http.make_app(log_store=log_store, reviewer=reviewer)
    async with test_utils.TestClient(test_utils.TestServer(app)) as client:
        for value in ("٣h", "\u00a03h"):
            resp = await client.get("/logs/ns/p", params={"since": value})
            assert resp.status == 400 and "since must be" in await resp.text()
        assert (await client.get("/logs/ns/p", params={"since": "3h"})).status == 404  # valid: no such pod
