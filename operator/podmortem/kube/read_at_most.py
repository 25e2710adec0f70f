"""Reading an HTTP answer's body up to a bound, whole.

``StreamReader.read(n)`` returns what has arrived, up to ``n`` bytes, not ``n`` bytes: a JSON
answer the API server sends in more than one chunk (any answer over a few KiB, and any answer on a
loaded network) comes back cut, and parses as "Unterminated string". Every bounded read of a body
goes through `read_at_most`, which reads until the end or the bound.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp


async def read_at_most(content: aiohttp.StreamReader, limit: int) -> bytes:
    """The body to its end, or its first ``limit`` bytes when it is longer (pass ``budget + 1`` to
    tell an answer of exactly ``budget`` bytes from a longer one)."""
    try:
        return await content.readexactly(limit)
    except asyncio.IncompleteReadError as short:
        return short.partial
