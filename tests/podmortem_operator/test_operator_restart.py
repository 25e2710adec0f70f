"""End to end on kmock: an operator restart while a report waits for its kernel record.

The first operator writes the report ``pending`` and stops before the record
comes; the next one finds the report on the TrainingJob, asks the agent for the
rest of the wait, and patches the record in, without a second report or Event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from podmortem_demo.harness import Harness, harness

from .test_operator_e2e import attached_report, kill_with_the_record_held


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with harness(tmp_path_factory.mktemp("operator-restart")) as h:
        h.add_agent_pod()
        yield h


def test_a_pending_kernel_record_is_attached_by_the_next_operator(cluster: Harness) -> None:
    h = cluster
    base = h.settings(log_http_auth=False)
    settings = dataclasses.replace(base, agent=dataclasses.replace(base.agent, record_wait_s=120.0))
    h.start_operator(settings)
    uid, first = kill_with_the_record_held(h, "restart")
    h.wait(lambda: h.agent.requests.count(uid) >= 2, what="the agent asked again")
    h.stop_operator()
    assert h.operator_error is None, h.operator_error

    h.sync(lambda: h.agent.held.discard(uid))  # the record reaches the agent while no operator runs
    asked_before = h.agent.requests.count(uid)
    h.start_operator(settings)
    report = h.wait(lambda: attached_report(h, "restart"), what="the report with the kernel record")
    assert h.agent.requests.count(uid) > asked_before
    assert report["reportedAt"] == first["reportedAt"]  # patched, not written again
    codes = [f["code"] for f in report["findings"]]
    assert codes[0] == "memcg-limit" and "anon-dominant" in codes
    assert report["kill"]["pid"] > 0 and report["evidence"]["kernelRecords"] == 1
    assert report["evidence"]["kernelRecord"]["arrivedAfterS"] >= 0
    h.wait(
        lambda: next((e for e in h.events_for("restart") if e["reason"] == "KernelRecordAttached"), None),
        what="the KernelRecordAttached event",
    )
    assert [e["reason"] for e in h.events_for("restart")].count("MemcgLimit") == 1
    h.stop_operator()
    assert h.operator_error is None, h.operator_error
