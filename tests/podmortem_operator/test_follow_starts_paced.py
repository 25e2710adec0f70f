"""An operator starting over thousands of pods starts their followers a few per loop iteration.

Each start makes the pod's sink and asks for its first stream (about a millisecond): all of them in
one iteration stopped the loop for seconds (issue 40).
"""

from __future__ import annotations

from tests.loop_iterations import Iterations

from podmortem.logs.settings import FollowSettings
from podmortem.operator.followed_pods import STARTS_PER_TURN, Following


async def test_no_more_than_starts_per_turn_followers_start_in_one_iteration() -> None:
    iterations = Iterations()
    made: list[str] = []

    async def make_sink(namespace: str, pod: str, pod_uid: str) -> object:
        iterations.mark()
        made.append(pod)
        raise RuntimeError("no store in this test")  # the follower ends with this error

    following = Following(api=None, make_sink=make_sink, settings=FollowSettings())  # type: ignore[arg-type]
    iterations.start()
    pods = [f"pod-{i}" for i in range(5 * STARTS_PER_TURN)]
    for i, pod in enumerate(pods):
        assert following.ensure(namespace="ns", pod=pod, pod_uid=f"uid-{i}", containers=None)
    for i in range(len(pods)):
        await following.wait(f"uid-{i}", timeout_s=30)
    iterations.stop()
    assert made == pods  # every one started, in the order asked
    assert iterations.most_in_one == STARTS_PER_TURN
    assert all((facts := following.facts(f"uid-{i}")) is not None and facts.error is not None
               for i in range(len(pods)))
    await following.stop()
