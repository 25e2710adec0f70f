"""A validation DataLoader that does not fork copies of a grown trainer.

Pointcept's validation loader has workers but no ``persistent_workers``, so it
forks new workers at every evaluation, from a main process whose heap has grown
since training began. Copy-on-write then gives the parent new pages as it keeps
writing, while the workers hold on to the old ones until the evaluation ends:
a second copy of the heap, charged to the same pod cgroup. The policies:

``"none"``
    No workers: data loads in the trainer process. Nothing is ever copied;
    loading is no longer overlapped with the model.
``"persistent"``
    Workers forked once, early (call `prestart_workers` at training start, as
    the Pointcept trainer here does in ``before_train``), and kept
    (``persistent_workers=True``). Each worker sets glibc's mmap threshold
    (``mallopt(M_MMAP_THRESHOLD, 128 KiB)``) so that large tensors it builds are
    returned to the kernel when freed instead of growing its heap for good.
``"forkserver"``
    Workers forked at each evaluation from a small fork server (which preloads
    torch), never from the trainer. Costs one extra process with torch
    imported; the dataset is pickled to each worker at each evaluation.
``"spawn"``
    Fresh interpreters per evaluation: every worker imports torch itself. For
    comparison; ``"forkserver"`` does the same job for less.
``"auto"``
    Decided when the workers are about to be forked, not when the loader is
    built: `choose_policy` reads the trainer's private memory and its cgroup
    then. Forked from the trainer (and kept) only while the trainer is small;
    otherwise from a fork server, or no workers where the pod has no room for
    one. A loader built late, after the heap grew, thus never forks from it.
    A fork server only where its workers can rebuild the loader in a fresh
    process (`podmortem_runtime.fresh_process`): never a crash where fork works.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.context
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from podmortem_runtime import fresh_process, own_cgroup, procfs
from podmortem_runtime.loader_policy import POLICIES, Policy, PolicyChoice, ResolvedPolicy

#: glibc's mallopt parameter number for M_MMAP_THRESHOLD (malloc.h).
_M_MMAP_THRESHOLD = -3
#: 128 KiB, glibc's own starting threshold; fixing it also stops glibc's dynamic raise to 32 MiB.
DEFAULT_MALLOC_MMAP_THRESHOLD = 128 * 1024

#: "auto" forks from the trainer only while its private anonymous memory (RssAnon) is at most this.
#: Forked workers can at worst keep a copy of every private page the trainer had at fork time; a fork
#: server costs about one torch import (180-210 MiB measured), whatever the trainer's size. Forking
#: is the better deal while the worst-case copy is no larger than that: torch alone is ~145 MiB.
AUTO_FORK_BUDGET_BYTES = 256 * 1024**2

#: "auto" starts a fork server only where the cgroup has this much room left (bytes); otherwise it
#: loads in the trainer ("none"). The server and two workers measured 180-210 MiB on torch 2.13 CPU.
AUTO_FORKSERVER_RESERVE_BYTES = 512 * 1024**2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ForkTimeMemory:
    """What "auto" reads just before workers are forked, in bytes."""

    private_bytes: int
    """The trainer's RssAnon (VmRSS on kernels without it): what a fork can leave copied."""
    cgroup_usage_bytes: int | None = None
    """The pod cgroup's usage; None where no memory cgroup is readable."""
    cgroup_limit_bytes: int | None = None
    """Its effective limit; None for unlimited or unreadable."""

    @classmethod
    def read(cls) -> ForkTimeMemory:
        own = procfs.read_status()
        private = own.anon_bytes if own.anon_bytes is not None else own.rss_bytes
        cgroup = own_cgroup.find_own_cgroup()
        if cgroup is None:
            return cls(private)
        try:
            return cls(private, cgroup.usage(), cgroup.limit())
        except (OSError, ValueError):
            return cls(private)


def choose_policy(
    policy: Policy,
    *,
    num_workers: int,
    private_bytes: int | None = None,
    memory: ForkTimeMemory | None = None,
    fork_budget_bytes: int = AUTO_FORK_BUDGET_BYTES,
    forkserver_reserve_bytes: int = AUTO_FORKSERVER_RESERVE_BYTES,
    fresh_process_problem: Callable[[], str | None] | None = None,
) -> PolicyChoice:
    """Resolve ``"auto"`` (and check the others) from the memory read now.

    Call it when the workers are about to be forked (`make_val_loader`'s loader
    does, at its first iterator). ``memory`` (or just ``private_bytes``) is read
    from this process and its cgroup when not given. The rule for ``"auto"``:

    1. ``num_workers == 0`` → ``"none"`` (nothing to fork).
    2. private memory ≤ ``fork_budget_bytes`` (256 MiB) and, under a limit, usage plus
       that private memory still within the limit → ``"persistent"``: forked from the
       trainer while small and kept, so a worker can never hold more than that copy.
    3. no limit, or at least ``forkserver_reserve_bytes`` (512 MiB) left under it →
       ``"forkserver"``: workers forked from a small server, never from the trainer.
    4. otherwise → ``"none"``: loading in the trainer costs no memory at all.

    A fork server (3) is chosen only where ``fresh_process_problem`` (asked then, once)
    returns None: its workers must rebuild the dataset by pickle (see
    `podmortem_runtime.fresh_process`). Where they could not, "auto" never turns a working
    validation into a crash: ``"persistent"`` when a worst-case copy of the trainer fits
    under the limit (or there is none), else ``"none"``, and the reason says why.

    Measured by ``bench/val_loader.py``: see docs/runtime.md for the figures.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown validation loader policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if policy != "auto":
        if policy != "none" and num_workers == 0:
            return PolicyChoice("none", f"policy {policy!r} with num_workers=0 has no workers to start")
        return PolicyChoice(policy, f"policy {policy!r} requested")
    if num_workers == 0:
        return PolicyChoice("none", "auto: num_workers=0")
    if memory is None:
        memory = ForkTimeMemory(private_bytes) if private_bytes is not None else ForkTimeMemory.read()
    mib = 1024**2
    private = memory.private_bytes
    usage, limit = memory.cgroup_usage_bytes, memory.cgroup_limit_bytes
    room = None if limit is None or usage is None else limit - usage
    where = "" if room is None else f", {room / mib:.0f} MiB left under the pod limit"
    if private <= fork_budget_bytes and (room is None or private <= room):
        return PolicyChoice(
            "persistent",
            f"auto: trainer private memory {private / mib:.0f} MiB is within the fork budget "
            f"{fork_budget_bytes / mib:.0f} MiB{where}; forking now and keeping the workers",
        )
    if room is None or room >= forkserver_reserve_bytes:
        blocked = fresh_process_problem() if fresh_process_problem is not None else None
        if blocked is None:
            return PolicyChoice(
                "forkserver",
                f"auto: trainer private memory {private / mib:.0f} MiB exceeds the fork budget "
                f"{fork_budget_bytes / mib:.0f} MiB{where}; forking from a fork server",
            )
        if room is None or private <= room:
            return PolicyChoice(
                "persistent",
                f"auto: no fork server, because {blocked}; trainer private memory {private / mib:.0f} MiB"
                f"{where or ' (no pod limit)'}, so a copy fits: forking now and keeping the workers",
            )
        return PolicyChoice(
            "none",
            f"auto: no fork server, because {blocked}; a copy of the trainer's {private / mib:.0f} MiB "
            f"would not fit{where}: loading in the trainer",
        )
    return PolicyChoice(
        "none",
        f"auto: trainer private memory {private / mib:.0f} MiB{where}, less than a fork server's "
        f"{forkserver_reserve_bytes / mib:.0f} MiB; loading in the trainer",
    )


def set_malloc_mmap_threshold(threshold: int) -> bool:
    """Call glibc ``mallopt(M_MMAP_THRESHOLD, threshold)`` in this process; False where there is no glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


class WorkerInit:
    """A picklable ``worker_init_fn``: set the malloc threshold, then call the user's own init."""

    def __init__(
        self, malloc_mmap_threshold: int | None, then: Callable[[int], object] | None = None
    ) -> None:
        self.malloc_mmap_threshold = malloc_mmap_threshold
        self.then = then

    def __call__(self, worker_id: int) -> None:
        if self.malloc_mmap_threshold is not None:
            set_malloc_mmap_threshold(self.malloc_mmap_threshold)
        if self.then is not None:
            self.then(worker_id)


def _context(policy: ResolvedPolicy) -> multiprocessing.context.BaseContext:
    if policy == "persistent":
        return multiprocessing.get_context("fork")
    if policy == "forkserver":
        context = multiprocessing.get_context("forkserver")
        # Has effect only if the fork server is not running yet; then workers share one torch import.
        context.set_forkserver_preload(["torch", "torch.utils.data"])
        return context
    return multiprocessing.get_context("spawn")


def make_val_loader(
    dataset: Any,
    *,
    batch_size: int = 1,
    num_workers: int,
    collate_fn: Callable[..., Any] | None = None,
    sampler: Any = None,
    policy: Policy = "auto",
    pin_memory: bool = False,
    worker_init_fn: Callable[[int], None] | None = None,
    malloc_mmap_threshold: int | None = DEFAULT_MALLOC_MMAP_THRESHOLD,
    fork_budget_bytes: int = AUTO_FORK_BUDGET_BYTES,
    on_choice: Callable[[PolicyChoice], object] | None = None,
) -> Any:
    """A ``torch.utils.data.DataLoader`` for validation under ``policy`` (unshuffled, in order).

    ``malloc_mmap_threshold``: bytes, set in each worker; None leaves glibc's dynamic default.
    With ``"persistent"``, call `prestart_workers` before the trainer's heap grows.
    With ``"auto"`` the loader decides at its first iterator, just before forking
    (`prestart_workers` makes that moment early); ``on_choice`` then receives the
    decision (it is also logged here). Other policies are resolved now.
    """
    import torch.utils.data

    kwargs: dict[str, Any] = dict(
        batch_size=batch_size, shuffle=False, sampler=sampler, collate_fn=collate_fn, pin_memory=pin_memory
    )
    if policy == "auto" and num_workers > 0:
        from podmortem_runtime import _auto_loader  # torch only from here on

        init = WorkerInit(malloc_mmap_threshold, worker_init_fn)
        shipped = (("dataset", dataset), ("collate function", collate_fn), ("worker init function", init))
        return _auto_loader.AutoPolicyLoader(
            dataset,
            num_workers=num_workers,
            worker_init_fn=init,
            decide=lambda: choose_policy(
                "auto", num_workers=num_workers, fork_budget_bytes=fork_budget_bytes,
                fresh_process_problem=lambda: fresh_process.problem(shipped),
            ),
            context=_context,
            on_choice=on_choice,
            **kwargs,
        )
    choice = choose_policy(policy, num_workers=num_workers, fork_budget_bytes=fork_budget_bytes)
    log.info("validation loader: %s (%s)", choice.policy, choice.reason)
    if on_choice is not None:
        on_choice(choice)
    if choice.policy == "none":
        return torch.utils.data.DataLoader(dataset, num_workers=0, worker_init_fn=worker_init_fn, **kwargs)
    return torch.utils.data.DataLoader(
        dataset,
        num_workers=num_workers,
        worker_init_fn=WorkerInit(malloc_mmap_threshold, worker_init_fn),
        multiprocessing_context=_context(choice.policy),
        persistent_workers=choice.policy == "persistent",
        **kwargs,
    )


def prestart_workers(loader: Any) -> bool:
    """Fork a persistent loader's workers now, while the trainer is small; True if it did.

    Starting an iterator is the public way to fork them; its few prefetched
    batches are discarded when the first evaluation starts its own pass.
    """
    resolve = getattr(loader, "resolve_policy", None)
    if resolve is not None:
        resolve()  # an "auto" loader decides now, and may turn out not to keep workers
    if loader is None or not getattr(loader, "persistent_workers", False) or loader.num_workers == 0:
        return False
    iter(loader)
    return True
