"""Failed logins to the log server, limited per presented token and paced per client address.

Every failed login costs the apiserver a TokenReview, so failures are limited; but many users share
one address (everyone behind ``kubectl port-forward`` is 127.0.0.1, everyone behind an ingress is
the ingress), so a limit per address must never refuse a valid token: after 300 bad tokens from
one address, a valid token not used in the last 30 s once got 429 for up to a minute. Hence:

* per presented token (its SHA-256, never the token): a token that failed ``per_token`` times in
  the minute gets 429 without a review, whichever address sends it; only that token is refused;
* per address, a pace instead of a wall: once ``per_address`` failures came from an address in the
  minute, its tokens that are not known to be good are reviewed one at a time, at most
  ``per_address`` a minute, in the order they came. A sprayer costs the apiserver no more than
  that, and a valid token from the same address still gets its review, after at most the requests
  queued before it (the server's connection cap per peer bounds that queue). A token that passed a
  TokenReview recently (the reviewer's positive cache) does not wait at all.

The maps hold at most ``max_entries`` keys; the least recently failing key goes first, so a sprayer
of distinct tokens or addresses cannot grow the operator's memory. A request without a well-formed
bearer token costs no review and guesses nothing: it spends no budget.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from podmortem.logs.serving import auth
from podmortem.logs.settings import HttpSettings

#: Seconds a 429 asks the client to wait: the budgets are per minute.
RETRY_AFTER_S = 60


class TooManyFailures(auth.AccessError):
    """A budget of failed logins is spent: 429 with ``Retry-After``, and no review is sent."""

    status = 429
    retry_after_s = RETRY_AFTER_S


class Reviews(Protocol):
    """What the limits need of a reviewer (``auth.Reviewer``)."""

    def known_good(self, token_digest: str) -> bool: ...

    async def check(self, *, authorization: str | None, namespace: str) -> auth.User: ...


def token_digest(authorization: str | None) -> str | None:
    """SHA-256 (hex) of the request's bearer token, or None when it presents none."""
    try:
        token = auth.bearer_token(authorization)
    except auth.Unauthenticated:
        return None
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class LoginLimits:
    """Failed logins in the current minute, per token digest and per client address."""

    #: Failures one token may have per minute before it is refused without a review.
    per_token: int
    #: Failures one address may cause per minute before its tokens not known good are paced.
    per_address: int
    #: Most keys kept in each map; the least recently failing key is dropped first.
    max_entries: int = 10_000
    #: Monotonic seconds; a test moves a fake one instead of waiting for a minute to pass.
    clock: Callable[[], float] = time.monotonic
    #: Waits for the pace (a test passes one that moves its fake clock).
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    minute: int = -1
    tokens: dict[str, int] = field(default_factory=dict)
    addresses: dict[str, int] = field(default_factory=dict)
    #: Per paced address, the clock time its next review may start.
    next_review: dict[str, float] = field(default_factory=dict)
    #: Per paced address with requests waiting, the lock they queue on (gone when none waits).
    _queues: dict[str, tuple[asyncio.Lock, list[int]]] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: HttpSettings) -> LoginLimits:
        return cls(per_token=settings.auth_failures_per_token_per_minute,
                   per_address=settings.auth_failures_per_minute,
                   max_entries=settings.auth_failure_entries)

    def _roll(self) -> None:
        minute = int(self.clock() // 60)
        if minute != self.minute:
            self.minute = minute
            self.tokens.clear()
            self.addresses.clear()

    def refusal(self, peer: str, token: str | None, *, known_good: bool) -> str | None:
        """Why a login with ``token`` (a digest) is refused unreviewed, or None. Only a token's own
        failures refuse it; ``peer`` is not refused for what other tokens from it did."""
        if known_good:
            return None
        self._roll()
        if token is not None and self.tokens.get(token, 0) >= self.per_token:
            return "too many failed authentications with this token; retry in a minute"
        return None

    def paced(self, peer: str) -> bool:
        """Whether reviews of unknown tokens from ``peer`` go one at a time, at the address's pace."""
        self._roll()
        return self.addresses.get(peer, 0) >= self.per_address

    @asynccontextmanager
    async def turn(self, peer: str) -> AsyncIterator[None]:
        """Wait for ``peer``'s next review slot (in arrival order), and hold it during the review."""
        lock, waiting = self._queues.setdefault(peer, (asyncio.Lock(), [0]))
        waiting[0] += 1
        try:
            async with lock:
                start = max(self.clock(), self.next_review.get(peer, 0.0))
                self.next_review.pop(peer, None)
                while len(self.next_review) >= self.max_entries:
                    del self.next_review[next(iter(self.next_review))]
                self.next_review[peer] = start + 60.0 / self.per_address
                delay = start - self.clock()
                if delay > 0:
                    await self.sleep(delay)
                yield
        finally:
            waiting[0] -= 1
            if not waiting[0]:
                del self._queues[peer]

    def failed(self, peer: str, token: str | None) -> None:
        """Count a failed login against the address and, when known, the token (a digest)."""
        self._roll()
        if token is not None:
            _count(self.tokens, token, self.max_entries)
        _count(self.addresses, peer, self.max_entries)


def _count(counts: dict[str, int], key: str, max_entries: int) -> None:
    """One more failure for ``key``, moved to the newest end; the oldest key goes when full."""
    n = counts.pop(key, 0) + 1
    while len(counts) >= max_entries:
        del counts[next(iter(counts))]
    counts[key] = n


async def check(limits: LoginLimits, reviewer: Reviews, *, peer: str, authorization: str | None,
                namespace: str) -> auth.User:
    """``reviewer.check`` within the login budgets: raises ``TooManyFailures`` (429) for a token that
    spent its own, and paces the reviews of an address that spent its budget."""
    digest = token_digest(authorization)
    if digest is None or reviewer.known_good(digest):
        return await _reviewed(limits, reviewer, peer=peer, digest=digest, authorization=authorization,
                               namespace=namespace)
    why = limits.refusal(peer, digest, known_good=False)
    if why is not None:
        raise TooManyFailures(why)
    if not limits.paced(peer):
        return await _reviewed(limits, reviewer, peer=peer, digest=digest, authorization=authorization,
                               namespace=namespace)
    async with limits.turn(peer):
        why = limits.refusal(peer, digest, known_good=reviewer.known_good(digest))  # failed while waiting
        if why is not None:
            raise TooManyFailures(why)
        return await _reviewed(limits, reviewer, peer=peer, digest=digest, authorization=authorization,
                               namespace=namespace)


async def _reviewed(limits: LoginLimits, reviewer: Reviews, *, peer: str, digest: str | None,
                    authorization: str | None, namespace: str) -> auth.User:
    try:
        return await reviewer.check(authorization=authorization, namespace=namespace)
    except auth.Unauthenticated:
        if digest is not None:
            limits.failed(peer, digest)
        raise
