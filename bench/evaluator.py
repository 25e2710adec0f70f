"""Memory and time of the lean instance-seg evaluator against the dense (Pointcept-style) path.

Each (configuration, method) runs in a fresh subprocess, so peaks do not leak
between runs. A worker measures, per scene, the peak RSS *above its input* (the
kernel's VmHWM, reset through /proc/self/clear_refs after the inputs are built)
plus everything it still holds from earlier scenes, then the AP step's peak; the
largest of these is the evaluator's own peak. Inputs are regenerated per scene
(same seed for every method), so only the evaluator's held state accumulates over
the S scenes, as in a validation epoch. All methods must report the same AP.

Every worker runs with ``MALLOC_MMAP_THRESHOLD_=131072`` (the glibc default, pinned).
By default glibc raises its mmap threshold each time a large block is freed, so
later large temporaries come from the heap; the heap's free top is not always
returned, and freed memory then reads as held RSS, by an amount that depends on the
order of earlier allocations (measured: 31-48 MB for the same lean run). Pinning the
threshold keeps big blocks on mmap, returned on free, for every method alike.

Times are given as wall and process CPU seconds: CPU time (all threads) does not
swing with other load on a shared machine the way wall time does.

Methods:
  dense-ref     the naive dense path from tests/runtime/insseg/reference.py
                (Pointcept's algorithm: a bool mask per proposal kept until AP,
                a scan of all points per proposal and GT)
  lean-dense    podmortem_runtime.insseg on the same dense int32 [P, N] input
  lean-sparse   podmortem_runtime.insseg on SparseMasks (what the PointGroup helper yields)

Usage:
  python bench/evaluator.py --quick            # small sizes, a minute
  python bench/evaluator.py                    # N in {200k, 1M}, P in {100, 500, 2000}, 20 GT, S=10
  python bench/evaluator.py --config 1M:2000   # one configuration
The dense reference at N=1M, P=2,000 holds about 2 GB per scene on top of the 8 GB
input; by default it is measured on --ref-budget-gb worth of held masks (at least
one scene), and the table says how many scenes it ran.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCANNET_NAMES = (
    "wall",
    "floor",
    "cabinet",
    "bed",
    "chair",
    "sofa",
    "table",
    "door",
    "window",
    "bookshelf",
    "picture",
    "counter",
    "desk",
    "curtain",
    "refrigerator",
    "shower curtain",
    "toilet",
    "sink",
    "bathtub",
    "otherfurniture",
)
IGNORE = (-1, 0, 1)  # PointGroup on ScanNet: walls and floors are not instances
MIB = 1024 * 1024
#: glibc's default mmap threshold, pinned so it does not grow (see the module docstring).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


# -- measuring ------------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def rss() -> int:
    return _status_kib("VmRSS") * 1024


def reset_peak() -> None:
    """Make VmHWM start again from the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak() -> int:
    return _status_kib("VmHWM") * 1024


# -- inputs ---------------------------------------------------------------------------------------


def make_scene(seed: int, n_points: int, n_pred: int, n_gt: int, *, dense: bool) -> dict[str, Any]:
    """A ScanNet-like scene: contiguous GT runs, proposals that cover, cut or miss them."""
    rng = np.random.default_rng(seed)
    segment = rng.integers(0, 2, n_points).astype(np.int64)  # wall/floor everywhere else (ignored)
    instance = np.full(n_points, -1, dtype=np.int64)
    sizes = rng.uniform(0.5, 1.5, n_gt)
    sizes = (sizes / sizes.sum() * 0.6 * n_points).astype(np.int64)
    gaps = rng.uniform(0, 1, n_gt)
    gaps = (gaps / gaps.sum() * (n_points - sizes.sum())).astype(np.int64)
    starts = np.cumsum(gaps) + np.concatenate([[0], np.cumsum(sizes)[:-1]])
    gt_class = rng.integers(2, len(SCANNET_NAMES), n_gt)
    for g in range(n_gt):
        instance[starts[g] : starts[g] + sizes[g]] = g + 1
        segment[starts[g] : starts[g] + sizes[g]] = gt_class[g]
    segment[rng.random(n_points) < 0.02] = -1
    pred_class = np.empty(n_pred, dtype=np.int64)
    p_start = np.empty(n_pred, dtype=np.int64)
    p_len = np.empty(n_pred, dtype=np.int64)
    for i in range(n_pred):
        g = int(rng.integers(0, n_gt))
        if rng.random() < 0.8:
            p_len[i] = max(100, int(sizes[g] * rng.uniform(0.3, 1.1)))
            p_start[i] = starts[g] + int(sizes[g] * rng.uniform(-0.15, 0.3))
            pred_class[i] = gt_class[g] if rng.random() < 0.9 else rng.integers(0, len(SCANNET_NAMES))
        else:
            p_len[i] = int(rng.integers(100, max(101, sizes.mean())))
            p_start[i] = int(rng.integers(0, n_points))
            pred_class[i] = rng.integers(0, len(SCANNET_NAMES))
    p_start = np.clip(p_start, 0, n_points - 1)
    p_end = np.minimum(p_start + p_len, n_points)
    scores = rng.random(n_pred).astype(np.float32)
    scene: dict[str, Any] = {
        "classes": pred_class,
        "scores": scores,
        "segment": segment,
        "instance": instance,
    }
    if dense:
        masks = np.empty((n_pred, n_points), dtype=np.int32)  # every page written, as torch.zeros does
        for i in range(n_pred):
            masks[i].fill(0)
            masks[i, p_start[i] : p_end[i]] = 1
        scene["masks"] = masks
    else:
        from podmortem_runtime import insseg

        lengths = p_end - p_start
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        indices = np.empty(int(offsets[-1]), dtype=np.int32)
        for i in range(n_pred):
            indices[offsets[i] : offsets[i + 1]] = np.arange(p_start[i], p_end[i], dtype=np.int32)
        scene["masks"] = insseg.SparseMasks(indices, offsets, n_points)
    return scene


# -- worker ---------------------------------------------------------------------------------------


def _load_reference() -> Any:
    path = ROOT / "tests" / "runtime" / "insseg" / "reference.py"
    spec = importlib.util.spec_from_file_location("insseg_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker(args: argparse.Namespace) -> dict[str, Any]:
    from podmortem_runtime import insseg

    if args.method == "dense-ref":
        impl = _load_reference()
    else:
        impl = insseg
        # One small scene first: compiles (or loads the cached kernel) and pays one-time
        # lazy imports before the baseline, so they do not read as the evaluator's memory.
        if args.method in ("lean-dense", "lean-sparse"):
            warm = make_scene(0, 1000, 3, 2, dense=args.method == "lean-dense")
            insseg.associate(
                warm["classes"],
                warm["scores"],
                warm["masks"],
                warm["segment"],
                warm["instance"],
                class_names=SCANNET_NAMES,
                segment_ignore_index=IGNORE,
            )
    kw = {"class_names": SCANNET_NAMES, "segment_ignore_index": IGNORE}
    base = rss()
    held = []
    own_peak = 0
    input_peak = 0
    whole_peak = 0
    assoc_s = 0.0
    assoc_cpu_s = 0.0
    for s in range(args.scenes):
        before = rss()
        scene = make_scene(1000 + s, args.n, args.p, args.gt, dense=args.method != "lean-sparse")
        after = rss()
        reset_peak()
        t0 = time.perf_counter()
        c0 = time.process_time()
        held.append(
            impl.associate(
                scene["classes"],
                scene["scores"],
                scene["masks"],
                scene["segment"],
                scene["instance"],
                instance_ignore_index=-1,
                min_region_size=100,
                **kw,
            )
        )
        assoc_s += time.perf_counter() - t0
        assoc_cpu_s += time.process_time() - c0
        input_bytes = after - before
        own_peak = max(own_peak, peak() - input_bytes - base)
        input_peak = max(input_peak, input_bytes)
        whole_peak = max(whole_peak, peak() - base)
        del scene
    reset_peak()
    t0 = time.perf_counter()
    scores = impl.average_precision(held, min_region_size=100, **kw)
    ap_s = time.perf_counter() - t0
    own_peak = max(own_peak, peak() - base)
    whole_peak = max(whole_peak, peak() - base)
    held_bytes = rss() - base
    check = impl.average_precision(held[: args.check_scenes], min_region_size=100, **kw)
    return {
        "method": args.method,
        "n": args.n,
        "p": args.p,
        "scenes": args.scenes,
        "own_peak": own_peak,
        "held_after": held_bytes,
        "input": input_peak,
        "whole_peak": whole_peak,
        "assoc_per_scene_s": assoc_s / args.scenes,
        "assoc_cpu_per_scene_s": assoc_cpu_s / args.scenes,
        "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
        "ap_s": ap_s,
        "threads": os.environ.get("NUMBA_NUM_THREADS", str(os.cpu_count())),
        "all_ap": scores["all_ap"],
        "all_ap_50%": scores["all_ap_50%"],
        "all_ap_25%": scores["all_ap_25%"],
        "check_scenes": args.check_scenes,
        "check": [check["all_ap"], check["all_ap_50%"], check["all_ap_25%"]],
    }


# -- driver ---------------------------------------------------------------------------------------


def _parse_config(text: str) -> tuple[int, int]:
    n, _, p = text.partition(":")
    scale = {"k": 1000, "M": 1_000_000}
    number = int(float(n[:-1]) * scale[n[-1]]) if n[-1] in scale else int(n)
    return number, int(p)


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def run_one(
    method: str, n: int, p: int, scenes: int, gt: int, threads: int | None, check_scenes: int
) -> dict[str, Any] | str:
    need = n * p * 4 + (n * p * min(scenes, 2) if method == "dense-ref" else 0) + 1024 * MIB
    if method != "lean-sparse" and need > _available_bytes() * 0.9:
        return f"skipped: needs ~{need / 2**30:.1f} GiB, {_available_bytes() / 2**30:.1f} GiB available"
    env = dict(os.environ)
    env.update(MALLOC_ENV)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "runtime_patch"), env.get("PYTHONPATH", "")])
    if threads:
        env["NUMBA_NUM_THREADS"] = str(threads)
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--method",
        method,
        "--n",
        str(n),
        "--p",
        str(p),
        "--scenes",
        str(scenes),
        "--gt",
        str(gt),
        "--check-scenes",
        str(check_scenes),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        return f"failed (rc {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (N 20k/100k, P 100/500), S=3")
    parser.add_argument(
        "--config",
        action="append",
        metavar="N:P",
        help="only this configuration, e.g. 1M:2000 or 200k:500 (repeatable)",
    )
    parser.add_argument(
        "--scenes", type=int, default=None, help="scenes held until AP (default 10; quick: 3)"
    )
    parser.add_argument("--gt", type=int, default=20, help="GT instances per scene (default 20)")
    parser.add_argument(
        "--ref-budget-gb",
        type=float,
        default=4.0,
        help="cap on the masks the dense reference may hold: it runs floor(budget / (P·N)) "
        "scenes, at least 1 (default 4)",
    )
    parser.add_argument("--threads", type=int, default=None, help="NUMBA_NUM_THREADS for the lean dense pass")
    parser.add_argument("--methods", default="dense-ref,lean-dense,lean-sparse")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--p", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--check-scenes", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return 0

    scenes = args.scenes or (3 if args.quick else 10)
    if args.config:
        configs = [_parse_config(c) for c in args.config]
    elif args.quick:
        configs = [(n, p) for n in (20_000, 100_000) for p in (100, 500)]
    else:
        configs = [(n, p) for n in (200_000, 1_000_000) for p in (100, 500, 2000)]
    methods = args.methods.split(",")
    print(
        f"S={scenes} scenes held until AP, {args.gt} GT per scene, dense input int32 [P, N]; "
        f"memory = peak RSS above the input and the interpreter; workers run with "
        f"MALLOC_MMAP_THRESHOLD_={MALLOC_ENV['MALLOC_MMAP_THRESHOLD_']}"
    )
    header = (
        f"{'N':>9} {'P':>5} {'method':<12} {'scenes':>6} {'input MB':>9} {'own peak MB':>11} "
        f"{'whole MB':>9} {'assoc s/scene':>13} {'cpu s/scene':>11} {'AP s':>6}  AP50"
    )
    print(header)
    print("-" * len(header))
    summary = []
    for n, p in configs:
        results: dict[str, dict[str, Any]] = {}
        ref_scenes = max(1, min(scenes, int(args.ref_budget_gb * 2**30 // (n * p))))
        for method in methods:
            s = ref_scenes if method == "dense-ref" else scenes
            r = run_one(method, n, p, s, args.gt, args.threads, ref_scenes)
            if isinstance(r, str):
                print(f"{n:>9} {p:>5} {method:<12} {r}")
                continue
            results[method] = r
            print(
                f"{n:>9} {p:>5} {method:<12} {r['scenes']:>6} {r['input'] / MIB:>9.1f} "
                f"{r['own_peak'] / MIB:>11.1f} {r['whole_peak'] / MIB:>9.1f} "
                f"{r['assoc_per_scene_s']:>13.3f} {r['assoc_cpu_per_scene_s']:>11.3f} "
                f"{r['ap_s']:>6.2f}  {r['all_ap_50%']:.6f}",
                flush=True,
            )
        summary.append(((n, p), results))
    print()
    print("Ratios against the dense reference (same inputs, same run; association wall / CPU time):")
    for (n, p), results in summary:
        ref = results.get("dense-ref")
        for method in ("lean-dense", "lean-sparse"):
            r = results.get(method)
            if ref is None or r is None:
                continue
            same = all(_same(a, b) for a, b in zip(ref["check"], r["check"], strict=True))
            same_ap = f"{'identical' if same else 'DIFFERENT'} on the first {r['check_scenes']} scene(s)"
            print(
                f"  N={n:>9,} P={p:>5} {method:<12} "
                f"own memory {ref['own_peak'] / max(r['own_peak'], 1):>7.1f}x "
                f"lower, association {ref['assoc_per_scene_s'] / r['assoc_per_scene_s']:>6.1f}x faster "
                f"(CPU {ref['assoc_cpu_per_scene_s'] / max(r['assoc_cpu_per_scene_s'], 1e-9):>6.1f}x less), "
                f"AP {same_ap}"
            )
    return 0


def _same(a: float, b: float) -> bool:
    return (np.isnan(a) and np.isnan(b)) or a == b


if __name__ == "__main__":
    raise SystemExit(main())
