"""A multi-pod job's root cause as the operator last computed it, and when a pod's changed report moves it.

The section itself (rows, trimming, the Event's line) is `podmortem.diagnosis.job_section`; this
keeps which result the annotation and the page show, and recomputes it when a pod's report changed
after it was written, so no write shows a row quoting the old text.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from podmortem.diagnosis import job_root_cause, job_section
from podmortem.operator.reporting.outcome import Outcome, headline
from podmortem.operator.targets import WatchedTarget


@dataclass
class JobView:
    """A multi-pod job's root cause as last computed, and the uid of its root-cause pod."""

    result: job_root_cause.JobRootCause
    root_uid: str | None


def compute_job(known: WatchedTarget) -> tuple[JobView, str | None] | None:
    """The job's root cause from its pods' facts (None: under two pods, or none failed), and the
    ``JobRootCause`` Event's message when the root, or the line the Event quotes, is not the one
    announced last (a root cause's report that changed makes the earlier Event's text stale)."""
    pods = list(known.job_pods.items())
    if len(pods) < 2 or not any(p.failed for _, p in pods):
        return None
    result = job_root_cause.root_cause([p for _, p in pods])
    root = result.root
    root_uid = next((u for u, p in pods if p is root), None)
    line = next((r.line for r in result.rows if r.facts is root), "")
    key = (root.pod, result.guessed, line) if root is not None else None
    event = job_section.headline(result) if key != known.job_root else None
    known.job_root = key
    return JobView(result=result, root_uid=root_uid), event


def refreshed(known: WatchedTarget, outcome: Outcome) -> tuple[JobView, str | None] | None:
    """The job's root cause again when ``outcome``, its pod's latest report, changed what its row quotes
    (its kernel record came, or never will); None when the row is as it was.

    The pod's facts in ``known`` take the new verdict and line. The second item is the
    ``JobRootCause`` Event's message when it changed (see `compute_job`).
    """
    uid = outcome.termination.pod_uid
    before = known.job_pods.get(uid)
    if before is None or not before.failed:
        return None
    verdict, line = headline(outcome)
    facts = dataclasses.replace(before, verdict=verdict if outcome.report.verdict else None, summary=line)
    if facts == before:
        return None
    known.job_pods[uid] = facts
    return compute_job(known)
