"""The sidecar's evidence document as the sidecar writes it: frozen dataclasses and `json`, no pydantic.

The sidecar runs in the training pod within 32 MiB (issue 36); pydantic's import and the models
it builds are about 18 MiB, more than the rest of the process. So the writer's side is plain
Python, and the reader's side, `podmortem.reports.sidecar_evidence`, is the strict pydantic model
the operator parses the untrusted message with. One schema: the two have the same fields, and a
test renders documents here and parses them there to the same values
(tests/reports/test_sidecar_document.py).

`render` bounds every part the way the reader checks it (texts cleaned and cut, lists capped,
numbers in range, pids a kernel gives) and always fits `MAX_MESSAGE_BYTES`, dropping the least
valuable parts first. Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

#: The version of this document's shape; a reader refuses any other (a new field that older readers may
#: ignore does not need a new version: unknown keys are ignored).
EVIDENCE_VERSION: Literal[1] = 1
#: The kubelet keeps at most this many bytes of a termination message (``MaxContainerTerminationMessage
#: Length``); a longer file is cut, which would leave JSON that no longer parses.
MAX_MESSAGE_BYTES = 4096
#: Bounds that keep every part small, whatever the processes call themselves.
MAX_TEXT = 200
MAX_COMM = 64
MAX_PATH = 512
MAX_VERSION = 32
MAX_PROCESSES = 16
MAX_TREND = 32
MAX_GONE = 32
MAX_NOTES = 8
#: Linux's PID_MAX_LIMIT: every pid is below it.
MAX_PID = 4_194_304
#: Years a time in the document may have: the sidecar writes the node's clock, so anything outside is
#: not a clock reading (and year 1 with a +14:00 offset cannot even be turned into UTC).
MIN_YEAR, MAX_YEAR = 2000, 2200
MAX_INT = 2**63 - 1
#: Seconds (an interval, an age): a year is more than any of them can honestly be.
MAX_SECONDS = 365 * 86400.0
#: What a cut string ends with, so a reader sees it was cut.
ELLIPSIS = "…"

Role = Literal["trainer", "worker"]
Reason = Literal["trainer-gone", "sigterm", "failed"]


def clean_text(value: str, limit: int) -> str:
    """``value`` printable and at most ``limit`` characters: control and surrogate characters become
    ``?`` and a longer text is cut, ending in an ellipsis. Idempotent."""
    cleaned = "".join(
        "?" if unicodedata.category(ch) in ("Cc", "Cs") else ch for ch in value
    )
    if len(cleaned) > limit:
        cleaned = cleaned[: max(0, limit - 1)] + ELLIPSIS
    return cleaned


@dataclass(frozen=True, kw_only=True)
class Process:
    """One of the trainer container's processes, as the last sample before the kill saw it."""

    pid: int
    comm: str
    #: Proportional set size, bytes; None where smaps_rollup could not be read.
    pss: int | None = None
    #: ``trainer``: the container's lowest pid; ``worker``: any other (DataLoader workers, ranks).
    role: Role


@dataclass(frozen=True, kw_only=True)
class Memory:
    """The container's memory cgroup at the kill, bytes; None where the kernel has no such file."""

    usage: int | None = None
    limit: int | None = None
    peak: int | None = None
    limit_hits: int | None = None
    anon: int | None = None
    file: int | None = None
    shmem: int | None = None
    kernel: int | None = None
    sock: int | None = None
    swap: int | None = None
    age_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Cgroup:
    """The container's memory cgroup: its interface and its path as the sidecar saw it."""

    version: Literal[1, 2]
    path: str


@dataclass(frozen=True, kw_only=True)
class OomCounter:
    """The cgroup's OOM-kill counter before the first kill and at the last reading."""

    before: int | None = None
    after: int | None = None


@dataclass(frozen=True, kw_only=True)
class Kill:
    """An OOM kill: the victim, every pid gone with it (smallest first), and when it was noticed."""

    victim: Process
    gone: list[int] = field(default_factory=list)
    at: datetime


@dataclass(frozen=True, kw_only=True)
class SidecarDocument:
    """Everything the sidecar says about the trainer container; the fields' meanings are those of
    `podmortem.reports.sidecar_evidence.SidecarEvidence`, which reads it."""

    v: Literal[1] = EVIDENCE_VERSION
    podmortem: str
    reason: Reason
    at: datetime
    cgroup: Cgroup | None = None
    mem: Memory | None = None
    oom: OomCounter = field(default_factory=OomCounter)
    kill: Kill | None = None
    later_kills: int = 0
    top: list[Process] = field(default_factory=list)
    procs: int = 0
    samples: int = 0
    interval_s: float = 0.0
    trend: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- bounds: what the reader checks, made true before writing ------------------------------------------


def _count(value: int | None) -> int | None:
    return None if value is None else min(max(0, value), MAX_INT)


def _seconds(value: float) -> float:
    return 0.0 if math.isnan(value) else min(max(0.0, float(value)), MAX_SECONDS)


def _pid_ok(pid: int) -> bool:
    return 1 <= pid < MAX_PID


def _process(p: Process) -> Process:
    return replace(p, comm=clean_text(p.comm, MAX_COMM), pss=_count(p.pss))


def bounded(doc: SidecarDocument) -> SidecarDocument:
    """``doc`` within every bound the reader checks: texts cleaned and cut, lists capped, numbers
    clamped into range, processes and pids no kernel gives left out (a kill whose victim is one)."""
    kill = doc.kill
    if kill is not None:
        kill = None if not _pid_ok(kill.victim.pid) else replace(
            kill, victim=_process(kill.victim), gone=[p for p in kill.gone if _pid_ok(p)][:MAX_GONE]
        )
    mem = doc.mem
    if mem is not None:
        mem = replace(
            mem, **{f.name: _count(getattr(mem, f.name)) for f in fields(mem) if f.name != "age_s"},
            age_s=_seconds(mem.age_s),
        )
    return replace(
        doc,
        podmortem=clean_text(doc.podmortem, MAX_VERSION),
        cgroup=replace(doc.cgroup, path=clean_text(doc.cgroup.path, MAX_PATH)) if doc.cgroup else None,
        mem=mem,
        oom=OomCounter(before=_count(doc.oom.before), after=_count(doc.oom.after)),
        kill=kill,
        later_kills=_count(doc.later_kills) or 0,
        top=[_process(p) for p in doc.top if _pid_ok(p.pid)][:MAX_PROCESSES],
        procs=_count(doc.procs) or 0,
        samples=_count(doc.samples) or 0,
        interval_s=_seconds(doc.interval_s),
        trend=[_count(u) or 0 for u in doc.trend][-MAX_TREND:],
        notes=[clean_text(n, MAX_TEXT) for n in doc.notes[:MAX_NOTES]],
    )


# -- JSON ------------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """JSON values of a document: dataclasses as objects without their None fields, times in UTC."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(v) for f in fields(value) if (v := getattr(value, f.name)) is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return value


def _dump(doc: SidecarDocument) -> str:
    return json.dumps(_plain(doc), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _shrunk(doc: SidecarDocument) -> list[SidecarDocument]:
    """Smaller and smaller versions of ``doc``: the least valuable part goes first.

    Notes, then the oldest of the trend, then the smallest of the top processes, then the other
    vanished pids, then long names; the last one keeps only what a report rests on, and is small
    enough by construction (every string in it cut to a few characters).
    """
    steps = [replace(doc, notes=[])]
    current = steps[-1]
    while current.trend:
        current = replace(current, trend=current.trend[len(current.trend) // 2 + 1 :])
        steps.append(current)
    while current.top:
        current = replace(current, top=current.top[: len(current.top) // 2])
        steps.append(current)
    if current.kill is not None and current.kill.gone:
        current = replace(current, kill=replace(current.kill, gone=[current.kill.victim.pid]))
        steps.append(current)
    steps.append(_short_texts(current, comm=15, path=96))
    steps.append(_short_texts(current, comm=4, path=8, version=8))
    return steps


def _short_texts(
    doc: SidecarDocument, *, comm: int, path: int, version: int = MAX_VERSION
) -> SidecarDocument:
    cgroup = doc.cgroup
    if cgroup is not None:
        # the end of a path names the container; its start is the same for every pod of the node
        tail = cgroup.path[-path:]
        cgroup = replace(cgroup, path=tail if len(cgroup.path) <= path else ELLIPSIS + tail[1:])
    kill = doc.kill
    if kill is not None:
        kill = replace(kill, victim=replace(kill.victim, comm=clean_text(kill.victim.comm, comm)))
    return replace(
        doc, podmortem=clean_text(doc.podmortem, version), cgroup=cgroup, kill=kill,
        top=[replace(p, comm=clean_text(p.comm, comm)) for p in doc.top],
    )


def fit(doc: SidecarDocument) -> SidecarDocument:
    """``doc`` within the reader's bounds (`bounded`) when its JSON fits `MAX_MESSAGE_BYTES`, else the
    fullest smaller version that does."""
    doc = bounded(doc)
    if _size(_dump(doc)) <= MAX_MESSAGE_BYTES:
        return doc
    for smaller in _shrunk(doc):
        if _size(_dump(smaller)) <= MAX_MESSAGE_BYTES:
            return smaller
    raise AssertionError("the shortest evidence document is over 4096 bytes")  # pragma: no cover


def render(doc: SidecarDocument) -> str:
    """The termination message for ``doc``: compact JSON, at most 4096 bytes of UTF-8, always."""
    return _dump(fit(doc))


def from_values(data: Mapping[str, Any]) -> SidecarDocument:
    """The document of values already checked (a parsed `SidecarEvidence`'s ``model_dump()``)."""

    def process(p: Mapping[str, Any]) -> Process:
        return Process(**p)

    kill = data.get("kill")
    return SidecarDocument(**{
        **data,
        "cgroup": Cgroup(**data["cgroup"]) if data.get("cgroup") is not None else None,
        "mem": Memory(**data["mem"]) if data.get("mem") is not None else None,
        "oom": OomCounter(**data.get("oom", {})),
        "kill": (Kill(victim=process(kill["victim"]), gone=list(kill.get("gone", [])), at=kill["at"])
                 if kill is not None else None),
        "top": [process(p) for p in data.get("top", [])],
        "trend": list(data.get("trend", [])),
        "notes": list(data.get("notes", [])),
    })
