"""The back-off of a list-and-watch loop: exponential, jittered, paced per request, reset by a healthy watch.

client-go's reflector backs off (800 ms doubling to 30 s, jitter 1.0) on every way a watch can fail,
including one that ends at once with no event. A loop that backs off only on some shapes spins on the
others: a ``410`` on every watch, a ``410`` on the list, a watch that sends one BOOKMARK and ends,
each gave 600 to 1,100 requests a second against the API server.

So the rule here has no exceptions: after any failure (an error, a ``410``, a watch that ended
early, a resourceVersion that went backwards, a list that never ends), *every* request (a list or
a watch) first waits its step, and each step is longer, until a watch has been healthy (stayed open
long enough). The requests sent while failing are thus at most one per step, plus the pages of a
list, which are bounded on their own.
"""

from __future__ import annotations

import random


class Backoff:
    """Steps of ``first_s`` doubling to ``max_s``, each lengthened by up to ``jitter`` times itself."""

    def __init__(self, *, first_s: float, max_s: float, jitter: float,
                 rng: random.Random | None = None) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self.jitter = jitter
        self.rng = rng or random.Random()
        #: Steps waited since the loop started (a counter for logs and tests; never reset).
        self.steps = 0
        #: Whether something failed since the last healthy watch: then every request waits a step.
        self.failing = False
        self._attempt = 0

    def failed(self) -> None:
        """Something failed: the next request, and each after it until :meth:`healthy`, waits a step."""
        self.failing = True

    def healthy(self) -> None:
        """A watch was healthy: requests go out at once again, and the next failure starts at ``first_s``."""
        self.failing = False
        self._attempt = 0

    def take(self) -> float:
        """The step the next request waits, counted as taken: 0 when not failing, else ``first_s * 2**n``
        up to ``max_s``, lengthened at random by up to ``jitter`` times itself (client-go's Jitter)."""
        if not self.failing:
            return 0.0
        base = min(self.max_s, self.first_s * 2.0 ** min(self._attempt, 64))
        self._attempt += 1
        self.steps += 1
        return base * (1.0 + self.jitter * self.rng.random())
