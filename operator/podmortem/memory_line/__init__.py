"""Reads the trainer's per-epoch memory line back into bytes.

``podmortem_runtime.memory`` prints the line in the training pod; the operator
finds it in the pod log (after any logger prefix) and needs numbers, not text.
The two packages must not import each other, so the format is a contract kept
by a round-trip test. Example (every field after ``rss`` may be absent in
older or GPU-less lines)::

    -> memory epoch 30: rss 3.00GiB (peak 36.00GiB), pod 5.00GiB of 64.00GiB (peak 40.00GiB),
       cuda reserved 8.00GiB (peak allocated 6.00GiB), workers 2 pss 1.20GiB

(shown on two lines here; the log has it on one.)

Sizes come back in bytes from the printed value (``1.20GiB`` → 1288490189), so
they carry the printed precision: two decimals of the printed unit.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pydantic

from podmortem.errors import PodmortemError

MARKER = "-> memory epoch"

_UNIT_BYTES = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}
#: Digits are bounded: a number no runtime prints is a format error, not a 4,300-digit int().
_SIZE = r"\d{1,15}(?:\.\d{1,9})?(?:B|KiB|MiB|GiB|TiB)"
_LINE = re.compile(
    r"-> memory epoch (?P<epoch>\d{1,9}): "
    rf"rss (?P<rss>{_SIZE}) \(peak (?P<rss_peak>{_SIZE})\)"
    r"(?:, pod (?:unknown|"
    rf"(?P<pod>{_SIZE}) of (?:unlimited|(?P<pod_limit>{_SIZE})) "
    rf"\((?P<peak_kind>seen peak|peak) (?P<pod_peak>{_SIZE})(?:, epoch peak (?P<pod_epoch_peak>{_SIZE}))?\)"
    r"))?"
    rf"(?:, cuda reserved (?P<cuda_reserved>{_SIZE}) \(peak allocated (?P<cuda_peak>{_SIZE})\))?"
    rf"(?:, workers (?P<workers>\d{{1,6}}) pss (?P<workers_pss>{_SIZE}))?"
    r"(?P<rest>.*)$",
    re.ASCII,  # ``\d`` is [0-9]: a line printing "epoch ٣" is no memory line of ours
)
# A known field left over in the tail means that field did not parse: an error, not a later addition.
_KNOWN_FIELD = re.compile(r", (?:pod|cuda|workers)\b")


class MemoryLineError(PodmortemError, ValueError):
    """A line carries the memory-line marker but does not follow the format."""


class PodMemory(pydantic.BaseModel, frozen=True):
    """The trainer's own memory cgroup (the one the pod's limit is enforced on)."""

    usage_bytes: int
    limit_bytes: int | None
    """None: printed ``of unlimited``, no limit anywhere up the cgroup tree."""
    peak_bytes: int
    peak_is_sampled: bool = False
    """True for ``seen peak``: the kernel keeps no peak (cgroup v2 before 5.19); a lower bound."""
    epoch_peak_bytes: int | None = None
    """The highest usage sampled since the previous line; None where no sampler ran."""


class CudaMemory(pydantic.BaseModel, frozen=True):
    reserved_bytes: int
    """``torch.cuda.memory_reserved``: held by the caching allocator now."""
    peak_allocated_bytes: int
    """``torch.cuda.max_memory_allocated``: the most tensors ever held at once."""


class WorkerMemory(pydantic.BaseModel, frozen=True):
    count: int
    """Live descendant processes of the trainer (DataLoader workers, a fork server)."""
    pss_bytes: int
    """Their summed PSS: shared pages split between sharers, so stale fork copies are counted once."""


class MemoryLine(pydantic.BaseModel, frozen=True):
    epoch: int
    rss_bytes: int
    rss_peak_bytes: int
    pod: PodMemory | None = None
    """None: printed ``pod unknown``, or a line older than the pod field."""
    cuda: CudaMemory | None = None
    """None: the trainer had not used CUDA (the runtime never fakes this field)."""
    workers: WorkerMemory | None = None
    """None: a line from before the workers field existed."""


def size_bytes(text: str) -> int:
    """``'1.20GiB'`` → 1288490189: the printed value in bytes, rounded half up to a whole byte."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(B|KiB|MiB|GiB|TiB)", text)
    if match is None:
        raise MemoryLineError(f"not a memory size: {text!r}")
    exact = Decimal(match[1]) * _UNIT_BYTES[match[2]]
    return int(exact.to_integral_value(rounding="ROUND_HALF_UP"))


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def parse(line: str) -> MemoryLine | None:
    """The memory line inside ``line`` (a logger prefix before it is fine), or None if there is none.

    Raises `MemoryLineError` for a line that has the marker but not the format,
    so that a format drift is loud rather than silently unread. Fields added
    after ``workers`` by later runtimes (``, name value``) are ignored.
    """
    start = line.find(MARKER)
    if start < 0:
        return None
    text = line[start:].rstrip("\r\n")
    match = _LINE.match(text)
    rest = match["rest"] if match is not None else ""
    if match is None or (rest and (not rest.startswith(", ") or _KNOWN_FIELD.match(rest))):
        raise MemoryLineError(f"memory line not in the expected format: {_clip(text)!r}")

    def size(name: str) -> int | None:
        value = match[name]
        return None if value is None else size_bytes(value)

    pod = None
    if match["pod"] is not None:
        pod = PodMemory(
            usage_bytes=size_bytes(match["pod"]),
            limit_bytes=size("pod_limit"),
            peak_bytes=size_bytes(match["pod_peak"]),
            peak_is_sampled=match["peak_kind"] == "seen peak",
            epoch_peak_bytes=size("pod_epoch_peak"),
        )
    cuda = None
    if match["cuda_reserved"] is not None:
        cuda = CudaMemory(
            reserved_bytes=size_bytes(match["cuda_reserved"]),
            peak_allocated_bytes=size_bytes(match["cuda_peak"]),
        )
    workers = None
    if match["workers"] is not None:
        workers = WorkerMemory(count=int(match["workers"]), pss_bytes=size_bytes(match["workers_pss"]))
    return MemoryLine(
        epoch=int(match["epoch"]),
        rss_bytes=size_bytes(match["rss"]),
        rss_peak_bytes=size_bytes(match["rss_peak"]),
        pod=pod,
        cuda=cuda,
        workers=workers,
    )
