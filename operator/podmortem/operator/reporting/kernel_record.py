"""A kernel OOM record that reaches the agent after the kubelet reported the kill.

The node agent hands a record over only after about a second of kernel-log
quiet (later on a busy node), while the kubelet may report ``OOMKilled``
sooner. The report cannot wait for it (it is due within 2 s of seeing the
kill), so it is written from what is there and says the record is *pending*;
the agent is then asked again, with backoff, for ``AgentAccessSettings.record_wait_s``,
and the report is patched once the record comes (*attached*) or the time is up
(*not-found*). What only the record can tell (fork copies, the killed process,
node-wide OOM) then reaches the report too.
"""

from __future__ import annotations

import asyncio
from typing import Final

from podmortem.diagnosis.termination import SIGKILL_EXIT, Termination
from podmortem.operator.reporting.agent_client import AgentClient, AgentUnavailable
from podmortem.operator.settings import AgentAccessSettings
from podmortem.reports.document import KernelRecordState
from podmortem.reports.evidence import PodEvidence

#: Where a report stands with the kernel's record of the kill (``evidence.kernelRecord.state``).
State = KernelRecordState
ATTACHED: Final = KernelRecordState.ATTACHED
PENDING: Final = KernelRecordState.PENDING
NOT_FOUND: Final = KernelRecordState.NOT_FOUND
NOT_SOUGHT: Final = KernelRecordState.NOT_SOUGHT


def worth_seeking(t: Termination, *, settings: AgentAccessSettings) -> bool:
    """Whether the kernel may have logged this kill and an agent could hand the record over.

    An OOM kill shows as ``OOMKilled`` or exit 137 (a node-wide OOM kill is often plain exit
    137); an eviction is the kubelet's doing, with no kernel record to wait for.
    """
    oom_like = t.reason == "OOMKilled" or t.exit_code == SIGKILL_EXIT
    return oom_like and t.pod_reason != "Evicted" and settings.enabled and bool(t.node)


def initial_state(t: Termination, evidence: PodEvidence | None, *, settings: AgentAccessSettings) -> State:
    if evidence is not None and evidence.kernel_records:
        return ATTACHED
    if not worth_seeking(t, settings=settings):
        return NOT_SOUGHT
    return PENDING if settings.record_wait_s > 0 else NOT_FOUND


async def ask_until_record(
    *, agent: AgentClient, node: str, pod_uid: str, settings: AgentAccessSettings, wait_s: float | None = None
) -> tuple[PodEvidence | None, int]:
    """Ask the agent with backoff until its evidence holds a kernel record or the wait is over.

    ``wait_s`` defaults to ``record_wait_s``; with none left (a follow-up resumed after an operator
    restart), the agent is still asked once. Returns the last evidence the agent gave (with a
    record, or the freshest without one; None if it never answered) and how many requests were made.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (settings.record_wait_s if wait_s is None else wait_s)
    pause = settings.record_retry_min_s
    last: PodEvidence | None = None
    asked = 0
    while (remaining := deadline - loop.time()) > 0 or asked == 0:
        if remaining > 0:
            await asyncio.sleep(min(pause, remaining))
        asked += 1
        got = await agent.evidence(
            node=node,
            pod_uid=pod_uid,
            timeout_s=max(0.1, min(settings.followup_timeout_s, deadline - loop.time())),
        )
        if not isinstance(got, AgentUnavailable):
            last = got
            if got.kernel_records:
                break
        pause = min(pause * 2, settings.record_retry_max_s)
    return last, asked
