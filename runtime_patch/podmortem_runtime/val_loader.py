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
    See `choose_policy`.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.context
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from podmortem_runtime import procfs

Policy = Literal["none", "persistent", "forkserver", "spawn", "auto"]
ResolvedPolicy = Literal["none", "persistent", "forkserver", "spawn"]
POLICIES: tuple[str, ...] = ("none", "persistent", "forkserver", "spawn", "auto")

#: glibc's mallopt parameter number for M_MMAP_THRESHOLD (malloc.h).
_M_MMAP_THRESHOLD = -3
#: 128 KiB, glibc's own starting threshold; fixing it also stops glibc's dynamic raise to 32 MiB.
DEFAULT_MALLOC_MMAP_THRESHOLD = 128 * 1024

#: "auto" forks persistent workers only while the trainer's private memory is below this (bytes).
#: A fork can at worst leave a copy of the parent's private anonymous memory at fork time; a fork
#: server costs about one torch import. Measured on torch 2.13 CPU: see `choose_policy`.
AUTO_FORK_BUDGET_BYTES = 1024**3

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicyChoice:
    """What `choose_policy` picked and why, for the training log."""

    policy: ResolvedPolicy
    reason: str


def choose_policy(
    policy: Policy,
    *,
    num_workers: int,
    private_bytes: int | None = None,
    fork_budget_bytes: int = AUTO_FORK_BUDGET_BYTES,
) -> PolicyChoice:
    """Resolve ``"auto"`` (and check the others).

    The rule for ``"auto"``:

    1. ``num_workers == 0`` → ``"none"`` (nothing to fork).
    2. the trainer's private anonymous memory now (RssAnon, or ``private_bytes``)
       ≤ ``fork_budget_bytes`` (1 GiB) → ``"persistent"``: forked while small, a
       worker can never hold more than that, and loading stays parallel.
    3. otherwise → ``"forkserver"``: the workers' start-up cost is a fixed torch
       import in the server, however big the trainer has grown.

    Measured by ``bench/val_loader.py`` (torch 2.13 CPU, cgroup v1, a mask heap rewritten
    in 3 evaluations, 2 workers; peak cgroup memory as a ratio to fresh fork workers):
    with a 300 MiB heap (``--quick``, 830 MiB for fresh fork) none 0.56, persistent 0.59,
    forkserver 0.78 at 1.5x the wall time, spawn 0.92 at 3.3x; with 800 MiB (1,808 MiB)
    none 0.55, persistent 0.58, forkserver 0.66, spawn 0.73 at 2.2x.
    Persistent workers forked from a ~0.2 GiB trainer cost 30-60 MiB over "none";
    the fork server costs 180-210 MiB whatever the trainer's size, so forking wins
    until the trainer's private memory (the worst-case copy) is several times
    that. 1 GiB keeps the worst case bounded while staying clearly above what a
    trainer holds before its first epoch.
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
    if private_bytes is None:
        own = procfs.read_status()
        private_bytes = own.anon_bytes if own.anon_bytes is not None else own.rss_bytes
    mib = private_bytes / 1024**2
    if private_bytes <= fork_budget_bytes:
        return PolicyChoice(
            "persistent",
            f"auto: trainer private memory {mib:.0f} MiB is within the "
            f"fork budget {fork_budget_bytes / 1024**2:.0f} MiB",
        )
    return PolicyChoice(
        "forkserver",
        f"auto: trainer private memory {mib:.0f} MiB exceeds the fork budget "
        f"{fork_budget_bytes / 1024**2:.0f} MiB; forking from a fork server",
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
) -> Any:
    """A ``torch.utils.data.DataLoader`` for validation under ``policy`` (unshuffled, in order).

    ``malloc_mmap_threshold``: bytes, set in each worker; None leaves glibc's dynamic default.
    With ``"persistent"``, call `prestart_workers` before the trainer's heap grows.
    """
    import torch.utils.data

    choice = choose_policy(policy, num_workers=num_workers, fork_budget_bytes=fork_budget_bytes)
    log.info("validation loader: %s (%s)", choice.policy, choice.reason)
    kwargs: dict[str, Any] = dict(
        batch_size=batch_size, shuffle=False, sampler=sampler, collate_fn=collate_fn, pin_memory=pin_memory
    )
    if choice.policy == "none":
        return torch.utils.data.DataLoader(dataset, num_workers=0, worker_init_fn=worker_init_fn, **kwargs)
    init = WorkerInit(malloc_mmap_threshold, worker_init_fn)
    context: multiprocessing.context.BaseContext
    if choice.policy == "persistent":
        context = multiprocessing.get_context("fork")
        persistent = True
    elif choice.policy == "forkserver":
        context = multiprocessing.get_context("forkserver")
        # Has effect only if the fork server is not running yet; then workers share one torch import.
        context.set_forkserver_preload(["torch", "torch.utils.data"])
        persistent = False
    else:
        context = multiprocessing.get_context("spawn")
        persistent = False
    return torch.utils.data.DataLoader(
        dataset,
        num_workers=num_workers,
        worker_init_fn=init,
        multiprocessing_context=context,
        persistent_workers=persistent,
        **kwargs,
    )


def prestart_workers(loader: Any) -> bool:
    """Fork a persistent loader's workers now, while the trainer is small; True if it did.

    Starting an iterator is the public way to fork them; its few prefetched
    batches are discarded when the first evaluation starts its own pass.
    """
    if loader is None or not getattr(loader, "persistent_workers", False) or loader.num_workers == 0:
        return False
    iter(loader)
    return True
