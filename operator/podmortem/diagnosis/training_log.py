"""What a training container's last log lines say about its death: torch, NCCL, torchrun, TensorFlow,
JAX/XLA, the CUDA runtime and the shell's texts.

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

from podmortem.diagnosis import catalogue

#: ``[rank2]:`` (torch >= 2.2 prefixes every line of a rank's stderr under torchrun --log-prefix)
#: and ``stderr: `` (some launchers) are not part of the message.
_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]: ?|stderr: |stdout: )+")

#: A size as the catalogued messages print it (torch's "20.00 MiB", TensorFlow's "6.88GiB", XLA's "8000000000
#: bytes", NumPy's "100. MiB"): the catalogue's own pattern, bounded.
_SIZE = rf"(?:{catalogue.SIZE_PATTERN})"


def size_bytes(text: str) -> int:
    """``"30.29 GiB"`` -> bytes, rounded half up (torch prints binary units; ``0 bytes`` for nothing)."""
    return catalogue.size_bytes(text)


def strip_prefix(line: str) -> str:
    return _PREFIX.sub("", line.rstrip("\r\n"))


@dataclass(frozen=True)
class CudaOom:
    """The caching allocator's account of a failed allocation (bytes; None where the form omits it)."""

    line: str
    device: int | None
    #: What was asked for; None where the message gives no size (the CUDA runtime's ``out of memory``).
    tried: int | None
    total: int | None
    free: int | None
    #: What this process holds on the device, PyTorch's and the CUDA context's (torch >= 2.1).
    process_in_use: int | None
    allocated: int | None
    #: Reserved by the allocator but not handed out: memory it cannot use for this request.
    reserved_unallocated: int | None
    #: Other processes on the same device (``Process N has X memory in use``), without this one.
    other_processes: tuple[tuple[int, int], ...] = ()
    #: "2.x" (``GPU N has a total capacity``), "1.x" (``(GPU N; ... total capacity; ...)``), or the
    #: catalogue entry's key for another framework's message (``tf-oom-tensor``, ``xla-oom``...).
    form: str = "2.x"
    #: The host pid under which this process itself was printed as ``Process N has X memory in use``
    #: (see `own_process`); None when PyTorch wrote ``this process has``, or no entry fits.
    self_seen_as: int | None = None
    #: Who printed it: "PyTorch", "TensorFlow", "JAX/XLA", "CUDA runtime", "cuBLAS", "cuDNN".
    framework: str = "PyTorch"

    @property
    def fragmented(self) -> bool:
        """Reserved-but-unallocated would have held the request: a fragmentation failure, not a full GPU."""
        return self.reserved_unallocated is not None and self.tried is not None and \
            self.reserved_unallocated >= self.tried


_OOM_NEW = re.compile(
    rf"CUDA out of memory\. Tried to allocate (?P<tried>{_SIZE})\. GPU (?P<dev>\d+) has a total "
    rf"capac(?:i)?ty of (?P<total>{_SIZE}) of which (?P<free>{_SIZE}) is free\.(?P<rest>.*)"
)
_OOM_OLD = re.compile(
    rf"CUDA out of memory\. Tried to allocate (?P<tried>{_SIZE}) \(GPU (?P<dev>\d+); (?P<total>{_SIZE}) "
    rf"total capacity; (?P<allocated>{_SIZE}) already allocated; (?P<free>{_SIZE}) free;"
    # What follows "free;" may be cut off (a truncated line, a log viewer's column): the numbers
    # before it are the message's all the same.
    rf"(?:(?: (?P<max>{_SIZE}) max allowed;)? (?:(?P<reserved>{_SIZE}) reserved in total by PyTorch|"
    rf"(?P<cached>{_SIZE}) cached)\))?"
)
_OOM_BARE = re.compile(rf"CUDA out of memory\. Tried to allocate (?P<tried>{_SIZE})")
_IN_USE = re.compile(rf"this process has (?P<v>{_SIZE}) memory in use")
_OTHER = re.compile(rf"Process (?P<pid>\d+) has (?P<v>{_SIZE}) memory in use")
#: What a process holds on the device beyond PyTorch's reserve: the CUDA context (a few hundred MiB:
#: 300-600 on current GPUs and drivers) and cuBLAS/cuDNN workspaces. An entry within this of allocated +
#: reserved-but-unallocated is this process.
CONTEXT_SLACK_BYTES = 1024**3
#: Two printed sizes (two decimals each: up to 5 MiB off at GiB) may undershoot by this much.
ROUNDING_BYTES = 16 * 1024**2


def own_process(
    entries: Sequence[tuple[int, int]], *, allocated: int | None, reserved_unallocated: int | None
) -> int | None:
    """The index of the ``Process N has X memory in use`` entry that is this process itself, or None.

    PyTorch writes ``this process has`` only when ``getpid()`` equals the pid NVML reports. NVML
    reports host pids, so in a pod without ``hostPID`` the two differ and the trainer's own usage is
    printed as ``Process <host pid> has ...``. It is this process when its figure is PyTorch's reserve
    (allocated + reserved-but-unallocated) plus at most the CUDA context (`CONTEXT_SLACK_BYTES`);
    of several that fit, the closest. One pass over the entries.
    """
    if allocated is None or reserved_unallocated is None:
        return None
    reserve = allocated + reserved_unallocated
    best: int | None = None
    best_gap = 0
    for i, (_pid, used) in enumerate(entries):
        gap = used - reserve
        if -ROUNDING_BYTES <= gap <= CONTEXT_SLACK_BYTES and (best is None or abs(gap) < best_gap):
            best, best_gap = i, abs(gap)
    return best


_ALLOC = re.compile(
    rf"Of the allocated memory (?P<a>{_SIZE}) is allocated by PyTorch, and (?P<r>{_SIZE}) is reserved "
    r"by PyTorch but unallocated"
)


#: GPU out-of-memory messages of the frameworks besides PyTorch's caching allocator, as catalogued.
_OTHER_GPU_OOM = tuple(e for e in catalogue.ENTRIES
                       if e.verdict == "cuda-oom" and not e.key.startswith("torch-cuda-oom"))
#: TensorFlow's BFC warning that a retry may still succeed: no death of its own.
_NOT_A_FAILURE = "The caller indicates that this is not a failure"
_GPU_INDEX = re.compile(r"GPU[:_](\d{1,3})", re.IGNORECASE)


def cuda_oom(lines: Sequence[str]) -> CudaOom | None:
    """The last GPU out-of-memory message in ``lines``: PyTorch's caching allocator's with its numbers,
    or TensorFlow's, JAX/XLA's, the CUDA runtime's, cuBLAS's or cuDNN's with what it gives."""
    for i in range(len(lines) - 1, -1, -1):
        raw = lines[i]
        if "CUDA out of memory" not in raw:
            other = _other_gpu_oom(lines, i)
            if other is not None:
                return other
            continue
        line = strip_prefix(raw).strip()
        m = _OOM_NEW.search(line)
        if m is not None:
            rest = m.group("rest")
            in_use = _IN_USE.search(rest)
            alloc = _ALLOC.search(rest)
            others = tuple((int(o.group("pid")), size_bytes(o.group("v"))) for o in _OTHER.finditer(rest))
            allocated = size_bytes(alloc.group("a")) if alloc else None
            unallocated = size_bytes(alloc.group("r")) if alloc else None
            process_in_use = size_bytes(in_use.group("v")) if in_use else None
            seen_as: int | None = None
            if process_in_use is None:
                mine = own_process(others, allocated=allocated, reserved_unallocated=unallocated)
                if mine is not None:
                    seen_as, process_in_use = others[mine]
                    others = others[:mine] + others[mine + 1 :]
            return CudaOom(
                line=line,
                device=int(m.group("dev")),
                tried=size_bytes(m.group("tried")),
                total=size_bytes(m.group("total")),
                free=size_bytes(m.group("free")),
                process_in_use=process_in_use,
                allocated=allocated,
                reserved_unallocated=unallocated,
                other_processes=others,
                form="2.x",
                self_seen_as=seen_as,
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


def _other_gpu_oom(lines: Sequence[str], at: int) -> CudaOom | None:
    """Line ``at`` as another framework's GPU out-of-memory message (`_OTHER_GPU_OOM`), or None."""
    raw = lines[at]
    found = catalogue.find(raw, _OTHER_GPU_OOM)
    if found is None and raw[-1:] == " " and at + 1 < len(lines):
        # A soft wrap (a mail client's, a forum's: the line keeps the space it was cut at): the
        # message goes on in the next line ("... Resource exhausted: Out " / "of memory while ...").
        raw = raw + lines[at + 1].lstrip()
        found = catalogue.find(raw, _OTHER_GPU_OOM)
    if found is None:
        return _shape_only_oom(lines, at)
    if _NOT_A_FAILURE in raw:
        return None
    fields = found.fields
    where = fields.get("device", "") + " " + fields.get("allocator", "")
    if found.entry.key == "tf-oom-tensor" and "gpu" not in where.lower():
        return None  # the host's allocator ("by allocator cpu"): no GPU ran out
    tried = found.number("tried")
    if tried is None and found.entry.key == "tf-oom-tensor":
        # The BFC allocator's own line before the error says how much was asked for.
        for before in reversed(lines[max(0, at - 50):at]):
            bfc = catalogue.find(before, (catalogue.BY_KEY["tf-bfc-ran-out"],))
            if bfc is not None:
                tried = bfc.number("tried")
                break
    index = _GPU_INDEX.search(where)
    numbered = any(f.name == "device" and f.kind == "int" for f in found.entry.fields)
    device = found.number("device") if numbered else (int(index.group(1)) if index is not None else None)
    return CudaOom(
        line=strip_prefix(raw[found.start:]).strip(),
        device=device,
        tried=tried,
        total=found.number("total"),
        free=found.number("free"),
        process_in_use=None,
        allocated=found.number("allocated"),
        reserved_unallocated=None,
        form=found.entry.key,
        framework=found.entry.framework,
    )


_SHAPE_ONLY = (catalogue.BY_KEY["tf-oom-tensor-shape-only"],)
_BFC_RAN_OUT = (catalogue.BY_KEY["tf-bfc-ran-out"],)
#: How far from TensorFlow's op_kernel line its BFC allocator's lines are looked for (they come before it,
#: and again after it when the op is retried).
_BFC_NEAR = 50


def _shape_only_oom(lines: Sequence[str], at: int) -> CudaOom | None:
    """TensorFlow 1.0-1.4's ``OOM when allocating tensor with shape[...]``, which names no device: a GPU's
    when a BFC allocator of a GPU (``Allocator (GPU_0_bfc) ran out of memory``) speaks beside it. The
    allocator's size is not taken as the request: it may be another tensor's (a retry's, the next op's)."""
    found = catalogue.find(lines[at], _SHAPE_ONLY)
    if found is None:
        return None
    for near in (*lines[at + 1:at + 1 + _BFC_NEAR], *reversed(lines[max(0, at - _BFC_NEAR):at])):
        bfc = catalogue.find(near, _BFC_RAN_OUT) if "ran out of memory" in near else None
        index = _GPU_INDEX.search(bfc.fields["allocator"]) if bfc is not None else None
        if bfc is not None and index is not None:
            return CudaOom(line=strip_prefix(lines[at][found.start:]).strip(), device=int(index.group(1)),
                           tried=None, total=None, free=None, process_in_use=None,
                           allocated=None, reserved_unallocated=None, form=found.entry.key,
                           framework=found.entry.framework)
    return None


@dataclass(frozen=True)
class ShellKill:
    """A process reported killed by SIGKILL by whoever waited for it: the shell's job report
    (``Killed``, ``bash: line 1: 123 Killed …``, ``zsh: killed …``) or PyTorch's DataLoader for a
    worker (``DataLoader worker (pid N) is killed by signal: Killed.``)."""

    line: str
    #: The catalogue entry's key: "shell-killed", "bash-killed-line", "zsh-killed", "torch-dataloader-killed".
    source: str
    pid: int | None = None

    @property
    def who(self) -> str:
        if self.source == "torch-dataloader-killed":
            return f"a DataLoader worker (pid {self.pid})" if self.pid is not None else "a DataLoader worker"
        return f"the process the shell ran (pid {self.pid})" if self.pid is not None else \
            "the process the shell ran"


_SIGKILL_REPORTS = tuple(e for e in catalogue.ENTRIES if e.verdict == "sigkill-not-oom")
_SEGV_WORKER = (catalogue.BY_KEY["torch-dataloader-segv"],)
#: A shell's job report of a process that died of SIGSEGV: bash's and dash's strsignal() words, zsh's own;
#: every catalogued segfault report but the DataLoader's, which is a worker's.
_SEGV_SHELL = tuple(e for e in catalogue.ENTRIES if e.verdict == "segfault" and e not in _SEGV_WORKER)


#: The literal words every SIGKILL report holds (``Killed``, ``killed``, glibc's translations of
#: strsignal's): a line with none of them is not looked at further.
_SIGKILL_WORDS = tuple({e.anchor for e in _SIGKILL_REPORTS})


def shell_kill(lines: Sequence[str]) -> ShellKill | None:
    """The last report of a process killed by SIGKILL (`ShellKill`) in ``lines``, unless a traceback
    follows it: then the process that went on to raise it was not the one killed. A traceback chained
    to an earlier one ("The above exception was the direct cause of the following exception") is
    that earlier story going on: PyTorch raises the DataLoader's ``killed by signal: Killed`` as a
    ``RuntimeError`` in the main process, and a trainer's handler re-raises it."""
    after_traceback = False
    for raw in reversed(lines):
        if _TRACEBACK in raw:
            after_traceback = True
            continue
        if after_traceback and strip_prefix(raw).strip() in _CHAINED:
            after_traceback = False
            continue
        if not any(word in raw for word in _SIGKILL_WORDS):
            continue
        found = catalogue.find(raw, _SIGKILL_REPORTS)
        if found is not None:
            if after_traceback:
                return None
            return ShellKill(line=raw[found.start:].strip().strip("\"'")[:300], source=found.entry.key,
                             pid=found.number("pid"))
    return None


#: The literal words every shell's SIGSEGV report holds (English and glibc's translations).
_SEGV_WORDS = tuple({e.anchor for e in _SEGV_SHELL})


def shell_segfault(lines: Sequence[str]) -> str | None:
    """A shell's report that the process it ran died of SIGSEGV (``Segmentation fault (core dumped)``,
    ``zsh: segmentation fault  python ...``), the last such line, unless a traceback follows it."""
    for raw in reversed(lines):
        if _TRACEBACK in raw:
            return None
        if not any(word in raw for word in _SEGV_WORDS):
            continue
        if (found := catalogue.find(raw, _SEGV_SHELL)) is not None:
            return raw[found.start:].strip()[:300]
    return None


def worker_segfault(lines: Sequence[str]) -> str | None:
    """PyTorch's word that a DataLoader worker died of SIGSEGV, the last such line."""
    for raw in reversed(lines):
        if "Segmentation fault" in raw and (found := catalogue.find(raw, _SEGV_WORKER)) is not None:
            return raw[found.start:].strip()[:300]
    return None


_CGROUP_OOM_EVENTS = tuple(e for e in catalogue.ENTRIES
                           if e.verdict == "memcg-limit" and e.kind == "training")


def cgroup_oom_event(lines: Sequence[str]) -> str | None:
    """A batch system's word that the kernel's OOM killer acted in the job's memory cgroup (Slurm's
    ``slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup``), the last such
    line: the shell's ``Killed`` beside it is that kill seen from the job script."""
    for raw in reversed(lines):
        if "oom-kill event" in raw and (found := catalogue.find(raw, _CGROUP_OOM_EVENTS)) is not None:
            return raw[found.start:].strip()[:300]
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
    #: IPython's traceback names its exception in its header, and its frames are not indented.
    ipython_name = ""
    for raw in lines:
        line = strip_prefix(raw)
        stripped = line.strip()
        if stripped == _TRACEBACK:
            in_traceback, ipython_name = True, ""
            continue
        if stripped.endswith(_IPYTHON_TRACEBACK) and (head := _IPYTHON_HEAD.match(stripped)) is not None:
            in_traceback, ipython_name = True, head.group(1)
            continue
        if stripped in _CHAINED:
            chained = bool(found)
            continue
        if not in_traceback or not stripped or line[:1] in (" ", "\t") or stripped.startswith(("^", "~")):
            continue  # outside a traceback, or a frame, a code line, carets
        if ipython_name and stripped != ipython_name and not stripped.startswith(ipython_name + ":"):
            continue  # an IPython frame ("<ipython-input-3-...> in <module>", "----> 3 x = f()")
        if not chained:
            found.clear()
        found.append(stripped)
        in_traceback = chained = False
        ipython_name = ""
    if not found:
        return _exception_line(lines)
    return PythonException(line=found[-1], chain=tuple(found[:-1]))


#: IPython's ``VerboseTB`` header: the exception's type name, then "Traceback (most recent call last)"
#: right-justified to 75 columns (IPython/core/ultratb.py); its last line is ``etype: evalue``.
_IPYTHON_TRACEBACK = "Traceback (most recent call last)"
_IPYTHON_HEAD = re.compile(r"([A-Za-z_][\w.]{0,200}) {2,80}Traceback \(most recent call last\)$")
#: Messages that only an exception carries (NumPy's ``_ArrayMemoryError``'s): seen without their traceback
#: (cut off, or pasted alone), the line ``module.Type: message`` is still the exception's last line.
_EXCEPTION_MESSAGES = tuple(e for e in catalogue.ENTRIES if e.verdict == "python-exception" and not e.whole)
#: What ``traceback.format_exception_only`` writes before the message: the type's qualified name and ": ".
_EXCEPTION_TYPE = re.compile(r"(?:^|[^\w.])([A-Za-z_][\w.]{0,200}): $")


def _exception_line(lines: Sequence[str]) -> PythonException | None:
    """The last ``Type: message`` line whose message is one an exception carries (`_EXCEPTION_MESSAGES`),
    where no traceback header came before it."""
    for raw in reversed(lines):
        found = catalogue.find(raw, _EXCEPTION_MESSAGES)
        if found is None and "_ArrayMemoryError: " in raw:
            found = catalogue.find(raw, (catalogue.NUMPY_ARRAY_MEMORY_ERROR,))
        if found is None:
            continue
        before = raw[max(0, found.start - 204):found.start]
        if found.entry.key == "numpy-array-memory-error-type":
            # The type's name starts the message: its module path before it ("numpy.core._exceptions.").
            module = _MODULE_PATH.search(before)
            return PythonException(line=raw[found.start - (len(module.group(0)) if module else 0):].strip())
        named = _EXCEPTION_TYPE.search(before)
        if named is not None:
            return PythonException(line=raw[found.start - len(named.group(1)) - 2:].strip())
        if before.strip() == "" and (kind := _type_line_before(lines, raw)) is not None:
            return PythonException(line=f"{kind}: {raw.strip()}")
    return None


#: A module path just before a type's name ("numpy.core._exceptions.").
_MODULE_PATH = re.compile(r"(?:[A-Za-z_]\w{0,60}\.){1,8}$")
#: An exception type's qualified name alone on a line: a report that sets the type and its message apart
#: (Django's technical 500 page, "Exception Type" then "Exception Value", pasted as text).
_TYPE_ALONE = re.compile(r"(?:[A-Za-z_]\w{0,60}\.){0,8}[A-Za-z_]\w{0,60}(?:Error|Exception)")


def _type_line_before(lines: Sequence[str], raw: str) -> str | None:
    """The exception type named alone on the line before a message that starts its own line."""
    for i in range(len(lines) - 1, 0, -1):
        if lines[i] is raw or lines[i] == raw:
            previous = lines[i - 1].strip().strip("|").strip()
            return previous if _TYPE_ALONE.fullmatch(previous) else None
    return None


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


#: Linux's signal numbers (x86 and arm alike), as torchrun's negative exit codes and Python's
#: ``signal.Signals`` number them.
SIGNAL_NAMES: dict[int, str] = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    4: "SIGILL",
    5: "SIGTRAP",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    10: "SIGUSR1",
    11: "SIGSEGV",
    12: "SIGUSR2",
    13: "SIGPIPE",
    14: "SIGALRM",
    15: "SIGTERM",
}


def signal_name(signal: int) -> str:
    return SIGNAL_NAMES.get(signal, f"signal {signal}")


@dataclass(frozen=True)
class ChildFailure:
    """torchrun's ``ChildFailedError`` root cause: the local worker that failed first in this pod."""

    rank: int | None
    local_rank: int | None
    exit_code: int | None
    pid: int | None
    time: str | None
    host: str | None
    #: The signal that killed the worker: torchrun's negative exit code, or the summary's
    #: ``Signal N (SIGX) received by PID N``; None for a worker that exited of itself.
    signal: int | None = None
    #: "torchrun-summary" (the ``Root Cause`` block) or "torchrun-agent" (the agent's ``failed`` line).
    source: str = "torchrun-summary"
    #: The text it was read from (the block joined on one line, or the agent's line).
    line: str = ""


#: torch.distributed.elastic.multiprocessing.errors' summary (``ChildFailedError.format_msg``):
#: torch >= 1.10 ``Root Cause (first observed failure):``, torch 1.9 ``Root Cause:`` then ``[0]:``.
_ROOT_CAUSE = re.compile(r"Root Cause(?: \(first observed failure\)\s*:|:(?=\s*(?:\[\d+\]:|$)))")
#: One field of the block: ``exitcode  : -9 (pid: 14750)`` (also ``exitcode: -9 (pid: N)`` run on
#: into the next field, as flattened or transcribed copies have it).
_EXITCODE = re.compile(r"\bexit ?code\s*:\s*(-?\d{1,4})\b(?:\s*\(pid:\s*(\d{1,10})\))?", re.IGNORECASE)
_RANK = re.compile(r"\brank\s*:?\s*(\d{1,6})\s*\(local[_ ]rank:\s*(\d{1,6})\)", re.IGNORECASE)
_RANK_ALONE = re.compile(r"(?<!local_)(?<!local )\brank\s*:\s*(\d{1,6})\b", re.IGNORECASE)
_TIME_HOST = re.compile(r"\b(time|host)\s*:\s*(\S+)")
#: ``ProcessFailure``'s message for a worker killed by a signal (it has no error file):
#: ``Signal 9 (SIGKILL) received by PID 14750`` (``traceback :`` in torch >= 1.10, ``msg:`` in 1.9).
_RECEIVED = re.compile(
    r"\bsignal\s+(\d{1,3})\s*\((SIG[A-Z0-9]+)\)\s*received by PID\s*(\d{1,10})", re.IGNORECASE
)


def child_failure(lines: Sequence[str]) -> ChildFailure | None:
    """The ``Root Cause (first observed failure)`` block of torchrun's summary, one line or many.

    Where the block is cut off, or says nothing of the worker's end, the agent's own ``failed
    (exitcode: N)`` line tells instead (`_agent_failure`).
    """
    text = ""
    for i, raw in enumerate(lines):
        if "Root Cause" in raw:
            joined = " ".join(strip_prefix(x).strip() for x in lines[i : i + 10])
            m = _ROOT_CAUSE.search(joined)
            if m is not None:
                text = joined[m.end():].split("=====", 1)[0]
    if not text:
        return _agent_failure(lines)
    code = _EXITCODE.search(text)
    received = _RECEIVED.search(text)
    if code is None and received is None:
        return _agent_failure(lines) or ChildFailure(None, None, None, None, None, None)
    rank = _RANK.search(text)
    rank_alone = _RANK_ALONE.search(text) if rank is None else None
    fields: dict[str, str] = {}
    for m in _TIME_HOST.finditer(text):
        fields.setdefault(m.group(1), m.group(2))
    exit_code = int(code.group(1)) if code is not None else None
    signal = -exit_code if exit_code is not None and exit_code < 0 else None
    if received is not None and (signal is None or exit_code is None):
        signal = int(received.group(1))
    if exit_code is None and signal is not None:
        exit_code = -signal  # the agent's exit code for a worker killed by a signal
    pid = code.group(2) if code is not None and code.group(2) else (received.group(3) if received else None)
    return ChildFailure(
        rank=int(rank.group(1)) if rank else int(rank_alone.group(1)) if rank_alone else None,
        local_rank=int(rank.group(2)) if rank else None,
        exit_code=exit_code,
        pid=int(pid) if pid is not None else None,
        time=fields.get("time"),
        host=fields.get("host"),
        signal=signal,
        source="torchrun-summary",
        # From the exit code on: the time and host before it say nothing of the death.
        line=" ".join(text[min(m.start() for m in (code, received) if m is not None):].split()),
    )


#: torch.distributed.elastic's agent (multiprocessing/api.py), logged for the first worker that failed:
#: ``"failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s"`` (glog or logging prefixes before it,
#: or anything a progress bar redrawn with ``\r`` left on the line).
_AGENT_FAILED = re.compile(
    r"failed \(exitcode: ?(-?[0-9]{1,4})\) local[_ ]rank: ?([0-9]{1,6}) \(pid: ?([0-9]{1,10})\)"
)


#: The same line cut after its exit code (a poster's paste), still named by the agent's logger: Python
#: logging's default format ("%(levelname)s:%(name)s:%(message)s") puts the module's logger name before it.
_AGENT_FAILED_CUT = re.compile(r"elastic\.multiprocessing\.api:failed \(exitcode: ?(-?[0-9]{1,4})\)")


def _agent_failure(lines: Sequence[str]) -> ChildFailure | None:
    """The agent's own line for the first failed worker, where the summary block was cut off.

    The last such line: a job restarted by ``--max-restarts`` logs one per attempt, and the last
    attempt's is the one that ended it.
    """
    for raw in reversed(lines):
        if "failed (exitcode:" in raw:
            found = list(_AGENT_FAILED.finditer(raw))
            if found:
                m = found[-1]
                code = int(m.group(1))
                return ChildFailure(rank=None, local_rank=int(m.group(2)), exit_code=code,
                                    pid=int(m.group(3)), time=None, host=None,
                                    signal=-code if code < 0 else None, source="torchrun-agent",
                                    line=_message_at(raw, m.start()))
            cut = _AGENT_FAILED_CUT.search(raw)
            if cut is not None:
                code = int(cut.group(1))
                return ChildFailure(rank=None, local_rank=None, exit_code=code, pid=None, time=None,
                                    host=None,
                                    signal=-code if code < 0 else None, source="torchrun-agent",
                                    line=raw[cut.start() + len("elastic.multiprocessing.api:"):].strip())
    return None


def _excerpt(raw: str, start: int) -> str:
    """A long line (a ``CalledProcessError``'s command): its start, ``...``, the message at ``start``."""
    line = strip_prefix(raw).strip()
    if len(line) <= 240:
        return line
    return f"{line[:100].rstrip()} ... {raw[start:].strip()}"


def _message_at(raw: str, start: int) -> str:
    """The line from where the message at ``start`` begins: after the last ``\\r`` of a progress bar
    redrawn before it, and at most a logging prefix's length (160 characters) before it."""
    cut = max(raw.rfind("\r", 0, start) + 1, start - 160, 0)
    return strip_prefix(raw[cut:]).strip()


@dataclass(frozen=True)
class ChildSignal:
    """A launcher's word that the process it started died of a signal (the launcher itself lived on)."""

    signal: int
    #: "torchrun-summary", "torchrun-agent", "subprocess" (Python's ``CalledProcessError``, raised by
    #: ``torch.distributed.launch`` before torchrun), "deepspeed" (DeepSpeed's launcher).
    source: str
    line: str
    pid: int | None = None
    local_rank: int | None = None

    @property
    def name(self) -> str:
        return signal_name(self.signal)

    @property
    def who(self) -> str:
        """The process, in words: ``torchrun's local rank 0 (pid 14750)``."""
        if self.source.startswith("torchrun"):
            rank = f"local rank {self.local_rank}" if self.local_rank is not None else "a worker"
            pid = f" (pid {self.pid})" if self.pid is not None else ""
            return f"torchrun's {rank}{pid}"
        if self.source == "deepspeed":
            return "a worker started by DeepSpeed's launcher"
        return "a child process (subprocess.CalledProcessError)"


#: CPython's ``CalledProcessError.__str__``: ``Command '...' died with <Signals.SIGSEGV: 11>.`` (3.6+),
#: ``died with unknown signal N.``, and before 3.6 ``returned non-zero exit status -11``.
_SUBPROCESS_SIGNAL = re.compile(
    r"died with <Signals\.SIG[A-Z0-9]+: (\d{1,3})>|died with unknown signal (\d{1,3})\b"
    r"|returned non-zero exit status -(\d{1,3})\b"
)
#: DeepSpeed's launcher (``deepspeed/launcher/launch.py``, ``sigkill_handler``):
#: ``[...] exits with return code = -9``.
_DEEPSPEED_SIGNAL = re.compile(r"exits with return code = -(\d{1,3})\b")


def child_signal(lines: Sequence[str]) -> ChildSignal | None:
    """The signal a launcher says its child died of.

    torchrun's word first (the summary's root cause, else the agent's line): when it names a
    worker that exited of itself, no signal is read elsewhere. Without it, the last
    ``CalledProcessError`` for a signal, or DeepSpeed's ``exits with return code = -N``.
    """
    return _child_signal(lines, child_failure(lines))


def _child_signal(lines: Sequence[str], child: ChildFailure | None) -> ChildSignal | None:
    if child is not None and (child.exit_code is not None or child.signal is not None):
        if child.signal is None:
            return None
        return ChildSignal(signal=child.signal, source=child.source, line=child.line,
                           pid=child.pid, local_rank=child.local_rank)
    for raw in reversed(lines):
        if "died with" not in raw and "exit status -" not in raw and "exits with return code = -" not in raw:
            continue
        found = [(m, "subprocess") for m in _SUBPROCESS_SIGNAL.finditer(raw)]
        found += [(m, "deepspeed") for m in _DEEPSPEED_SIGNAL.finditer(raw)]
        if found:
            m, source = max(found, key=lambda f: f[0].start())
            number = next(g for g in m.groups() if g is not None)
            return ChildSignal(signal=int(number), source=source, line=_excerpt(raw, m.start()))
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
    #: The signal a launcher (torchrun, ``torch.distributed.launch``, DeepSpeed) says its child died of.
    child_signal: ChildSignal | None = None
    #: A shell's or the DataLoader's report of a process killed by SIGKILL.
    shell_kill: ShellKill | None = None
    #: PyTorch's report of a DataLoader worker killed by SIGSEGV.
    worker_segfault: str | None = None
    #: A shell's report of the process it ran killed by SIGSEGV.
    shell_segfault: str | None = None
    #: A batch system's report of an OOM kill in the job's memory cgroup (`cgroup_oom_event`).
    cgroup_oom: str | None = None


def read(lines: Sequence[str]) -> LogFacts:
    segv = next((strip_prefix(x).strip() for x in reversed(lines) if "Segmentation fault" in x), None)
    child = child_failure(lines)
    return LogFacts(
        cuda_oom=cuda_oom(lines),
        exception=python_exception(lines),
        shm=shm_evidence(lines),
        child=child,
        peers=peer_signals(lines),
        segfault_line=segv,
        child_signal=_child_signal(lines, child),
        shell_kill=shell_kill(lines),
        worker_segfault=worker_segfault(lines),
        shell_segfault=shell_segfault(lines),
        cgroup_oom=cgroup_oom_event(lines),
    )
