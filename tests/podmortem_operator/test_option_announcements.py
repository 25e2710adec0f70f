"""Bad options told once: an Event per new problem, and a TrainingJob's OptionsValid set, then cleared."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from podmortem.operator.jobs import Target
from podmortem.operator.targets import WatchedTarget
from podmortem.operator.watch_options import OptionProblem, WatchOptions
from podmortem.operator.watching.option_announcements import announce

BAD = OptionProblem(option="spec.logRetention", value="forever", reason="not a duration", default="7d")


class FakeStatus:
    """The two calls `announce` makes of a StatusWriter, holding conditions as the writer does."""

    def __init__(self) -> None:
        self.held: list[dict[str, Any]] = []
        self.patches: list[tuple[str, bool, str, str]] = []

    def conditions(self, *, namespace: str, name: str) -> list[dict[str, Any]]:
        return list(self.held)

    async def patch(
        self, *, namespace: str, name: str, conditions: Sequence[tuple[str, bool, str, str]]
    ) -> None:
        for type_, status, reason, message in conditions:
            self.patches.append((type_, status, reason, message))
            self.held = [c for c in self.held if c["type"] != type_]
            self.held.append({"type": type_, "status": "True" if status else "False", "reason": reason})


def _known() -> WatchedTarget:
    target = Target(role="trainingjob", api_version="podmortem.io/v1", kind="TrainingJob", namespace="ns",
                    name="tj", uid="u1", plural="trainingjobs", options=WatchOptions())
    return WatchedTarget(target=target)


async def test_a_problem_is_one_event_and_a_false_condition_then_cleared_when_fixed() -> None:
    known, status = _known(), FakeStatus()
    events: list[tuple[str, str]] = []

    async def post(involved: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append((reason, message))

    args: dict[str, Any] = {"involved": known.target.involved(), "trainingjob": True,
                            "status": status, "post_event": post}
    await announce(known, [BAD], **args)
    await announce(known, [BAD], **args)  # the same problem at the next event: nothing new
    assert events == [("InvalidOption", BAD.message())]
    assert status.patches == [("OptionsValid", False, "InvalidOption", BAD.message())]
    await announce(known, [], **args)  # fixed
    assert status.patches[-1] == ("OptionsValid", True, "OptionsAccepted", "all options valid")
    await announce(known, [], **args)  # still fine: no second patch
    assert len(status.patches) == 2


async def test_a_foreign_job_gets_events_only() -> None:
    known, status = _known(), FakeStatus()
    events: list[str] = []

    async def post(involved: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append(reason)

    await announce(known, [BAD], involved={}, trainingjob=False, status=status, post_event=post)  # type: ignore[arg-type]
    assert events == ["InvalidOption"] and status.patches == []
