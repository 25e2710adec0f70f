"""Telling a user about the podmortem options they got wrong: an Event per new problem, and for a
TrainingJob an ``OptionsValid`` condition that clears once the options are fixed.

Annotations are the user's words, read on every event of the object: a problem is announced once
(remembered on the watched target), not once per pod event, so a bad option on a 1,000-pod job is
one Warning, not a thousand.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from podmortem.operator import watch_options
from podmortem.operator.status import StatusWriter
from podmortem.operator.targets import WatchedTarget

#: Posts an Event on ``involved``: (involved, type, reason, message).
PostEvent = Callable[[Mapping[str, Any], str, str, str], Awaitable[None]]


async def announce(
    known: WatchedTarget,
    problems: list[watch_options.OptionProblem],
    *,
    involved: Mapping[str, Any],
    trainingjob: bool,
    status: StatusWriter,
    post_event: PostEvent,
) -> None:
    """A Warning Event (and, for TrainingJobs, a condition) per new bad option; a cleared condition."""
    fresh = [p for p in problems if p.message() not in known.announced]
    for p in fresh:
        known.announced.add(p.message())
        await post_event(involved, "Warning", "InvalidOption", p.message())
    if not trainingjob:
        return
    target = known.target
    shown = [c for c in status.conditions(namespace=target.namespace, name=target.name)
             if c.get("type") == "OptionsValid"]
    if fresh or (problems and not shown):
        message = "; ".join(p.message() for p in problems)
        await status.patch(
            namespace=target.namespace, name=target.name,
            conditions=[("OptionsValid", False, "InvalidOption", message)],
        )
    elif not problems and any(c.get("status") == "False" for c in shown):
        await status.patch(
            namespace=target.namespace, name=target.name,
            conditions=[("OptionsValid", True, "OptionsAccepted", "all options valid")],
        )
