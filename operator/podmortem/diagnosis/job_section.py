"""The job-level section of a multi-pod job's failure report: which rank failed first, and why the rest did.

The operator keeps one `PodFacts` per pod of a followed job (`pod_facts`, built at each pod
event), hands them to `podmortem.diagnosis.job_root_cause`, and writes the result
(`section`) next to the root-cause pod's own report. The section must fit the report's size
cap (an annotation holds 4 KiB by default) even for a thousand pods, so rows are trimmed in
order of least value (pods that did not fail, then consequences, then long lines) and the
section says how many were left out. Pure: facts in, a `JobSection` of the report document out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from podmortem.diagnosis import job_root_cause as jrc
from podmortem.diagnosis import termination as term_mod
from podmortem.kube.bodies import PodBody
from podmortem.reports.document import JobRow, JobSection
from podmortem.reports.text import shorten

#: Characters of a row's line kept before any other trimming (cut at a word: `reports.text.shorten`).
LINE_CHARS = 240
#: Characters of the root cause's line when even the root's row alone does not fit.
ROOT_LINE_CHARS_TIGHT = 80
#: Characters of the root cause's line quoted in the ``JobRootCause`` Event.
EVENT_LINE_CHARS = 300
#: Row order when trimming: the last kinds go first.
_KEEP_ORDER = {"root-cause": 0, "unrelated": 1, "consequence": 2, "not-failed": 3}


def pod_facts(
    pod: Mapping[str, Any],
    *,
    tails: Mapping[str, Sequence[str]],
    last_lines_ns: Mapping[str, int],
    verdict: str | None,
    summary: str | None,
    log_url: Callable[[str], str],
    deleted: bool = False,
) -> jrc.PodFacts:
    """One pod's facts from its object, its containers' log tails and its own report's verdict and headline.

    ``log_url`` gives the address of a container's stored log, by the container's name: the caller
    knows where logs are served, and the container is chosen here.

    The container is the first that failed (the one the pod's report is about), else the first.
    A pod that has not failed keeps no log facts: its row does not need them, and facts that do
    not change at each event let the caller skip recomputing the job.
    """
    body = PodBody(pod)
    name = body.name
    found = term_mod.find(pod)
    first = min(found, key=_first_end) if found else None
    containers = body.containers or [{}]
    container = first.container if first is not None else str(containers[0].get("name", ""))
    failed = first is not None
    last_line_ns = last_lines_ns.get(container) if failed else None
    return jrc.PodFacts(
        pod=name,
        container=container,
        rank=jrc.rank_of(pod),
        exit_code=first.exit_code if first is not None else None,
        reason=(first.reason or first.pod_reason) if first is not None else None,
        finished_at=first.finished_at if first is not None else None,
        last_line_at=(
            datetime.fromtimestamp(last_line_ns / 1e9, UTC) if last_line_ns is not None else None
        ),
        verdict=verdict,
        summary=summary,
        last_lines=tuple(tails.get(container, ())) if failed else (),
        log_url=log_url(container),
        failed=failed,
        several_containers=len(containers) + len(body.init_containers) > 1,
        deleted=deleted,
    )


def _first_end(t: term_mod.Termination) -> tuple[bool, datetime, bool]:
    """The container that ended first (a sidecar OOM-killed before the trainer failed); OOMKilled on a tie."""
    return (t.finished_at is None, t.finished_at or datetime.max.replace(tzinfo=UTC), t.reason != "OOMKilled")


def _row(r: jrc.PodRow) -> JobRow:
    p = r.facts
    row = JobRow(pod=p.pod, rank=p.rank, role=r.role, log_url=p.log_url, deleted=p.deleted)
    if p.several_containers:  # which of the pod's containers the row is about
        row.container = p.container
    if p.failed:
        row.exit_code, row.reason, row.finished_at = p.exit_code, p.reason, p.finished_at
    if r.line and r.role != "root-cause":  # the root's line is in ``rootCause``
        row.line = shorten(r.line, LINE_CHARS)
    return row


def section(result: jrc.JobRootCause, *, max_bytes: int) -> JobSection:
    """The ``job`` section: root cause, counts by role, and one row per pod, within ``max_bytes``.

    Rows are sorted by rank. Trimmed when too big: not-failed rows first, then consequences
    (the counts keep them), then unrelated ones, each time the highest ranks first; ``rowsOmitted``
    and ``note`` say so. The root cause is never cut.
    """
    roles = Counter(r.role for r in result.rows)
    doc = JobSection(pods=len(result.rows), roles=dict(sorted(roles.items())))
    root = result.root
    notes = []
    if root is not None:
        root_row = next(r for r in result.rows if r.facts is root)
        doc.root_cause = _row(root_row).model_copy(update={
            "container": root.container, "verdict": root.verdict, "line": shorten(root_row.line, LINE_CHARS)
        })
        doc.guessed = result.guessed
        if result.guessed:
            notes.append(
                "no failed pod shows a cause of its own yet (each names a peer's failure): "
                "the earliest failure is named, a guess"
            )
    gone = sum(1 for r in result.rows if r.facts.deleted)
    if gone:
        notes.append(f"{gone} of {len(result.rows)} pods deleted since: their rows are what was seen before")
    doc.note = "; ".join(notes) or None
    rows = [_row(r) for r in result.rows]
    doc.rows = rows
    if doc.json_size() <= max_bytes:
        return doc
    # Drop rows by least value; keep rank order among the rest.
    order = sorted(range(len(rows)), key=lambda i: (_KEEP_ORDER[rows[i].role or ""], i))
    lo, hi = 0, len(order)
    # Binary search the most rows that fit (each row's size varies little).
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _with_rows(doc, rows, order[:mid]).json_size() <= max_bytes:
            lo = mid
        else:
            hi = mid - 1
    trimmed = _with_rows(doc, rows, order[:lo])
    if trimmed.json_size() > max_bytes:  # even the root alone is too big: drop the lines, then the rows
        trimmed.rows = [row.model_copy(update={"line": None}) for row in trimmed.rows]
        if trimmed.root_cause is not None and trimmed.root_cause.line is not None:
            trimmed.root_cause.line = shorten(trimmed.root_cause.line, ROOT_LINE_CHARS_TIGHT)
        if trimmed.json_size() > max_bytes:
            trimmed.rows = []
    return trimmed


def _with_rows(doc: JobSection, rows: list[JobRow], picked: Sequence[int]) -> JobSection:
    out = doc.model_copy(update={"rows": [rows[i] for i in sorted(picked)]})
    omitted = len(rows) - len(picked)
    if omitted:
        out.rows_omitted = omitted
        out.note = (doc.note + "; " if doc.note else "") + (
            f"{omitted} of {len(rows)} rows left out to fit the report's size limit "
            "(not-failed pods first, then consequences); the role counts cover every pod"
        )
    return out


def headline(result: jrc.JobRootCause) -> str | None:
    """The Event's message: the root-cause pod and its line, and how the others were read."""
    root = result.root
    if root is None:
        return None
    roles = Counter(r.role for r in result.rows)
    rank = f"rank {root.rank}" if root.rank is not None else "rank unknown"
    line = next((r.line for r in result.rows if r.facts is root), "")
    first = "failed first (a guess: every failed pod names a peer)" if result.guessed else "failed first"
    return (
        f"{root.pod} ({rank}) {first}: {shorten(line, EVENT_LINE_CHARS)}; "
        f"{roles['consequence']} consequence(s), {roles['unrelated']} unrelated failure(s), "
        f"{roles['not-failed']} pod(s) not failed"
    )
