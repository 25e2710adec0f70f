"""Failed logins to the log server, limited per presented token and per client address.

Every failed login costs the apiserver a TokenReview, so failures are limited; but many users share
one address (everyone behind ``kubectl port-forward`` is 127.0.0.1, everyone behind an ingress is
the ingress), so a per-address limit alone lets one bad client lock all of them out. Hence two
budgets per minute:

* per presented token (its SHA-256, never the token): a token that failed ``per_token`` times gets
  429 without a review, whichever address sends it;
* per address, larger: once ``per_address`` failures came from an address, tokens from it that are
  not known to be good get 429 without a review. A token that passed a TokenReview recently (the
  reviewer's positive cache) is still served, so a sprayer cannot lock out working users.

Both maps hold at most ``max_entries`` keys; the least recently failing key goes first, so a sprayer
of distinct tokens or addresses cannot grow the operator's memory. A request without a bearer
token costs no review and guesses nothing: it spends no budget.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
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
    #: Failures one address may cause per minute before its tokens not known good are refused.
    per_address: int
    #: Most keys kept in each map; the least recently failing key is dropped first.
    max_entries: int = 10_000
    #: Monotonic seconds; a test moves a fake one instead of waiting for a minute to pass.
    clock: Callable[[], float] = time.monotonic
    minute: int = -1
    tokens: dict[str, int] = field(default_factory=dict)
    addresses: dict[str, int] = field(default_factory=dict)

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
        """Why a login with ``token`` (a digest) from ``peer`` is refused unreviewed, or None."""
        if known_good:
            return None
        self._roll()
        if token is not None and self.tokens.get(token, 0) >= self.per_token:
            return "too many failed authentications with this token; retry in a minute"
        if self.addresses.get(peer, 0) >= self.per_address:
            return ("too many failed authentications from this address; retry in a minute "
                    "(a token that worked recently is still served)")
        return None

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
    """``reviewer.check`` within the login budgets: raises ``TooManyFailures`` (429) when spent."""
    digest = token_digest(authorization)
    if digest is not None:
        why = limits.refusal(peer, digest, known_good=reviewer.known_good(digest))
        if why is not None:
            raise TooManyFailures(why)
    try:
        return await reviewer.check(authorization=authorization, namespace=namespace)
    except auth.Unauthenticated:
        if digest is not None:
            limits.failed(peer, digest)
        raise
