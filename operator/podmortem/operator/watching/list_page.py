"""A list page decoded one item at a time, as its bytes arrive, so what is held is one item, not the page.

A server that ignores ``limit`` can send all its pods in one page. Read whole and decoded with
``json.loads``, a 200 MiB page was held three times over (the bytes, their copy, and the decoded
objects, several times the text): the operator went from 37 to 468 MB. Here the page's bytes are
decoded as they arrive and each item of ``items`` is handed out as soon as it is complete, with an
estimate of what it holds once decoded (:func:`decoded_estimate`); the text already decoded is
dropped. What stays held is the undecoded rest of one item (at most ``item_limit`` bytes), and
whatever the caller keeps of the items.

The page's ``metadata`` (its ``continue`` token and ``resourceVersion``) is read wherever it comes,
before or after ``items``; other top-level keys (``kind``, ``apiVersion``) are decoded and dropped.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import AsyncIterator
from typing import Any

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
#: Text decoded but not yet parsed is compacted away once this many characters have been used.
_COMPACT_CHARS = 64 * 1024

#: Bytes an item's decoded objects take, estimated from its text: each character (or byte) at most
#: ``_PER_CHAR`` (a string with one character past U+FFFF takes 4 bytes for each of its characters),
#: each object or array (``{``, ``[``) ``_PER_CONTAINER`` and each further member or element (``,``)
#: ``_PER_MEMBER``. Measured with tracemalloc on CPython 3.11: real pods decode to 2 to 4 times their
#: text and are estimated at 6 to 12 times; text built to decode big (``[[],[],...]``,
#: ``["ab","ab",...]``, ``{"k1":"v1",...}``) decodes to up to 24 times its text, and is still covered.
_PER_CHAR = 4
_PER_CONTAINER = 250
_PER_MEMBER = 150


def decoded_estimate(text: str | bytes, start: int = 0, end: int | None = None) -> int:
    """An upper estimate of the bytes ``json.loads(text[start:end])`` holds (see the constants above)."""
    stop = len(text) if end is None else end
    if isinstance(text, bytes):
        containers = text.count(b"{", start, stop) + text.count(b"[", start, stop)
        members = text.count(b",", start, stop)
    else:
        containers = text.count("{", start, stop) + text.count("[", start, stop)
        members = text.count(",", start, stop)
    return _PER_CHAR * (stop - start) + _PER_CONTAINER * containers + _PER_MEMBER * members


class PageTooLong(ValueError):
    """The page, or one item in it, is over its byte budget."""


class ListPage:
    """Decodes one list page from its chunks: :meth:`items` hands out the items, then :attr:`metadata`."""

    def __init__(self, *, limit: int, item_limit: int) -> None:
        #: The whole page may be at most this many bytes (a server that ignores ``limit``).
        self.limit = limit
        #: One item (or any other top-level value) may be at most this many bytes of text.
        self.item_limit = item_limit
        #: The page's ``metadata`` once :meth:`items` has ended.
        self.metadata: dict[str, Any] = {}
        self._buffer = ""
        self._pos = 0
        self._read = 0
        self._ended = False

    async def items(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[Any, int]]:
        """Each item of the page with its :func:`decoded_estimate`; ValueError if the page is not JSON."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        stream = aiter(chunks)

        async def more(at_least: int = 1) -> bool:
            """Read until ``at_least`` more characters are buffered or the page ends: False at its end."""
            if self._ended:
                return False
            if self._pos > _COMPACT_CHARS:
                self._buffer, self._pos = self._buffer[self._pos:], 0
            want = len(self._buffer) + at_least
            parts = [self._buffer]
            have = len(self._buffer)
            while have < want:
                chunk = await anext(stream, None)
                if chunk is None:
                    parts.append(decoder.decode(b"", final=True))
                    self._ended = True
                    break
                self._read += len(chunk)
                if self._read > self.limit:
                    raise PageTooLong(f"a pod list page is over {self.limit} bytes; lower the page size")
                text = decoder.decode(chunk)
                parts.append(text)
                have += len(text)
            self._buffer = "".join(parts)
            return len(self._buffer) > self._pos or not self._ended

        async def char() -> str:
            """The next character that is not whitespace, left in place ("" at the page's end)."""
            while True:
                blank = _WHITESPACE.match(self._buffer, self._pos)
                self._pos = blank.end() if blank is not None else self._pos
                if self._pos < len(self._buffer):
                    return self._buffer[self._pos]
                if not await more():
                    return ""

        async def expect(wanted: str) -> None:
            got = await char()
            if got != wanted:
                raise ValueError(f"a pod list page is not a JSON list: {wanted!r} expected, {got!r} found")
            self._pos += 1

        async def value() -> tuple[Any, int, int]:
            """The next JSON value and where its text starts and ends in the buffer; reads on while cut."""
            await char()
            while True:
                start = self._pos  # :func:`more` may have moved the buffer's start
                try:
                    obj, end = _DECODER.raw_decode(self._buffer, start)
                except json.JSONDecodeError:
                    if self._ended:
                        raise
                    if len(self._buffer) - start > self.item_limit:
                        raise PageTooLong(
                            f"an item of a pod list page is over {self.item_limit} bytes") from None
                else:  # a number (or a literal) that ends the buffer may go on in the next chunk
                    if end < len(self._buffer) or self._ended or isinstance(obj, (dict, list, str)):
                        self._pos = end
                        return obj, start, end
                # Cut: read as much again before trying again, so that an item cut into n chunks is
                # decoded from its start about log(n) times, not n times.
                await more(max(len(self._buffer) - start, 4096))

        await expect("{")
        first = True
        while True:
            if await char() == "}":
                self._pos += 1
                break
            if not first:
                await expect(",")
            first = False
            key, _, _ = await value()
            await expect(":")
            if key == "items" and await char() == "[":
                self._pos += 1
                if await char() == "]":
                    self._pos += 1
                    continue
                while True:
                    item, start, end = await value()
                    yield item, decoded_estimate(self._buffer, start, end)
                    if await char() == "]":
                        self._pos += 1
                        break
                    await expect(",")
            else:
                got, _, _ = await value()
                if key == "metadata" and isinstance(got, dict):
                    self.metadata = got
        if await char():
            raise ValueError("a pod list page goes on after its end")
