"""The sidecar's evidence document: what it hands the operator through the termination message.

The kubelet copies at most 4 KiB of a container's termination message file into
``containerStatuses[].state.terminated.message``, so that is where a sidecar with
no network and no RBAC can leave what it saw. The operator reads the same text
back from the pod status, where anyone who can edit the sidecar's command can
write it: `parse` treats it as untrusted (size, schema, finite non-negative
numbers, bounded strings and lists) and raises only `EvidenceInvalid`.
`render` is the writer's side: it always fits 4096 bytes, dropping the least
valuable parts first. Pure: no I/O.
"""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from podmortem.errors import PodmortemError

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


class EvidenceInvalid(PodmortemError, ValueError):
    """A termination message that is not a sidecar evidence document this version reads.

    ``str(exc)`` is one short line (at most `MAX_TEXT` characters) that says why, never the input.
    """


def clean_text(value: str, limit: int) -> str:
    """``value`` printable and at most ``limit`` characters: control and surrogate characters become
    ``?`` and a longer text is cut, ending in an ellipsis. Idempotent."""
    cleaned = "".join(
        "?" if unicodedata.category(ch) in ("Cc", "Cs") else ch for ch in value
    )
    if len(cleaned) > limit:
        cleaned = cleaned[: max(0, limit - 1)] + ELLIPSIS
    return cleaned


def _printable(limit: int) -> AfterValidator:
    def check(value: str) -> str:
        return clean_text(value, limit)

    return AfterValidator(check)


def _sane_time(value: datetime) -> datetime:
    """In UTC, between `MIN_YEAR` and `MAX_YEAR`; anything else is refused (never an OverflowError later)."""
    try:
        utc = value.astimezone(UTC)
    except (OverflowError, ValueError) as exc:
        raise ValueError("a time that cannot be given in UTC") from exc
    if not MIN_YEAR <= utc.year <= MAX_YEAR:
        raise ValueError(f"a time outside the years {MIN_YEAR}..{MAX_YEAR}")
    return utc


Bytes = Annotated[int, Field(ge=0, le=MAX_INT)]
Count = Annotated[int, Field(ge=0, le=MAX_INT)]
Pid = Annotated[int, Field(ge=1, lt=MAX_PID)]
Time = Annotated[AwareDatetime, AfterValidator(_sane_time)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
Comm = Annotated[str, Field(max_length=MAX_COMM), _printable(MAX_COMM)]
Text = Annotated[str, Field(max_length=MAX_TEXT), _printable(MAX_TEXT)]
CgroupPath = Annotated[str, Field(max_length=MAX_PATH), _printable(MAX_PATH)]
Role = Literal["trainer", "worker"]


class _Part(BaseModel):
    # strict: a number is a JSON number, never "12" or true; unknown keys are ignored (a newer writer)
    model_config = ConfigDict(frozen=True, strict=True, extra="ignore", allow_inf_nan=False)


class Process(_Part):
    """One of the trainer container's processes, as the last sample before the kill saw it."""

    pid: Pid
    comm: Comm
    #: Proportional set size, bytes (shared pages split between the processes that map them); None
    #: where smaps_rollup could not be read.
    pss: Bytes | None = None
    #: ``trainer``: the container's lowest pid; ``worker``: any other (DataLoader workers, ranks).
    role: Role


class Memory(_Part):
    """The container's memory cgroup at the kill, bytes; None where the kernel has no such file."""

    usage: Bytes | None = None
    limit: Bytes | None = None
    #: The high-water mark, read after the kill (memory.peak v2, memory.max_usage_in_bytes v1).
    peak: Bytes | None = None
    #: How often a charge hit the limit (memory.failcnt v1, ``max`` of memory.events v2).
    limit_hits: Count | None = None
    #: The main memory.stat classes (each charged byte once; ``file`` without shmem).
    anon: Bytes | None = None
    file: Bytes | None = None
    shmem: Bytes | None = None
    kernel: Bytes | None = None
    sock: Bytes | None = None
    swap: Bytes | None = None
    #: Seconds between this sample and the kill (or the end): how stale ``usage`` and the classes are.
    age_s: Seconds = 0.0


class Cgroup(_Part):
    """The container's memory cgroup: its interface and its path as the sidecar saw it."""

    version: Literal[1, 2]
    #: As ``/proc/<pid>/cgroup`` shows it to the sidecar: relative to the sidecar's own cgroup namespace,
    #: so ``/../<container>`` or ``/`` in a pod with cgroup namespaces.
    path: CgroupPath


class OomCounter(_Part):
    """The cgroup's OOM-kill counter (``oom_kill`` of memory.events v2 / memory.oom_control v1)."""

    #: At the last reading before the first kill the sidecar saw (at its first reading when none).
    before: Count | None = None
    #: At the last reading.
    after: Count | None = None


class Kill(_Part):
    """An OOM kill: the counter rose and a process vanished; the victim is the largest of those gone."""

    victim: Process
    #: Every pid that vanished with it, the victim included, smallest first.
    gone: Annotated[list[Pid], Field(max_length=MAX_GONE)] = Field(default_factory=list)
    #: When the sidecar noticed it.
    at: Time


class SidecarEvidence(_Part):
    """Everything the sidecar says about the trainer container, in at most 4096 bytes of JSON."""

    v: Literal[1] = EVIDENCE_VERSION
    #: The podmortem version that wrote it.
    podmortem: Annotated[str, Field(max_length=32), _printable(32)]
    #: Why it was written: the trainer's processes were all gone, the sidecar got SIGTERM, or the
    #: sidecar failed (``notes`` say what failed and why; the rest is what it had until then).
    reason: Literal["trainer-gone", "sigterm", "failed"]
    #: When it was written.
    at: Time
    cgroup: Cgroup | None = None
    mem: Memory | None = None
    oom: OomCounter = Field(default_factory=OomCounter)
    kill: Kill | None = None
    #: Kills the sidecar saw after the first (the counter says how many there were in all).
    later_kills: Count = 0
    #: The largest processes by PSS at the last sample before the kill (or the end), largest first.
    top: Annotated[list[Process], Field(max_length=MAX_PROCESSES)] = Field(default_factory=list)
    #: How many processes the container had at that sample (``top`` may hold fewer).
    procs: Count = 0
    #: Samples taken, and the seconds between two.
    samples: Count = 0
    interval_s: Seconds = 0.0
    #: ``usage`` of the last samples, oldest first, one per interval, up to that sample.
    trend: Annotated[list[Bytes], Field(max_length=MAX_TREND)] = Field(default_factory=list)
    #: What the sidecar could not read, in words (e.g. ``2 processes unreadable``).
    notes: Annotated[list[Text], Field(max_length=MAX_NOTES)] = Field(default_factory=list)


def _dump(doc: SidecarEvidence) -> str:
    return doc.model_dump_json(exclude_none=True)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _shrunk(doc: SidecarEvidence) -> list[SidecarEvidence]:
    """Smaller and smaller versions of ``doc``: the least valuable part goes first.

    Notes, then the oldest of the trend, then the smallest of the top processes, then the other
    vanished pids, then long names; the last one keeps only what a report rests on, and is small
    enough by construction (every string in it cut to a few characters).
    """
    steps = [doc.model_copy(update={"notes": []})]
    current = steps[-1]
    while current.trend:
        current = current.model_copy(update={"trend": current.trend[len(current.trend) // 2 + 1 :]})
        steps.append(current)
    while current.top:
        current = current.model_copy(update={"top": current.top[: len(current.top) // 2]})
        steps.append(current)
    if current.kill is not None and current.kill.gone:
        kill = current.kill.model_copy(update={"gone": [current.kill.victim.pid]})
        current = current.model_copy(update={"kill": kill})
        steps.append(current)
    steps.append(_short_texts(current, comm=15, path=96))
    steps.append(_short_texts(current, comm=4, path=8, version=8))
    return steps


def _short_texts(doc: SidecarEvidence, *, comm: int, path: int, version: int = 32) -> SidecarEvidence:
    update: dict[str, object] = {"podmortem": clean_text(doc.podmortem, version)}
    if doc.cgroup is not None:
        # the end of a path names the container; its start is the same for every pod of the node
        tail = doc.cgroup.path[-path:]
        short = tail if len(doc.cgroup.path) <= path else ELLIPSIS + tail[1:]
        update["cgroup"] = doc.cgroup.model_copy(update={"path": short})
    if doc.kill is not None:
        victim = doc.kill.victim.model_copy(update={"comm": clean_text(doc.kill.victim.comm, comm)})
        update["kill"] = doc.kill.model_copy(update={"victim": victim})
    update["top"] = [p.model_copy(update={"comm": clean_text(p.comm, comm)}) for p in doc.top]
    return doc.model_copy(update=update)


def fit(doc: SidecarEvidence) -> SidecarEvidence:
    """``doc`` itself when its JSON fits `MAX_MESSAGE_BYTES`, else the fullest smaller version that does."""
    if _size(_dump(doc)) <= MAX_MESSAGE_BYTES:
        return doc
    for smaller in _shrunk(doc):
        if _size(_dump(smaller)) <= MAX_MESSAGE_BYTES:
            return smaller
    raise AssertionError("the shortest evidence document is over 4096 bytes")  # pragma: no cover


def render(doc: SidecarEvidence) -> str:
    """The termination message for ``doc``: compact JSON, at most 4096 bytes of UTF-8, always."""
    return _dump(fit(doc))


def _why(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "document"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return clean_text(f"{where}: {first.get('msg', 'invalid')}{more}", MAX_TEXT)


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different (two readers could otherwise take different ones)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise EvidenceInvalid(clean_text(f"the key {key!r} twice in one object", MAX_TEXT))
        seen[key] = value
    return seen


def parse(text: str | bytes) -> SidecarEvidence:
    """Read a termination message back into a `SidecarEvidence`; raise `EvidenceInvalid` for anything else.

    Checked, in order: at most `MAX_MESSAGE_BYTES` bytes, UTF-8, JSON without a key twice in one
    object, then the schema (strict types, finite non-negative numbers in range, bounded strings and
    lists, times in UTC within `MIN_YEAR`..`MAX_YEAR`, ``v`` = `EVIDENCE_VERSION`).
    """
    if isinstance(text, str):
        data = text.encode("utf-8", "surrogatepass")
    elif isinstance(text, bytes | bytearray | memoryview):
        data = bytes(text)
    else:
        raise EvidenceInvalid(f"expected text or bytes, got {type(text).__name__}")
    if len(data) > MAX_MESSAGE_BYTES:
        raise EvidenceInvalid(f"{len(data)} bytes, over the {MAX_MESSAGE_BYTES} a termination message holds")
    if not data.strip():
        raise EvidenceInvalid("empty")
    try:
        json.loads(data, object_pairs_hook=_refuse_duplicates)
    except EvidenceInvalid:
        raise
    except (ValueError, RecursionError):
        pass  # not JSON: the schema's reading below says why
    try:
        return SidecarEvidence.model_validate_json(data)
    except ValidationError as exc:
        raise EvidenceInvalid(_why(exc)) from None
    except (ValueError, RecursionError) as exc:  # pragma: no cover - pydantic reports these as above
        raise EvidenceInvalid(clean_text(f"unreadable: {type(exc).__name__}", MAX_TEXT)) from None
