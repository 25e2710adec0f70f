"""A client-side limit on the follower's API requests: client-go's QPS and burst, for a restart.

An operator that restarts while it follows thousands of pods opens every pod's log stream (and reads
the pods whose streams need it) at once; the API server proxies each log request to a kubelet. A
token bucket spaces them: up to ``burst`` requests go at once, then ``qps`` per second. Pure
arithmetic over an injected clock (`TokenBucket.delay`), so it is tested without sleeping; the
async `TokenBucket.acquire` only sleeps what `delay` says.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """``burst`` tokens, refilled at ``qps`` per second; each request takes one, waiting if none is left."""

    def __init__(self, *, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if not qps > 0 or burst < 1:
            raise ValueError(f"a rate limit needs qps > 0 and burst >= 1, got {qps} and {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def delay(self) -> float:
        """Take a token: seconds the caller must wait before its request (0 when one is there).

        Tokens may go negative: each caller reserves its place in line, so concurrent callers are
        spaced ``1 / qps`` apart in the order they asked.
        """
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        wait = self.delay()
        if wait > 0:
            await asyncio.sleep(wait)
