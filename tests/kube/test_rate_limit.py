"""The followers' client-side request limit: a token bucket over an injected clock (no sleeping here)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podmortem.kube.rate_limit import TokenBucket
from podmortem.logs.settings import FollowSettings


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_at_once_then_the_pace_applies() -> None:
    clock = Clock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.delay() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [round(bucket.delay(), 6) for _ in range(3)] == [0.1, 0.2, 0.3]  # each waits its turn
    clock.now += 1.0  # a second later 10 more tokens, less the 3 taken ahead: the bucket holds 3 again
    assert [bucket.delay() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.delay() > 0


@given(st.floats(0.5, 1000), st.integers(1, 500), st.lists(st.floats(0, 2), max_size=200))
def test_no_window_holds_more_than_burst_plus_the_pace(qps: float, burst: int, gaps: list[float]) -> None:
    """Whatever the arrivals, the requests' start times (arrival + delay) never run ahead of the bucket:
    in any window of T seconds at most burst + qps*T of them start."""
    clock = Clock()
    bucket = TokenBucket(qps=qps, burst=burst, clock=clock)
    starts = []
    for gap in gaps:
        clock.now += gap
        starts.append(clock.now + bucket.delay())
    starts.sort()
    for i, first in enumerate(starts):
        for j in range(i, len(starts)):
            assert j - i + 1 <= burst + qps * (starts[j] - first) + 1e-6


def test_settings_refuse_a_limit_that_cannot_pass_a_request() -> None:
    with pytest.raises(ValueError, match="api_qps"):
        FollowSettings(api_qps=0)
    with pytest.raises(ValueError, match="api_burst"):
        FollowSettings(api_burst=0)
    assert FollowSettings(api_qps=None).api_qps is None
