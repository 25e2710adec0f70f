"""End to end on kmock: a 4-rank PyTorchJob whose OOM-killed rank's kernel record reaches the agent late.

The report is written at once with the record ``pending``, and the job's section (its root cause's
line), the ``JobRootCause`` Event and the page all quote the pending text ("... is not in yet ...").
When the operator's follow-up attaches the record, everything that quoted the earlier report must be
rebuilt: no row, root cause or text of the annotation may still say the record is pending, a new
``JobRootCause`` Event quotes the new text, and the page agrees with itself. Before, the root cause's
line kept the pending text (cut mid-word at "(evidence.kernelR") next to "kernel OOM record: attached".
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from podmortem.kernel import oom_parser
from podmortem.kube.owners import DEFAULT_FOREIGN_KINDS
from podmortem_demo import harness as harness_mod
from podmortem_demo.harness import Harness, harness, kill

from .test_job_root_cause_e2e import (
    LOG_BASE,
    RANKS,
    RECORD,
    failed_rows,
    job_report,
    pod_name,
    start_job,
    write_last_words,
)

#: What the pending report says, in any of its forms (the finding's message, its note, the state).
PENDING = re.compile(r"not in yet|is updated when it comes|kernelRecord\.state: pending|\"pending\"")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with harness(tmp_path_factory.mktemp("late")) as h:
        h.add_agent_pod()
        settings = h.settings(log_http_auth=False, log_base_url=LOG_BASE, foreign_kinds=DEFAULT_FOREIGN_KINDS)
        # a wait long enough that the test, not the clock, decides when the record comes
        agent = dataclasses.replace(settings.agent, record_wait_s=120.0)
        settings = dataclasses.replace(settings, agent=agent)
        h.start_operator(settings)
        yield h
        assert h.operator_error is None, h.operator_error


def _events(h: Harness, job: str, reason: str) -> list[str]:
    return [str(e.get("message", "")) for e in h.events_for(job) if e.get("reason") == reason]


def test_a_late_kernel_record_refreshes_the_job_section_its_events_and_the_page(cluster: Harness) -> None:
    h, job = cluster, "late-ddp"
    uids = start_job(h, job)
    oom_pod = pod_name(job, "worker", 1)
    record = oom_parser.parse_text(RECORD.read_text())[0]
    h.sync(lambda: h.agent.held.add(uids[oom_pod]))  # the agent has the pod, not yet its kernel record
    evidence = harness_mod.evidence_for(uids[oom_pod], record)
    h.sync(lambda: h.agent.evidence.__setitem__(uids[oom_pod], evidence))
    write_last_words(h, job, uids)
    for kind, index, _rank, _fixture, code, reason, finished in sorted(RANKS, key=lambda r: r[6]):
        kill(h, name=pod_name(job, kind, index), exit_code=code, reason=reason, finished_at=finished)

    def pending_section() -> dict[str, Any] | None:
        r = job_report(h, job)
        return r if failed_rows(r) == 4 and r is not None and r["kernelRecord"] == "pending" else None

    before = h.wait(pending_section, what="the job section of 4 failed pods, the record pending")
    # what the follow-up must rebuild: the root cause's line and its Event quote the pending text
    assert before["job"]["rootCause"]["pod"] == oom_pod
    assert PENDING.search(before["job"]["rootCause"]["line"]), before["job"]["rootCause"]
    # The Event is posted after the annotation is written: wait for it, it is not there at once.
    root_events = h.wait(lambda: _events(h, job, "JobRootCause") or None, what="the first JobRootCause Event")
    assert PENDING.search(root_events[-1]), root_events

    h.sync(lambda: h.agent.held.discard(uids[oom_pod]))  # the record reaches the agent
    h.wait(lambda: _events(h, job, "KernelRecordAttached") or None, what="the KernelRecordAttached Event")

    after = job_report(h, job)
    assert after is not None and after["kernelRecord"] == "attached"
    assert after["kill"]["pid"] == record.victim_pid  # what only the record tells
    text = json.dumps(after)
    assert not PENDING.search(text), f"the annotation still says the record is pending: {text}"
    root = after["job"]["rootCause"]
    assert root["pod"] == oom_pod and root["verdict"] == after["verdict"]
    cause = next(f["message"] for f in after["findings"] if f["code"] == after["verdict"])
    assert cause.startswith(root["line"].removesuffix("…")), (root["line"], cause)

    # a JobRootCause Event quotes the new line; the first one's text is superseded
    h.wait(lambda: len(_events(h, job, "JobRootCause")) > len(root_events) or None,
           what="a JobRootCause Event after the record came")
    latest = _events(h, job, "JobRootCause")[-1]
    assert oom_pod in latest and "(rank 2) failed first" in latest and not PENDING.search(latest), latest

    # the page: the job's rows and the kernel record's state agree
    status, body = h.http_get(f"{h.running[0].log_url}/reports/default/{job}")
    assert status == 200
    doc = body.decode()
    assert "kernel OOM record: <b>attached</b>" in doc
    job_part = doc.split('<h2 id="job">', 1)[1].split("<h2", 1)[0]
    assert not PENDING.search(job_part) and "Evidence pending" not in doc, job_part
