"""Failed logins are limited per presented token and per client address, so that one bad client
behind a shared address (a port-forward, an ingress) cannot lock out the valid tokens sent from it.

The clock of the limits is a fake one: no test depends on when a wall-clock minute turns.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest
from tests.logs import test_http as base
from tests.logs.test_http import SARS, TOKENS, access_review, write

from podmortem.kube.session import ApiSession
from podmortem.logs.cursor import LogCursor
from podmortem.logs.serving import auth, http, login_limits
from podmortem.logs.serving.login_limits import LoginLimits
from podmortem.logs.settings import HttpSettings
from podmortem.logs.storage.store import LogStore, StoreSettings

api = base.api
api_session = base.api_session


class Clock:
    """A monotonic clock that moves only when told to (or when a pace sleeps on it)."""

    def __init__(self) -> None:
        self.now = 1000.0 * 60  # the start of a minute
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# --- the module on its own ---------------------------------------------------------------------


def test_a_token_that_failed_n_times_is_refused_and_other_tokens_are_not() -> None:
    limits = LoginLimits(per_token=3, per_address=100, clock=Clock())
    for _ in range(3):
        assert limits.refusal("10.0.0.1", digest("bad"), known_good=False) is None
        limits.failed("10.0.0.1", digest("bad"))
    why = limits.refusal("10.0.0.1", digest("bad"), known_good=False)
    assert why is not None and "token" in why
    assert limits.refusal("10.0.0.2", digest("bad"), known_good=False) is not None  # any address
    assert limits.refusal("10.0.0.1", digest("other"), known_good=False) is None


def test_a_spent_address_paces_its_unknown_tokens_and_refuses_none() -> None:
    limits = LoginLimits(per_token=30, per_address=5, clock=Clock())
    for i in range(5):
        limits.failed("127.0.0.1", digest(f"bad-{i}"))
    assert limits.refusal("127.0.0.1", digest("new"), known_good=False) is None  # once a 429
    assert limits.paced("127.0.0.1") and not limits.paced("10.0.0.9")


async def test_paced_reviews_go_at_the_address_budget_per_minute_in_arrival_order() -> None:
    clock = Clock()
    limits = LoginLimits(per_token=30, per_address=6, clock=clock, sleep=clock.sleep)
    order: list[int] = []

    async def one(i: int) -> None:
        async with limits.turn("127.0.0.1"):
            order.append(i)

    await asyncio.gather(*(one(i) for i in range(5)))
    assert order == [0, 1, 2, 3, 4]
    assert clock.slept == [10.0] * 4  # 6 a minute: one every 10 s, the first at once
    assert limits._queues == {}  # nothing kept for an address nobody waits on


def test_a_known_good_token_is_let_through_even_after_failing() -> None:
    """A token that failed before it was valid (just created) works once a review accepted it."""
    limits = LoginLimits(per_token=2, per_address=2, clock=Clock())
    for _ in range(2):
        limits.failed("127.0.0.1", digest("new-token"))
    assert limits.refusal("127.0.0.1", digest("new-token"), known_good=False) is not None
    assert limits.refusal("127.0.0.1", digest("new-token"), known_good=True) is None


def test_the_minute_roll_forgets_every_failure() -> None:
    clock = Clock()
    limits = LoginLimits(per_token=1, per_address=1, clock=clock)
    limits.failed("127.0.0.1", digest("bad"))
    clock.now += 59.9
    assert limits.refusal("127.0.0.1", digest("bad"), known_good=False) is not None
    clock.now += 0.1
    assert limits.refusal("127.0.0.1", digest("bad"), known_good=False) is None
    assert limits.refusal("127.0.0.1", digest("other"), known_good=False) is None


def test_failures_without_a_known_token_count_against_the_address_only() -> None:
    limits = LoginLimits(per_token=1, per_address=2, clock=Clock())
    limits.failed("127.0.0.1", None)
    assert not limits.paced("127.0.0.1")
    limits.failed("127.0.0.1", None)
    assert limits.paced("127.0.0.1")
    assert limits.refusal("127.0.0.1", None, known_good=False) is None
    assert limits.tokens == {}


def test_both_maps_are_bounded_and_drop_the_least_recently_failing() -> None:
    limits = LoginLimits(per_token=30, per_address=10**9, max_entries=10_000, clock=Clock())
    limits.failed("10.0.0.1", digest("first"))
    for i in range(20_000):
        limits.failed(f"10.1.{i // 256}.{i % 256}", digest(f"spray-{i}"))
        if i == 5_000:
            limits.failed("10.0.0.1", digest("first"))  # failing again makes it recent
    assert len(limits.tokens) == 10_000 and len(limits.addresses) == 10_000
    assert digest("spray-19999") in limits.tokens and digest("spray-9999") not in limits.tokens
    assert digest("first") not in limits.tokens  # 14,999 newer failures pushed it out


def test_settings_reach_the_limits() -> None:
    settings = HttpSettings(auth_failures_per_minute=7, auth_failures_per_token_per_minute=3,
                            auth_failure_entries=11)
    limits = LoginLimits.from_settings(settings)
    assert (limits.per_address, limits.per_token, limits.max_entries) == (7, 3, 11)
    defaults = HttpSettings()
    assert defaults.auth_failures_per_minute > defaults.auth_failures_per_token_per_minute
    with pytest.raises(ValueError, match="auth_failures_per_token_per_minute"):
        HttpSettings(auth_failures_per_token_per_minute=0)
    with pytest.raises(ValueError, match="auth_failure_entries"):
        HttpSettings(auth_failure_entries=0)


class _Sprayed:
    """A reviewer that rejects every token (what a sprayer meets)."""

    def __init__(self) -> None:
        self.reviews = 0

    def known_good(self, token_digest: str) -> bool:
        return False

    async def check(self, *, authorization: str | None, namespace: str) -> auth.User:
        self.reviews += 1
        raise auth.Unauthenticated("authentication failed: the token is not valid")


async def test_a_sprayer_of_20000_tokens_from_many_addresses_keeps_memory_bounded() -> None:
    clock = Clock()
    limits = LoginLimits(per_token=30, per_address=300, clock=clock, sleep=clock.sleep)
    reviewer = _Sprayed()
    refused = 0
    for i in range(20_000):
        try:
            await login_limits.check(limits, reviewer, peer=f"10.2.{i % 100}.1",
                                     authorization=f"Bearer spray-{i}", namespace="ns")
        except login_limits.TooManyFailures:
            refused += 1
        except auth.Unauthenticated:
            pass
    assert len(limits.tokens) <= 10_000 and len(limits.addresses) <= 10_000
    assert reviewer.reviews == 100 * 200 and refused == 0  # 200 each: below the address budget
    for i in range(100 * 100):
        try:
            await login_limits.check(limits, reviewer, peer=f"10.2.{i % 100}.1",
                                     authorization=f"Bearer more-{i}", namespace="ns")
        except login_limits.TooManyFailures:
            refused += 1
        except auth.Unauthenticated:
            pass
    assert reviewer.reviews == 100 * 300 and refused == 0 and clock.slept == []
    assert len(limits.tokens) <= 10_000 and len(limits.addresses) <= 10_000
    # Past the budget an address's reviews are paced: 300 a minute at most, never a lockout.
    start = clock.now
    for i in range(30):
        with pytest.raises(auth.Unauthenticated):
            await login_limits.check(limits, reviewer, peer="10.2.0.1", authorization=f"Bearer late-{i}",
                                     namespace="ns")
    assert reviewer.reviews == 100 * 300 + 30
    assert clock.now - start == pytest.approx(29 * 60 / 300)


async def test_a_request_without_a_token_spends_nothing() -> None:
    """It costs no review and guesses nothing: a dashboard without a token must not lock others out."""
    limits = LoginLimits(per_token=1, per_address=1, clock=Clock())
    reviewer = auth.Reviewer(api=object(), settings=auth.AuthSettings())  # type: ignore[arg-type]
    for header in (None, "Basic abc", "Bearer ", "bearer", "Bearer \udcff", "Bearer a b", "Bearer é"):
        with pytest.raises(auth.Unauthenticated):
            await login_limits.check(limits, reviewer, peer="127.0.0.1", authorization=header, namespace="ns")
    assert limits.tokens == {} and limits.addresses == {}


# --- the served log API ---------------------------------------------------------------------------


@pytest.fixture
async def log_store(tmp_path: Path) -> AsyncIterator[LogStore]:
    async with LogStore(tmp_path / "store", settings=StoreSettings(fsync_interval_s=None)) as st:
        yield st


_LIMITS: list[LoginLimits] = []


def app_limits() -> LoginLimits:
    """The limits of the app served last."""
    return _LIMITS[-1]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """Every app made in the test counts failures on this clock."""
    fake = Clock()
    real = http.make_app
    _LIMITS.clear()

    def with_clock(**kwargs: Any) -> Any:
        app = real(**kwargs)
        app[http.FAILURES].clock = fake
        app[http.FAILURES].sleep = fake.sleep
        _LIMITS.append(app[http.FAILURES])
        return app

    monkeypatch.setattr(http, "make_app", with_clock)
    yield fake


@asynccontextmanager
async def served(log_store: LogStore, reviewer: auth.Reviewer, **settings: Any) -> AsyncIterator[str]:
    conf = HttpSettings(host="127.0.0.1", port=0, **settings)
    async with http.serve(log_store=log_store, reviewer=reviewer, settings=conf) as runner:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"


def good_tokens(*good: str) -> Any:
    def respond(req: kmock.Request) -> dict[str, Any]:
        ok = req.data["spec"]["token"] in good
        status: dict[str, Any] = {"authenticated": ok}
        if ok:
            status["user"] = {"username": "alice", "uid": "u-1", "groups": ["devs"]}
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}
    return respond


async def test_a_bad_client_on_127_0_0_1_does_not_lock_out_a_valid_token_from_it(
    log_store: LogStore, api: kmock.RawHandler, api_session: ApiSession, clock: Clock
) -> None:
    await write(log_store.sink(namespace="ns", pod="p"), "main", [b"hello"], LogCursor(container_id="c"))
    api[TOKENS] << good_tokens("good-token", "second-good")
    api[SARS] << access_review(True)
    # TTLs far beyond the test's run time: no answer depends on how fast the machine is.
    ttls = auth.AuthSettings(cache_ttl_s=3600, rejected_ttl_s=3600)
    reviewer = auth.Reviewer(api=api_session, settings=ttls)
    async with served(log_store, reviewer, auth_failures_per_minute=60) as url, aiohttp.ClientSession() as s:

        async def get(token: str) -> tuple[int, str]:
            async with s.get(f"{url}/logs/ns/p", headers={"Authorization": f"Bearer {token}"}) as r:
                return r.status, await r.text()

        statuses = [(await get("bad-token"))[0] for _ in range(31)]
        assert statuses == [401] * 30 + [429]  # the token's own budget (30 a minute) is spent
        assert await get("good-token") == (200, "hello\n")  # the old per-address budget refused this
        status, text = await get("bad-token")
        assert status == 429 and "this token" in text
        for i in range(30):  # fresh bad tokens: 401 until the address's 60 failures are spent
            assert (await get(f"fresh-{i}"))[0] == 401
        assert app_limits().paced("127.0.0.1") and clock.slept == []
        reviews = reviewer.reviews_sent
        assert (await get("fresh-30"))[0] == 401  # reviewed all the same, at the address's pace
        assert await get("good-token") == (200, "hello\n")  # known good: no wait at all
        # A valid token not seen before (once 429 for up to a minute): reviewed in its turn, served.
        assert await get("second-good") == (200, "hello\n")
        assert reviewer.reviews_sent == reviews + 3  # a TokenReview each, and second-good's access review
        assert clock.slept == [1.0]  # 60 a minute: the second paced review waited its second
        keys = [*app_limits().tokens, *app_limits().addresses]
        assert digest("bad-token") in keys and not any("bad-token" in k for k in keys)


async def test_a_served_sprayer_keeps_the_token_map_at_its_bound(
    log_store: LogStore, api: kmock.RawHandler, api_session: ApiSession, clock: Clock
) -> None:
    api[TOKENS] << good_tokens()
    reviewer = auth.Reviewer(api=api_session)
    async with served(log_store, reviewer, auth_failures_per_minute=10_000, auth_failure_entries=50) as url, \
            aiohttp.ClientSession() as s:
        for i in range(200):
            async with s.get(f"{url}/logs/ns/p", headers={"Authorization": f"Bearer spray-{i}"}) as r:
                assert r.status == 401
    assert len(app_limits().tokens) == 50
    assert digest("spray-199") in app_limits().tokens and digest("spray-0") not in app_limits().tokens
