"""Peak cgroup memory and wall time of each validation-loader policy, as ratios to fresh fork workers.

Each variant runs the same trainer-like workload (tests/runtime/val_loader/
workload.py: a heap of bool masks that grows each epoch and is recomputed
during each of 3 evaluations) in its own fresh, uncapped memory cgroup, one
after the other. Needs root and a writable memory cgroup (v1 or v2).

    python bench/val_loader.py            # 800 MiB heap, 4 MiB scenes
    python bench/val_loader.py --quick    # 300 MiB heap, 1 MiB scenes
    python bench/val_loader.py --late     # loader built after the first epoch's heap (1,200 MiB heap)

With ``--late`` the loader is built, and its workers started, only after the first
epoch's share of the heap exists (400 MiB of 1,200 by default), as in a trainer
that builds its validation loader late; "persistent" then forks from that large
trainer, which is what "auto" did when it decided at construction time.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch  # noqa: F401  imported before measuring: the first import charges page cache

from podmortem_demo import sandbox

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "val_loader_harness", HERE.parent / "tests/runtime/val_loader/harness.py"
)
assert _spec is not None and _spec.loader is not None
harness = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = harness  # dataclasses look their module up
_spec.loader.exec_module(harness)

VARIANTS = {
    "fresh-fork": "baseline: Pointcept's loader, workers forked at every evaluation",
    "none": "num_workers=0",
    "persistent-no-threshold": "persistent workers forked early, glibc's dynamic mmap threshold",
    "persistent": "persistent workers forked early, mmap threshold 128 KiB in workers",
    "forkserver": "workers forked from a fork server that preloads torch",
    "spawn": "fresh interpreters per evaluation",
    "auto": "the documented rule, decided when the workers are first started",
}
MIB = 1024**2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a smaller heap and scenes (about a minute)")
    parser.add_argument(
        "--heap-mib", type=int, help="mask heap at the last evaluation (default 800, quick 300)"
    )
    parser.add_argument("--item-kib", type=int, help="mean validation scene size (default 4096, quick 1024)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--late", action="store_true", help="build the loader after the first epoch's heap has grown"
    )
    parser.add_argument(
        "--trainer-mmap-threshold",
        type=int,
        default=128 * 1024,
        metavar="BYTES",
        help="glibc mmap threshold pinned in the trainer process (default 131072; 0: glibc's dynamic "
        "threshold, under which the trainer's own heap holes swing the peaks by up to ~200 MiB run to run)",
    )
    parser.add_argument(
        "--only", nargs="+", choices=list(VARIANTS), help="run these variants (baseline always)"
    )
    args = parser.parse_args(argv)
    heap = args.heap_mib or (300 if args.quick else 1200 if args.late else 800)
    item = args.item_kib or (1024 if args.quick else 4096)
    workload_args = (
        "--heap-mib",
        str(heap),
        "--item-kib",
        str(item),
        "--workers",
        str(args.workers),
        "--evals",
        "3",
        "--items",
        "16",
    )
    if args.trainer_mmap_threshold:
        workload_args += ("--trainer-mmap-threshold", str(args.trainer_mmap_threshold))
    if args.late:
        workload_args += ("--late",)
    try:
        root = sandbox.find_root()
    except sandbox.CgroupUnavailable as exc:
        print(f"cannot run: needs a writable memory cgroup: {exc}", file=sys.stderr)
        return 2
    chosen = ["fresh-fork", *[v for v in VARIANTS if v != "fresh-fork" and (not args.only or v in args.only)]]
    if args.trainer_mmap_threshold and "persistent-no-threshold" in chosen:
        # Forked workers inherit the trainer's pinned threshold, so this variant would repeat "persistent".
        chosen.remove("persistent-no-threshold")
        print("persistent-no-threshold: skipped; it needs --trainer-mmap-threshold 0 (workers inherit it)")
    print(
        f"workload: heap {heap} MiB, scenes ~{item} KiB x16, {args.workers} workers, 3 evaluations; "
        f"trainer mmap threshold {args.trainer_mmap_threshold or 'glibc dynamic'}; cgroup v{root.version}"
        + (f"; loader built late, after {heap // 3} MiB of heap" if args.late else "")
    )
    print(
        f"{'variant':<25} {'cgroup peak':>12} {'ratio':>6} {'rss peak':>10} {'ratio':>6} "
        f"{'wall':>7} {'ratio':>6}"
    )
    base: Any = None  # the harness is loaded from its file, so its types are not visible here
    for variant in chosen:
        with sandbox.MemoryCgroup(root=root, prefix="podmortem-bench") as cg:
            run = harness.run_variant(cg, variant, args=workload_args, timeout_s=600)
        if run.returncode != 0 or run.cgroup_peak_bytes is None:
            print(f"{variant:<25} failed (rc {run.returncode}): {run.stderr[-500:]}")
            continue
        base = base or run
        assert base.cgroup_peak_bytes is not None
        print(
            f"{variant:<25} {run.cgroup_peak_bytes / MIB:>8.0f} MiB "
            f"{run.cgroup_peak_bytes / base.cgroup_peak_bytes:>6.2f}"
            f" {run.anon_peak_bytes / MIB:>6.0f} MiB {run.anon_peak_bytes / base.anon_peak_bytes:>6.2f}"
            f" {run.wall_s:>6.1f}s {run.wall_s / base.wall_s:>6.2f}   {VARIANTS[variant]}"
        )
        print(f"{'':<25} {run.memory_lines[-1]}")
        for line in run.lines:
            if line.startswith("policy "):
                print(f"{'':<25} {line}")
        if run.heap_lines:
            print(f"{'':<25} trainer {run.heap_lines[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
