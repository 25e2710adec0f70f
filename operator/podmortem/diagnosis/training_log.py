"""What a training container's last log lines say about its death: torch, NCCL and torchrun texts.

A trainer that dies of anything but a signal from outside says why on its way out: a
``torch.OutOfMemoryError`` with the caching allocator's numbers, a Python traceback, a
DataLoader worker killed by SIGBUS, an NCCL watchdog that gave up on a peer, torchrun's agent
stopping the local workers. These functions read those texts (as printed by torch 1.x to 2.x,
NCCL 2.14 to 2.21, see ``tests/fixtures/training-logs/SOURCES.md``) into plain facts. Pure: lines
in, dataclasses out; each reads the lines once, so a thousand pods' tails cost little.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

#: ``[rank2]:`` (torch >= 2.2 prefixes every line of a rank's stderr under torchrun --log-prefix)
#: and ``stderr: `` (some launchers) are not part of the message.
_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]: ?|stderr: |stdout: )+")

_SIZE = r"(?:\d+(?:\.\d+)?\s*(?:[KMGTP]i?B|bytes|B))"
_UNITS = {
    "B": 1,
    "BYTES": 1,
    "KB": 1024,
    "KIB": 1024,
    "MB": 1024**2,
    "MIB": 1024**2,
    "GB": 1024**3,
    "GIB": 1024**3,
    "TB": 1024**4,
    "TIB": 1024**4,
    "PB": 1024**5,
    "PIB": 1024**5,
}


def size_bytes(text: str) -> int:
    """``"30.29 GiB"`` -> bytes, rounded half up (torch prints binary units; ``0 bytes`` for nothing)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*", text)
    if m is None:
        raise ValueError(f"not a size: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()] + 0.5)


def strip_prefix(line: str) -> str:
    return _PREFIX.sub("", line.rstrip("\r\n"))


@dataclass(frozen=True)
class CudaOom:
    """The caching allocator's account of a failed allocation (bytes; None where the form omits it)."""

    line: str
    device: int | None
    tried: int
    total: int | None
    free: int | None
    #: What this process holds on the device, PyTorch's and the CUDA context's (torch >= 2.1).
    process_in_use: int | None
    allocated: int | None
    #: Reserved by the allocator but not handed out: memory it cannot use for this request.
    reserved_unallocated: int | None
    #: Other processes on the same device (``Process N has X memory in use``).
    other_processes: tuple[tuple[int, int], ...] = ()
    #: "2.x" (``GPU N has a total capacity``), "1.x" (``(GPU N; ... total capacity; ...)``).
    form: str = "2.x"

    @property
    def fragmented(self) -> bool:
        """Reserved-but-unallocated would have held the request: a fragmentation failure, not a full GPU."""
        return self.reserved_unallocated is not None and self.reserved_unallocated >= self.tried


_OOM_NEW = re.compile(
    rf"CUDA out of memory\. Tried to allocate (?P<tried>{_SIZE})\. GPU (?P<dev>\d+) has a total "
    rf"capac(?:i)?ty of (?P<total>{_SIZE}) of which (?P<free>{_SIZE}) is free\.(?P<rest>.*)"
)
_OOM_OLD = re.compile(
    rf"CUDA out of memory\. Tried to allocate (?P<tried>{_SIZE}) \(GPU (?P<dev>\d+); (?P<total>{_SIZE}) "
    rf"total capacity; (?P<allocated>{_SIZE}) already allocated; (?P<free>{_SIZE}) free;"
    rf"(?: (?P<max>{_SIZE}) max allowed;)? (?:(?P<reserved>{_SIZE}) reserved in total by PyTorch|"
    rf"(?P<cached>{_SIZE}) cached)\)"
)
_OOM_BARE = re.compile(rf"CUDA out of memory\. Tried to allocate (?P<tried>{_SIZE})")
_IN_USE = re.compile(rf"this process has (?P<v>{_SIZE}) memory in use")
_OTHER = re.compile(rf"Process (?P<pid>\d+) has (?P<v>{_SIZE}) memory in use")
_ALLOC = re.compile(
    rf"Of the allocated memory (?P<a>{_SIZE}) is allocated by PyTorch, and (?P<r>{_SIZE}) is reserved "
    r"by PyTorch but unallocated"
)


def cuda_oom(lines: Sequence[str]) -> CudaOom | None:
    """The last CUDA out-of-memory message in ``lines``, with the allocator's numbers."""
    for raw in reversed(lines):
        if "CUDA out of memory" not in raw:
            continue
        line = strip_prefix(raw).strip()
        m = _OOM_NEW.search(line)
        if m is not None:
            rest = m.group("rest")
            in_use = _IN_USE.search(rest)
            alloc = _ALLOC.search(rest)
            others = tuple((int(o.group("pid")), size_bytes(o.group("v"))) for o in _OTHER.finditer(rest))
            return CudaOom(
                line=line,
                device=int(m.group("dev")),
                tried=size_bytes(m.group("tried")),
                total=size_bytes(m.group("total")),
                free=size_bytes(m.group("free")),
                process_in_use=size_bytes(in_use.group("v")) if in_use else None,
                allocated=size_bytes(alloc.group("a")) if alloc else None,
                reserved_unallocated=size_bytes(alloc.group("r")) if alloc else None,
                other_processes=others,
                form="2.x",
            )
        m = _OOM_OLD.search(line)
        if m is not None:
            allocated = size_bytes(m.group("allocated"))
            reserved = m.group("reserved") or m.group("cached")
            return CudaOom(
                line=line,
                device=int(m.group("dev")),
                tried=size_bytes(m.group("tried")),
                total=size_bytes(m.group("total")),
                free=size_bytes(m.group("free")),
                process_in_use=None,
                allocated=allocated,
                reserved_unallocated=max(size_bytes(reserved) - allocated, 0)
                if m.group("reserved")
                else None,
                form="1.x",
            )
        m = _OOM_BARE.search(line)
        if m is not None:
            return CudaOom(
                line=line,
                device=None,
                tried=size_bytes(m.group("tried")),
                total=None,
                free=None,
                process_in_use=None,
                allocated=None,
                reserved_unallocated=None,
                form="unknown",
            )
    return None


@dataclass(frozen=True)
class PythonException:
    """The exception that ended the process, and the chain that led to it (first = where it began)."""

    line: str
    chain: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.line.split(":", 1)[0].strip()

    @property
    def origin(self) -> str:
        return self.chain[0] if self.chain else self.line


_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


def python_exception(lines: Sequence[str]) -> PythonException | None:
    """The exception line closing the last traceback, with the exceptions chained before it.

    The first unindented line after a ``Traceback`` header's frames is its exception; a chain
    separator ("During handling of the above exception", "The above exception was the direct
    cause") links the next traceback to it. A later unchained traceback starts a new story.
    """
    found: list[str] = []
    in_traceback = False
    chained = False
    for raw in lines:
        line = strip_prefix(raw)
        stripped = line.strip()
        if stripped == _TRACEBACK:
            in_traceback = True
            continue
        if stripped in _CHAINED:
            chained = bool(found)
            continue
        if not in_traceback or not stripped or line[:1] in (" ", "\t") or stripped.startswith(("^", "~")):
            continue  # outside a traceback, or a frame, a code line, carets
        if not chained:
            found.clear()
        found.append(stripped)
        in_traceback = chained = False
    if not found:
        return None
    return PythonException(line=found[-1], chain=tuple(found[:-1]))


@dataclass(frozen=True)
class ShmEvidence:
    """A sign that /dev/shm filled: the line, and the DataLoader worker's pid when named."""

    line: str
    kind: str  # "dataloader-bus-error", "worker-bus-error", "shm-no-space"
    worker_pid: int | None = None


_DL_BUS = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: Bus error")
_WORKER_BUS = "Unexpected bus error encountered in worker"
_NO_SPACE = re.compile(
    r"(?:</torch_\S*>|/dev/shm)\S*:? No space left on device|No space left on device.*/dev/shm"
)


def shm_evidence(lines: Sequence[str]) -> ShmEvidence | None:
    """The first line that shows shared memory ran out (torch's own words, not any ``Bus error``)."""
    for raw in lines:
        line = strip_prefix(raw).strip()
        m = _DL_BUS.search(line)
        if m is not None:
            return ShmEvidence(line=line, kind="dataloader-bus-error", worker_pid=int(m.group(1)))
        if _WORKER_BUS in line:
            return ShmEvidence(line=line, kind="worker-bus-error")
        if _NO_SPACE.search(line):
            return ShmEvidence(line=line, kind="shm-no-space")
    return None


@dataclass(frozen=True)
class ChildFailure:
    """torchrun's ``ChildFailedError`` root cause: the local worker that failed first in this pod."""

    rank: int | None
    local_rank: int | None
    exit_code: int | None
    pid: int | None
    time: str | None
    host: str | None


_FIELD = re.compile(r"\b(time|host|rank|exitcode)\s*:\s*(\S+)(?:\s*\((?:local_rank|pid):\s*(-?\d+)\))?")


def child_failure(lines: Sequence[str]) -> ChildFailure | None:
    """The ``Root Cause (first observed failure)`` block of torchrun's summary, one line or many."""
    text = ""
    for i, raw in enumerate(lines):
        if "Root Cause (first observed failure)" in raw:
            text = " ".join(strip_prefix(x).strip() for x in lines[i : i + 10])
            text = text.split("Root Cause (first observed failure)", 1)[1].split("=====", 1)[0]
    if not text:
        return _agent_failure(lines)
    fields: dict[str, tuple[str, str | None]] = {}
    for m in _FIELD.finditer(text):
        fields.setdefault(m.group(1), (m.group(2), m.group(3)))

    def num(value: str | None) -> int | None:
        return int(value) if value is not None and re.fullmatch(r"-?\d+", value) else None

    rank = fields.get("rank", ("", None))
    code = fields.get("exitcode", ("", None))
    return ChildFailure(
        rank=num(rank[0]),
        local_rank=num(rank[1]),
        exit_code=num(code[0]),
        pid=num(code[1]),
        time=fields.get("time", (None, None))[0],
        host=fields.get("host", (None, None))[0],
    )


#: torch.distributed.elastic's agent (multiprocessing/api.py), logged for the first worker that failed:
#: ``"failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s"`` (glog or logging prefixes before it).
_AGENT_FAILED = re.compile(
    r"failed \(exitcode: (-?[0-9]{1,4})\) local_rank: ([0-9]{1,6}) \(pid: ([0-9]{1,10})\)"
)


def _agent_failure(lines: Sequence[str]) -> ChildFailure | None:
    """The agent's own line for the first failed worker, where the summary block was cut off."""
    for raw in lines:
        if "failed (exitcode:" in raw:
            m = _AGENT_FAILED.search(raw)
            if m is not None:
                return ChildFailure(rank=None, local_rank=int(m.group(2)), exit_code=int(m.group(1)),
                                    pid=int(m.group(3)), time=None, host=None)
    return None


@dataclass(frozen=True)
class PeerSignal:
    """A line saying this rank failed because of another: what kind, and the line."""

    kind: str  # "nccl-timeout", "peer-lost", "nccl-abort", "agent-sigterm"
    line: str


_PEER_SIGNALS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nccl-timeout", re.compile(r"Watchdog caught collective operation timeout")),
    (
        "peer-lost",
        re.compile(
            r"Connection reset by peer|Connection closed by remote peer|remote process "
            r"exited or there was a network error|ncclRemoteError|Broken pipe"
        ),
    ),
    (
        "nccl-abort",
        re.compile(r"Some NCCL operations have failed or timed out|NCCL watchdog thread terminated"),
    ),
    ("agent-sigterm", re.compile(r"Sending process \d+ closing signal SIGTERM")),
)


def peer_signals(lines: Sequence[str]) -> list[PeerSignal]:
    """Every kind of "a peer failed first" sign in ``lines``, each with its first line, in log order."""
    seen: dict[str, PeerSignal] = {}
    for raw in lines:
        for kind, pattern in _PEER_SIGNALS:
            if kind not in seen and pattern.search(raw):
                seen[kind] = PeerSignal(kind=kind, line=strip_prefix(raw).strip())
    return list(seen.values())


@dataclass(frozen=True)
class LogFacts:
    """Everything above, read once from one container's tail."""

    cuda_oom: CudaOom | None = None
    exception: PythonException | None = None
    shm: ShmEvidence | None = None
    child: ChildFailure | None = None
    peers: list[PeerSignal] = field(default_factory=list)
    segfault_line: str | None = None


def read(lines: Sequence[str]) -> LogFacts:
    segv = next((strip_prefix(x).strip() for x in reversed(lines) if "Segmentation fault" in x), None)
    return LogFacts(
        cuda_oom=cuda_oom(lines),
        exception=python_exception(lines),
        shm=shm_evidence(lines),
        child=child_failure(lines),
        peers=peer_signals(lines),
        segfault_line=segv,
    )
