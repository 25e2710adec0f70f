"""A body sent in pieces is read whole, up to its bound: a JSON answer in two chunks parses."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import test_utils, web

from podmortem.kube.read_at_most import read_at_most

ANSWER = json.dumps({"kind": "Lease", "metadata": {"name": "x" * 3000}}).encode()


async def _in_two_pieces(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.enable_chunked_encoding()
    await response.prepare(request)
    await response.write(ANSWER[:800])
    await asyncio.sleep(0.1)  # the rest arrives later, as on a loaded network
    await response.write(ANSWER[800:])
    await response.write_eof()
    return response


@pytest.fixture
async def server() -> AsyncIterator[test_utils.TestServer]:
    app = web.Application()
    app.router.add_get("/", _in_two_pieces)
    async with test_utils.TestServer(app) as srv:
        yield srv


async def test_an_answer_in_two_pieces_is_read_whole(server: test_utils.TestServer) -> None:
    async with aiohttp.ClientSession() as session, session.get(server.make_url("/")) as resp:
        body = await read_at_most(resp.content, 1 << 20)
    assert json.loads(body) == json.loads(ANSWER)


async def test_a_plain_read_of_the_same_answer_comes_back_cut(server: test_utils.TestServer) -> None:
    # What every bounded read did before: StreamReader.read(n) returns what has arrived.
    async with aiohttp.ClientSession() as session, session.get(server.make_url("/")) as resp:
        body = await resp.content.read(1 << 20)
    assert len(body) < len(ANSWER)


async def test_a_longer_body_gives_exactly_the_bound(server: test_utils.TestServer) -> None:
    async with aiohttp.ClientSession() as session, session.get(server.make_url("/")) as resp:
        body = await read_at_most(resp.content, 1001)
    assert body == ANSWER[:1001]
