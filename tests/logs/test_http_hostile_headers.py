"""Any bytes in a header, from anyone, get an answer of the 4xx kind, never a 500; readers are shared fairly.

``Authorization: Bearer \\xff`` once gave a 500 with a traceback on ``/logs`` and ``/reports``. The
requests are written to a raw socket, so the test sends the bytes it means and not what a client
library would let through; hypothesis picks the bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podmortem.logs.serving import auth, http
from podmortem.logs.settings import HttpSettings
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.operator.reporting import report_page

PATHS = (b"/logs/ns/p", b"/reports/ns/job")


class _Refusing(auth.Reviewer):
    """A reviewer whose TokenReview accepts no token (as the apiserver does for made-up ones)."""

    async def _authenticate(self, token: str) -> auth.User:
        token.encode("ascii")  # what reached a review is a token the server could hash and send
        raise auth.Unauthenticated("authentication failed: the token is not valid")


@asynccontextmanager
async def served(root: Path) -> AsyncIterator[int]:
    async with LogStore(root, settings=StoreSettings(fsync_interval_s=None)) as log_store:
        reviewer = _Refusing(api=object(), settings=auth.AuthSettings())  # type: ignore[arg-type]
        conf = HttpSettings(host="127.0.0.1", port=0)
        app = http.make_app(log_store=log_store, reviewer=reviewer, settings=conf)
        report_page.add_routes(app, report_page.ReportFinder(kube=None, foreign=None))
        run = http.runner(app, conf)
        await run.setup()
        try:
            from podmortem import serving_limits
            await serving_limits.start(run, host="127.0.0.1", port=0)
            yield run.addresses[0][1]
        finally:
            await run.cleanup()


async def ask(port: int, path: bytes, authorization: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: " + authorization
                 + b"\r\nConnection: close\r\n\r\n")
    async with asyncio.timeout(20):
        answer = await reader.read()
    writer.close()
    return answer


def status_and_headers(answer: bytes) -> tuple[int, bytes]:
    head = answer.partition(b"\r\n\r\n")[0]
    return int(head.split(b" ", 2)[1]), head


@pytest.mark.parametrize("path", PATHS)
async def test_a_non_utf8_bearer_token_is_401_with_safe_headers(tmp_path: Path, path: bytes) -> None:
    async with served(tmp_path) as port:
        for value in (b"Bearer \xff", b"Bearer \xc3\xa9t\xc3\xa9", b"\xff\xfe", b"Bearer tok\xffen",
                      b"Bearer a b", b"Bearer " + b"a" * 8000):
            status, head = status_and_headers(await ask(port, path, value))
            assert status == 401, head
            assert b"\r\nCache-Control: no-store" in head and b"\r\nX-Content-Type-Options: nosniff" in head


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.binary(max_size=200).filter(lambda b: b"\r" not in b and b"\n" not in b),
       scheme=st.sampled_from([b"Bearer ", b"bearer ", b"", b"Basic "]))
def test_any_authorization_bytes_are_answered_without_a_500(
    tmp_path: Path, value: bytes, scheme: bytes
) -> None:
    async def check() -> None:
        async with served(tmp_path / "store") as port:
            for path in PATHS:
                status, head = status_and_headers(await ask(port, path, scheme + value))
                assert 400 <= status < 500 and status != 429, head

    asyncio.run(check())


def test_a_few_callers_at_their_cap_leave_room_for_others() -> None:
    """8 users of 32 readers once held all 256 slots, and everyone else got 429."""
    slots = http.ReaderSlots(total=256, per_caller=32)
    held = []
    for user in range(8):
        for _ in range(32):
            hold = slots.hold(f"user-{user}")
            try:
                hold.__enter__()
            except http.TooManyReaders:
                break
            held.append(hold)
    assert slots.active < 256
    for newcomer in range(8, 16):  # each new user still gets a reader
        hold = slots.hold(f"user-{newcomer}")
        hold.__enter__()
        held.append(hold)
    assert max(slots.by_caller.values()) <= 32
    for hold in held:
        hold.__exit__(None, None, None)
    assert slots.active == 0 and slots.by_caller == {}
