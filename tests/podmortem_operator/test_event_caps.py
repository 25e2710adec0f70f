"""Every Event podmortem posts has a message within the Events API's 1024 bytes, cut at a word.

The cap is in the one API call every poster goes through (``Kube.post_event``): a report's
headline, a job's root-cause line or an option's bad value can carry a pod's log line or an
annotation of any size.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest

from podmortem.kube.api import EVENT_MESSAGE_MAX_BYTES, Kube
from podmortem.kube.config import ClusterAccess
from podmortem.kube.session import ApiSession

EVENTS = "POST /api/v1/namespaces/ns/events"
INVOLVED = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"}}


@pytest.fixture
async def posted(api: kmock.RawHandler) -> list[dict[str, Any]]:
    bodies: list[dict[str, Any]] = []

    def respond(req: kmock.Request) -> dict[str, Any]:
        bodies.append(req.data)
        return {}

    api[EVENTS] << respond
    return bodies


@pytest.fixture
async def kube(api: kmock.RawHandler) -> AsyncIterator[Kube]:
    async with ApiSession(ClusterAccess(server=str(api.url).rstrip("/"))) as session:
        yield Kube(api=session)


async def _post(kube: Kube, posted: list[dict[str, Any]], message: str) -> str:
    await kube.post_event(involved=INVOLVED, type_="Warning", reason="InvalidOption", message=message)
    text = posted[-1]["message"]
    assert isinstance(text, str)
    return text


async def test_a_huge_message_is_cut_at_a_word_within_1024_bytes(
    kube: Kube, posted: list[dict[str, Any]]
) -> None:
    # The size the issue saw: a 240 KB annotation quoted whole, 360,317 characters.
    message = "podmortem.io/containers='" + "trainer, " * 40_035 + "' is invalid"
    assert len(message) > 360_000
    text = await _post(kube, posted, message)
    assert text.endswith("…") and 1024 - 32 < len(text.encode()) <= 1024
    kept = text.removesuffix("…")
    assert message.startswith(kept) and message[len(kept)] == " "  # the cut is at a word
    assert not kept.endswith(" ")
    assert EVENT_MESSAGE_MAX_BYTES == 1024


async def test_a_message_of_wide_characters_is_counted_in_bytes_and_never_split(
    kube: Kube, posted: list[dict[str, Any]]
) -> None:
    text = await _post(kube, posted, "Speicher über dem Limit: " + "ü" * 2000)
    assert len(text.encode()) <= 1024 and text.endswith("ü…") and "\ufffd" not in text
    one_word = "x" * 5000
    text = await _post(kube, posted, one_word)  # no word boundary at all: cut where it must be
    assert text == "x" * 1021 + "…"


async def test_the_pointer_to_the_report_at_the_end_is_kept(
    kube: Kube, posted: list[dict[str, Any]]
) -> None:
    pointer = " (podmortem failure report in status.failureReport, page http://podmortem:8080/reports/ml/tj)"
    text = await _post(kube, posted, "train-0/trainer memcg-limit: " + "grew and grew " * 500 + pointer)
    assert len(text.encode()) <= 1024 and text.endswith("grew…" + pointer)
    text = await _post(kube, posted, "x" * 900 + " (" + "y" * 600 + ")")  # too long to be a pointer
    assert text == "x" * 900 + "…"  # cut at the word before it


@pytest.mark.parametrize("message", ["", "short", "x" * 1024, "ä" * 512])
async def test_a_message_within_the_limit_is_posted_as_it_is(
    kube: Kube, posted: list[dict[str, Any]], message: str
) -> None:
    assert await _post(kube, posted, message) == message
