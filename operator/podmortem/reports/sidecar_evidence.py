"""The sidecar's evidence document as the operator reads it: untrusted text, one strict model.

The kubelet copies at most 4 KiB of a container's termination message file into
``containerStatuses[].state.terminated.message``, so that is where a sidecar with
no network and no RBAC can leave what it saw. The operator reads the same text
back from the pod status, where anyone who can edit the sidecar's command can
write it: `parse` treats it as untrusted (size, schema, finite non-negative
numbers, bounded strings and lists) and raises only `EvidenceInvalid`. The sidecar
writes it without pydantic (`podmortem.reports.sidecar_document`, whose fields and
bounds these are); `render` is that writer's, for a model. Pure: no I/O.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from podmortem.errors import PodmortemError
from podmortem.reports import sidecar_document
from podmortem.reports.sidecar_document import (
    EVIDENCE_VERSION,
    MAX_COMM,
    MAX_GONE,
    MAX_INT,
    MAX_MESSAGE_BYTES,
    MAX_NOTES,
    MAX_PATH,
    MAX_PID,
    MAX_PROCESSES,
    MAX_SECONDS,
    MAX_TEXT,
    MAX_TREND,
    MAX_VERSION,
    MAX_YEAR,
    MIN_YEAR,
    Role,
    clean_text,
)


class EvidenceInvalid(PodmortemError, ValueError):
    """A termination message that is not a sidecar evidence document this version reads.

    ``str(exc)`` is one short line (at most `MAX_TEXT` characters) that says why, never the input.
    """


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
    podmortem: Annotated[str, Field(max_length=MAX_VERSION), _printable(MAX_VERSION)]
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


def render(doc: SidecarEvidence) -> str:
    """The termination message the sidecar's writer makes of ``doc`` (`sidecar_document.render`): at
    most 4096 bytes, the least valuable parts dropped first."""
    return sidecar_document.render(sidecar_document.from_values(doc.model_dump()))


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
