"""Which pod of a multi-pod training job failed first, and which failures only followed from it.

When one rank of a distributed job dies, every other rank fails a minute later (an NCCL
watchdog timeout, a reset connection, torchrun stopping its workers with SIGTERM), and the
job's own status shows the last failure. Given per-pod facts, `root_cause` picks the first
pod that failed *of its own* (by termination time, ties broken by the earlier last log line,
then the rank) and labels every other pod: ``consequence`` when its log or exit code says a
peer went first, ``unrelated`` when it failed on its own too (a second, independent failure),
``not-failed`` otherwise. Pure; linear in the pods after one sort, so a thousand pods is cheap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from podmortem.diagnosis import training_log
from podmortem.kube.bodies import PodBody
from podmortem.reports import codes

#: Verdicts that are a pod's own death whatever its log says later: every verdict but the two that
#: may be a peer's doing (a plain SIGKILL, a Python exception such as a connection reset).
OWN_CAUSES = frozenset(codes.VERDICTS) - {"sigkill-not-oom", "python-exception"}
SIGTERM_EXIT = 143
#: A local worker killed by one of these (SIGBUS, SIGKILL, SIGSEGV) died of something of this pod's:
#: the agent's ``Sending process N closing signal SIGTERM`` lines are it stopping that worker's
#: siblings, not a sign that a peer failed first.
LOCAL_SIGNALS = frozenset({7, 9, 11})
ROLES = ("root-cause", "consequence", "unrelated", "not-failed")


@dataclass(frozen=True)
class PodFacts:
    """What the job-level report needs of one pod (one container: the trainer's)."""

    pod: str
    container: str
    rank: int | None
    exit_code: int | None
    reason: str | None
    finished_at: datetime | None
    last_line_at: datetime | None
    #: The per-pod report's verdict (None: no report, or no cause found).
    verdict: str | None
    #: The per-pod report's first finding message, the line that shows the verdict.
    summary: str | None = None
    last_lines: tuple[str, ...] = ()
    log_url: str | None = None
    #: False for pods still running or succeeded.
    failed: bool = True
    #: The pod has more than one container: its row names the one it is about.
    several_containers: bool = False
    #: The pod was deleted (a job controller's cleanup); its facts are the last ones seen.
    deleted: bool = False


@dataclass(frozen=True)
class PodRow:
    facts: PodFacts
    role: str
    #: The line that shows the role: the cause's finding, or the log line naming the peer's failure.
    line: str


@dataclass(frozen=True)
class JobRootCause:
    root: PodFacts | None
    rows: list[PodRow]
    #: True when no failed pod shows a cause of its own: the root is the earliest failure, a guess.
    guessed: bool = False

    @property
    def unrelated(self) -> list[PodFacts]:
        return [r.facts for r in self.rows if r.role == "unrelated"]


def peer_evidence(p: PodFacts) -> str | None:
    """The line showing this pod failed because another did, or None."""
    signals = training_log.peer_signals(p.last_lines)
    strong = [s for s in signals if s.kind != "agent-sigterm"]
    if strong:
        return strong[0].line
    child = training_log.child_failure(p.last_lines)
    if signals and not (child is not None and child.signal in LOCAL_SIGNALS):
        return signals[0].line
    if child is not None and child.exit_code == -15:
        return f"torchrun: local rank {child.local_rank} exited with -15 (SIGTERM)"
    if p.exit_code == SIGTERM_EXIT:
        return "exit 143: stopped with SIGTERM"
    return None


def own_cause(p: PodFacts) -> bool:
    """Whether the pod died of something of its own, not because a peer went first."""
    if not p.failed:
        return False
    if p.verdict in OWN_CAUSES:
        return True
    return peer_evidence(p) is None


def _order(p: PodFacts) -> tuple[bool, datetime | str, bool, datetime | str, int, str]:
    """Earliest termination first; ties (1 s resolution) by the earlier last log line, then rank."""
    return (
        p.finished_at is None,
        p.finished_at or "",
        p.last_line_at is None,
        p.last_line_at or "",
        p.rank if p.rank is not None else 1 << 30,
        p.pod,
    )


def root_cause(pods: Sequence[PodFacts]) -> JobRootCause:
    """The first pod to fail of its own, and a role for every pod."""
    failed = sorted((p for p in pods if p.failed), key=_order)
    own = [p for p in failed if own_cause(p)]
    guessed = not own and bool(failed)
    root = own[0] if own else (failed[0] if failed else None)
    rows: list[PodRow] = []
    for p in sorted(pods, key=lambda q: (q.rank if q.rank is not None else 1 << 30, q.pod)):
        if root is not None and p is root:
            rows.append(PodRow(p, "root-cause", p.summary or _exit_text(p)))
        elif not p.failed:
            rows.append(PodRow(p, "not-failed", ""))
        elif p.verdict not in OWN_CAUSES and (evidence := peer_evidence(p)) is not None:
            rows.append(PodRow(p, "consequence", evidence))
        else:
            rows.append(PodRow(p, "unrelated", p.summary or _exit_text(p)))
    return JobRootCause(root=root, rows=rows, guessed=guessed)


def _exit_text(p: PodFacts) -> str:
    return f"exit {p.exit_code}" + (f" ({p.reason})" if p.reason else "")


# --- ranks -------------------------------------------------------------------------------------

_RANK_ENV = ("RANK", "PET_NODE_RANK", "JOB_COMPLETION_INDEX")
_FIELD_REF = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def _env_value(env: Mapping[str, Any], meta: Mapping[str, Any]) -> str | None:
    """A literal value, or a downward-API fieldRef to a label or annotation (how JobSets pass the index)."""
    if "value" in env:
        return str(env["value"])
    ref = ((env.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
    m = _FIELD_REF.fullmatch(str(ref))
    if m is None:
        return None
    value = (meta.get(m.group(1)) or {}).get(m.group(2))
    return str(value) if value is not None else None


def rank_of(pod: Mapping[str, Any]) -> int | None:
    """The pod's rank: RANK / PET_NODE_RANK / JOB_COMPLETION_INDEX env, else the index labels.

    The env may be literal (the Kubeflow training operator sets RANK) or a fieldRef to a label
    or annotation (a JobSet's ``batch.kubernetes.io/job-completion-index``). Without env, a
    PyTorchJob's master is rank 0 and worker ``i`` rank ``i + 1``; an indexed Job's pod its
    completion index; a JobSet's pod its ``jobset.sigs.k8s.io/job-index`` (one pod per job, the
    usual one torchrun per node; with more, the env says the rank).
    """
    body = PodBody(pod)
    meta = body.metadata
    labels = {**body.annotations, **body.labels}
    for c in body.containers:
        env = {e.get("name"): e for e in c.get("env") or []}
        for name in _RANK_ENV:
            value = _env_value(env[name], meta) if name in env else None
            if value is not None and re.fullmatch(r"\d+", value):
                return int(value)
    kf_index = str(labels.get("training.kubeflow.org/replica-index", ""))
    if re.fullmatch(r"\d+", kf_index):
        kind = str(labels.get("training.kubeflow.org/replica-type", "")).lower()
        return int(kf_index) + (1 if kind == "worker" else 0)
    for key in ("jobset.sigs.k8s.io/job-index", "batch.kubernetes.io/job-completion-index"):
        value = str(labels.get(key, ""))
        if re.fullmatch(r"\d+", value):
            return int(value)
    return None
