"""A small trainer-like run whose heap grows and is rewritten at each evaluation.

Run as a script inside a throwaway memory cgroup by the kernel tests and by
``bench/val_loader.py``, so both measure the same thing. It mimics the
post-mortem's evaluator: a list of bool masks that grows each epoch and is
recomputed during every evaluation while a validation DataLoader runs.

Prints one memory line per evaluation; with ``--hold`` it then waits until
stdin closes, so the caller can read the cgroup's counters while it is alive.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time

import torch  # first, before anything is measured: this import charges its pages once
import torch.utils.data

from podmortem_runtime import memory, val_loader

VARIANTS = ("fresh-fork", "none", "persistent", "persistent-no-threshold", "forkserver", "spawn", "auto")
MASK_BYTES = 1024 * 1024


class Scenes(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Validation scenes of varying size, like point clouds; each item is built fresh."""

    def __init__(self, items: int, item_kib: int) -> None:
        self.items = items
        self.item_kib = item_kib

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        points = self.item_kib * 1024 // 12 * (8 + (index * 7) % 9) // 8
        coord = torch.rand(points, 3)
        return {"coord": coord, "segment": (coord[:, 0] * 20).long()}


#: glibc's ``struct mallinfo2``, in order (malloc.h).
_MALLINFO2_FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]


def heap_line() -> str | None:
    """The trainer's glibc heap: bytes in its main arena and how many of them are free but kept.

    None without glibc 2.33+ (``mallinfo2``).
    """
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    mib = 1024 * 1024
    return f"heap arena {info.arena / mib:.0f} MiB, free but kept {info.fordblks / mib:.0f} MiB"


def build_loader(
    variant: str, dataset: Scenes, workers: int
) -> torch.utils.data.DataLoader[dict[str, torch.Tensor]]:
    if variant == "fresh-fork":  # Pointcept's own validation loader: workers forked at each evaluation
        return torch.utils.data.DataLoader(dataset, batch_size=1, shuffle=False, num_workers=workers)
    if variant == "persistent-no-threshold":
        loader = val_loader.make_val_loader(
            dataset, num_workers=workers, policy="persistent", malloc_mmap_threshold=None
        )
    else:
        loader = val_loader.make_val_loader(
            dataset,
            num_workers=workers,
            policy=variant,  # type: ignore[arg-type]
            on_choice=lambda choice: print(f"policy {choice.policy}: {choice.reason}", flush=True),
        )
    return loader  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("--heap-mib", type=int, default=300, help="mask heap at the last evaluation")
    parser.add_argument("--evals", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--items", type=int, default=24, help="validation scenes per evaluation")
    parser.add_argument("--item-kib", type=int, default=512)
    parser.add_argument(
        "--trainer-mmap-threshold",
        type=int,
        metavar="BYTES",
        help="glibc mmap threshold for the trainer process itself (and workers forked from it); "
        "default: glibc's dynamic one",
    )
    parser.add_argument(
        "--late",
        action="store_true",
        help="build the loader (and start its workers) only after the first epoch's heap has grown, "
        "as a trainer that builds its validation loader late does",
    )
    parser.add_argument("--hold", action="store_true", help="wait for stdin to close before exiting")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    if args.trainer_mmap_threshold is not None:
        # With glibc's dynamic threshold the 1 MiB masks live in the main heap, where small
        # allocations between them split freed holes: identical runs kept 0-216 MiB of freed
        # masks (mallinfo2 fordblks at the last evaluation). That noise is the trainer's own,
        # not the loader's, and it swamps the fork copies the tests compare.
        val_loader.set_malloc_mmap_threshold(args.trainer_mmap_threshold)
    started = time.monotonic()
    masks: list[torch.Tensor] = []
    total = args.heap_mib * 1024 * 1024 // MASK_BYTES

    def grow(epoch: int) -> None:
        """ "Training": the evaluator's kept state grows each epoch."""
        while len(masks) < total * epoch // args.evals:
            masks.append(torch.ones(MASK_BYTES, dtype=torch.bool))

    if args.late:
        grow(1)
    loader = build_loader(args.variant, Scenes(args.items, args.item_kib), args.workers)
    val_loader.prestart_workers(loader)  # "before_train": no-op except for workers kept alive
    sampler = memory.start_sampler(interval_s=0.05)
    for epoch in range(1, args.evals + 1):
        grow(epoch)
        # "evaluation": every kept mask is recomputed while the loader runs
        per_batch = -(-len(masks) // len(loader))
        for step, batch in enumerate(loader):
            assert batch["coord"].shape[-1] == 3
            for i in range(step * per_batch, min(len(masks), (step + 1) * per_batch)):
                masks[i] = torch.full((MASK_BYTES,), bool((epoch + i) % 2), dtype=torch.bool)
        print(memory.memory_line(epoch, sampler=sampler), flush=True)
        heap = heap_line()
        if heap is not None:
            print(heap, flush=True)
    print(f"wall {time.monotonic() - started:.3f}", flush=True)
    if args.hold:
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
