"""Memory and time of the lean instance-seg evaluator against Pointcept's own InsSegEvaluator.

Each (configuration, method) runs in a fresh subprocess, so peaks do not leak
between runs. A worker measures, per scene, the peak RSS *above its input* (the
kernel's VmHWM, reset through /proc/self/clear_refs after the inputs are built)
plus everything it still holds from earlier scenes, then the AP step's peak; the
largest of these is the evaluator's own peak. Inputs are regenerated per scene
(same seed for every method), so only the evaluator's held state accumulates over
the S scenes, as in a validation epoch. All methods must report the same AP.
One-time costs (imports, numba's compile or its cache) are paid on a small scene
before the baseline and reported on their own (``--one-time``, fresh processes).

Every worker runs with ``MALLOC_MMAP_THRESHOLD_=131072`` (the glibc default, pinned).
By default glibc raises its mmap threshold each time a large block is freed, so
later large temporaries come from the heap; the heap's free top is not always
returned, and freed memory then reads as held RSS, by an amount that depends on the
order of earlier allocations (measured: 31-48 MB for the same lean run). Pinning the
threshold keeps big blocks on mmap, returned on free, for every method alike.

Times are given as wall and process CPU seconds: CPU time (all threads) does not
swing with other load on a shared machine the way wall time does.

Methods:
  pointcept     Pointcept's own InsSegEvaluator.associate_instances / evaluate_matches,
                from the shared source (../shared/third_party/pointcept-d74c646), its
                CUDA-only imports stood in as in tests/runtime/pointcept; masks passed
                as the torch tensor PointGroup returns (int32 [P, N])
  lean-dense    podmortem_runtime.insseg on the same dense int32 [P, N] input
  lean-sparse   podmortem_runtime.insseg on SparseMasks (what the PointGroup helper yields)
  floor         one streaming pass over the dense input (numpy count_nonzero row by row,
                one thread), for its memory and time in the table
The dense goal's floors are timed in the lean-dense worker itself, after each scene's
association, on the same mask: the fastest streaming read (numpy count_nonzero, or a
compiled OR of each row's 64-bit words) on one thread and with the rows split over
--threads threads, printed side by side. The goal is against the all-threads floor: the
machine's memory floor with the threads the evaluator may use (issue 40).
--timing-repeats R times the association and both floors R times per scene, alternating
on the same mask, for more samples on a busy machine (the memory figures are the first
association's).

Usage:
  python bench/evaluator.py --quick            # small sizes, a few minutes
  python bench/evaluator.py                    # N in {200k, 1M}, P in {100, 500, 2000}, 20 GT, S=10
  python bench/evaluator.py --config 1M:2000   # one configuration
  python bench/evaluator.py --one-time         # import and compile costs only
Pointcept's evaluator at N=1M, P=2,000 holds about 2 GB per scene on top of the 8 GB
input; it is measured on --ref-budget-gb worth of held masks (at least one scene),
and the table says how many scenes it ran. The lean dense pass runs on --threads
numba threads (default: the CPUs this process may run on, os.sched_getaffinity, as
numba's own default), and the all-threads floor reads with as many.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
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
#: The one-time measurements' verdicts, printed with the others at the end.
ONE_TIME_GOALS: list[str] = []
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


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class PointceptEvaluator:
    """Pointcept's own InsSegEvaluator methods behind the lean module's two calls."""

    def __init__(self) -> None:
        standins = _load(ROOT / "tests" / "runtime" / "pointcept" / "standins.py", "pointcept_standins")
        if not standins.POINTCEPT.is_dir():
            raise SystemExit(f"Pointcept's source is not at {standins.POINTCEPT}")
        standins.install()
        if not hasattr(np, "in1d"):  # Pointcept calls np.in1d, removed in NumPy 2.4; isin is its successor
            np.in1d = standins.in1d  # type: ignore[attr-defined]
        import warnings

        warnings.simplefilter("ignore")  # Pointcept's torch/numpy deprecations, not what is measured
        import torch
        from pointcept.engines.hooks.evaluator import InsSegEvaluator

        self.torch = torch
        self.hook = InsSegEvaluator(segment_ignore_index=IGNORE, instance_ignore_index=-1)
        data = SimpleNamespace(names=list(SCANNET_NAMES), num_classes=len(SCANNET_NAMES))
        self.hook.trainer = SimpleNamespace(cfg=SimpleNamespace(data=data))
        self.hook.before_train()

    def associate(
        self, classes: Any, scores: Any, masks: Any, segment: Any, instance: Any, **_: Any
    ) -> dict[str, Any]:
        torch = self.torch
        pred = {
            "pred_classes": torch.from_numpy(classes),
            "pred_scores": torch.from_numpy(scores),
            "pred_masks": torch.from_numpy(masks),
        }
        gt, found = self.hook.associate_instances(pred, torch.from_numpy(segment), torch.from_numpy(instance))
        return {"gt": gt, "pred": found}

    def average_precision(self, scenes: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        return self.hook.evaluate_matches(scenes)  # type: ignore[no-any-return]


class Floor:
    """One pass over the dense input, as fast as numpy reads it; no AP.

    `associate` reads on the calling thread; `read_threads` splits the rows into one contiguous
    run per thread (numpy's count_nonzero releases the GIL, so they read at once). `fastest` is
    the floor the dense goal is held to: the fastest of these and a compiled OR of every row's
    64-bit words (numba, rows split over as many threads), timed on the same mask in the same
    process as the association it is compared with.
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads)

    def associate(self, classes: Any, scores: Any, masks: Any, *_: Any, **__: Any) -> int:
        return self._rows(masks, 0, masks.shape[0])

    def read_threads(self, masks: Any) -> int:
        bounds = np.linspace(0, masks.shape[0], self.threads + 1).astype(int)
        return sum(self._pool.map(lambda i: self._rows(masks, bounds[i], bounds[i + 1]), range(self.threads)))

    @staticmethod
    def _rows(masks: Any, lo: int, hi: int) -> int:
        return sum(int(np.count_nonzero(masks[i])) for i in range(lo, hi))

    def average_precision(self, scenes: list[Any], **_: Any) -> dict[str, Any]:
        return {"all_ap": float("nan"), "all_ap_50%": float("nan"), "all_ap_25%": float("nan")}

    def fastest(self, masks: Any, threads: int) -> float:
        """Seconds of the fastest streaming read of ``masks`` on ``threads`` threads (1 or `threads`)."""
        import numba

        t0 = time.perf_counter()
        if threads == 1:
            self.associate(None, None, masks)
        else:
            self.read_threads(masks)
        best = time.perf_counter() - t0
        words = _words(masks)
        if words is not None:
            previous = numba.get_num_threads()
            numba.set_num_threads(threads)
            try:
                t0 = time.perf_counter()
                _or_rows(words)
                best = min(best, time.perf_counter() - t0)
            finally:
                numba.set_num_threads(previous)
        return best


def _words(masks: Any) -> Any:
    """``masks`` as ``[P, N * itemsize / 8]`` 64-bit words, or None where its rows are not whole words."""
    if not masks.flags.c_contiguous or (masks.shape[1] * masks.itemsize) % 8 or masks.ctypes.data % 8:
        return None
    return masks.view(np.uint64)


_OR_ROWS: Any = None


def _or_rows(words: Any) -> Any:
    """Every row's words ORed together, rows split over numba's threads (compiled on first use)."""
    global _OR_ROWS
    if _OR_ROWS is None:
        import numba

        @numba.njit(parallel=True, nogil=True)
        def or_rows(words: Any) -> Any:  # pragma: no cover - compiled
            out = np.zeros(words.shape[0], dtype=np.uint64)
            for r in numba.prange(words.shape[0]):
                acc = np.uint64(0)
                for k in range(words.shape[1]):
                    acc |= words[r, k]
                out[r] = acc
            return out

        or_rows(np.zeros((2, 8), dtype=np.uint64))  # the compile, before anything is timed
        _OR_ROWS = or_rows
    return _OR_ROWS(words)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    from podmortem_runtime import insseg

    impl: Any
    if args.method == "pointcept":
        impl = PointceptEvaluator()
    elif args.method == "floor":
        impl = Floor(_threads())
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
    threads = _threads()
    floor = Floor(threads) if args.method == "lean-dense" else None
    if floor is not None:  # its compile and its threads, before the baseline as the evaluator's are
        warm_masks = np.zeros((threads, 1000), dtype=np.int32)
        floor.fastest(warm_masks, 1)
        floor.fastest(warm_masks, threads)
    kw = {"class_names": SCANNET_NAMES, "segment_ignore_index": IGNORE}
    base = rss()
    held = []
    scene_peaks: list[int] = []
    own_peak = 0
    input_peak = 0
    whole_peak = 0
    assoc_s = 0.0
    assoc_cpu_s = 0.0
    assoc_each: list[float] = []
    floor_one: list[float] = []
    floor_all: list[float] = []
    def associate(scene: dict[str, Any]) -> Any:
        return impl.associate(
            scene["classes"], scene["scores"], scene["masks"], scene["segment"], scene["instance"],
            instance_ignore_index=-1, min_region_size=100, **kw,
        )

    for s in range(args.scenes):
        before = rss()
        scene = make_scene(1000 + s, args.n, args.p, args.gt, dense=args.method != "lean-sparse")
        after = rss()
        reset_peak()
        t0 = time.perf_counter()
        c0 = time.process_time()
        held.append(associate(scene))
        assoc_s += time.perf_counter() - t0
        assoc_each.append(time.perf_counter() - t0)
        assoc_cpu_s += time.process_time() - c0
        if floor is not None:  # the floors on the same mask, in this process: the same load
            floor_one.append(floor.fastest(scene["masks"], 1))
            floor_all.append(floor.fastest(scene["masks"], threads))
        input_bytes = after - before
        scene_peaks.append(peak() - after)  # this scene's association alone, above everything held
        own_peak = max(own_peak, peak() - input_bytes - base)
        input_peak = max(input_peak, input_bytes)
        whole_peak = max(whole_peak, peak() - base)
        for _ in range(args.timing_repeats - 1 if floor is not None else 0):
            # More samples of the same two timings on the same mask, alternating, after the
            # memory is measured: a busy shared machine slows either at random, and building
            # another 8 GB scene costs far more than reading this one again.
            t0 = time.perf_counter()
            associate(scene)
            assoc_each.append(time.perf_counter() - t0)
            floor_one.append(floor.fastest(scene["masks"], 1))
            floor_all.append(floor.fastest(scene["masks"], threads))
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
        "threads": threads,
        "assoc_fastest_s": min(assoc_each),
        "floor_one_s": min(floor_one, default=float("nan")),
        "floor_all_s": min(floor_all, default=float("nan")),
        "all_ap": scores["all_ap"],
        "all_ap_50%": scores["all_ap_50%"],
        "all_ap_25%": scores["all_ap_25%"],
        "check_scenes": args.check_scenes,
        "check": [check["all_ap"], check["all_ap_50%"], check["all_ap_25%"]],
        "numba_imported": "numba" in sys.modules,
        "scene_peaks": scene_peaks,
    }


# -- driver ---------------------------------------------------------------------------------------


def _threads() -> int:
    """The threads the evaluator may use: NUMBA_NUM_THREADS, else the CPUs this process may run on."""
    return int(os.environ.get("NUMBA_NUM_THREADS") or len(os.sched_getaffinity(0)))


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
    method: str,
    n: int,
    p: int,
    scenes: int,
    gt: int,
    threads: int | None,
    check_scenes: int,
    timing_repeats: int = 1,
) -> dict[str, Any] | str:
    need = n * p * 4 + (n * p * min(scenes, 2) if method == "pointcept" else 0) + 1024 * MIB
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
        "--timing-repeats",
        str(timing_repeats),
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
        help="cap on the masks Pointcept's evaluator may hold: it runs floor(budget / (P·N)) "
        "scenes, at least 1 (default 4)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="NUMBA_NUM_THREADS for the lean dense pass and the all-threads floor "
        "(default: the CPUs this process may run on)",
    )
    parser.add_argument("--methods", default="pointcept,lean-dense,lean-sparse,floor")
    parser.add_argument(
        "--timing-repeats",
        type=int,
        default=1,
        help="lean-dense: time the association and both floors this many times per scene, "
        "alternating, on the same mask; the goal takes the fastest of each (default 1)",
    )
    parser.add_argument("--one-time", action="store_true", help="only the import and compile costs")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--p", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--check-scenes", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(one_time(args.method) if args.method.startswith("once-") else worker(args)))
        return 0
    print_one_time()
    if args.one_time:
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
            s = ref_scenes if method == "pointcept" else scenes
            r = run_one(method, n, p, s, args.gt, args.threads, ref_scenes, args.timing_repeats)
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
    print("Ratios against Pointcept's own evaluator (same inputs, same run; association wall / CPU time):")
    goals: list[str] = []
    for (n, p), results in summary:
        ref = results.get("pointcept")
        for method in ("lean-dense", "lean-sparse"):
            r = results.get(method)
            if ref is None or r is None:
                continue
            same = all(_same(a, b) for a, b in zip(ref["check"], r["check"], strict=True))
            same_ap = f"{'identical' if same else 'DIFFERENT'} on the first {r['check_scenes']} scene(s)"
            memory = max(ref["scene_peaks"]) / max(max(r["scene_peaks"]), 1)
            speed = ref["assoc_per_scene_s"] / r["assoc_per_scene_s"]
            print(
                f"  N={n:>9,} P={p:>5} {method:<12} per-scene own memory {memory:>7.1f}x lower, "
                f"association {speed:>6.1f}x faster "
                f"(CPU {ref['assoc_cpu_per_scene_s'] / max(r['assoc_cpu_per_scene_s'], 1e-9):>6.1f}x less), "
                f"AP {same_ap}"
            )
            if (n, p) == (1_000_000, 2000):  # the post-mortem's scene: the goals are stated for it
                goals.append(
                    _goal(
                        f"{method} per-scene own memory >= 500x below Pointcept's at N=1M, P=2,000",
                        memory,
                        500,
                    )
                )
                if method == "lean-sparse":
                    goals.append(_goal("lean-sparse association >= 20x faster at N=1M, P=2,000", speed, 20))
    print()
    print(
        "Dense association against the fastest streaming read of the same mask (numpy count_nonzero or a "
        "compiled OR of its words), timed after each scene's association in the same worker; each the "
        "fastest of its scenes (and --timing-repeats), as a shared machine's load only ever slows a run:"
    )
    for (n, p), results in summary:
        dense = results.get("lean-dense")
        if dense is None:
            continue
        one, every = dense["floor_one_s"], dense["floor_all_s"]
        # The evaluator may use up to --threads threads: its floor is the fastest read with as many or fewer.
        ratio = dense["assoc_fastest_s"] / min(one, every)
        print(
            f"  N={n:>9,} P={p:>5} lean-dense {dense['assoc_fastest_s']:.3f} s on {dense['threads']} "
            f"thread(s) (mean {dense['assoc_per_scene_s']:.3f} s); floor on 1 thread {one:.3f} s, on "
            f"{dense['threads']} {every:.3f} s: {dense['assoc_fastest_s'] / one:.2f}x the one-thread floor, "
            f"{dense['assoc_fastest_s'] / every:.2f}x the all-threads floor, {ratio:.2f}x the faster"
        )
        if (n, p) == (1_000_000, 2000):
            goals.append(
                _goal(
                    "lean-dense within 1.5x of the fastest read on up to its threads at N=1M, P=2,000",
                    ratio,
                    1.5,
                    at_most=True,
                )
            )
    print()
    print("Per-scene own memory (peak above the input and all held before it), first / largest / last scene:")
    for (n, p), results in summary:
        for method, r in results.items():
            if method == "floor":
                continue
            peaks = r["scene_peaks"]
            print(
                f"  N={n:>9,} P={p:>5} {method:<12} {peaks[0] / MIB:>8.1f} / {max(peaks) / MIB:>8.1f} / "
                f"{peaks[-1] / MIB:>8.1f} MB over {len(peaks)} scene(s); held after them "
                f"{r['held_after'] / MIB:.1f} MB"
            )
    sparse_numba = [r["lean-sparse"]["numba_imported"] for _, r in summary if "lean-sparse" in r]
    if sparse_numba:
        goals.append(("met" if not any(sparse_numba) else "NOT MET") + ": lean-sparse never imports numba")
    print()
    print("Goals:")
    for line in ONE_TIME_GOALS + goals:
        print(f"  {line}")
    return 0


def _goal(text: str, value: float, target: float, *, at_most: bool = False) -> str:
    """'met' when ``value`` reaches ``target`` (or stays within it, ``at_most``); the figure either way."""
    met = value <= target if at_most else value >= target
    return f"{'met' if met else 'NOT MET'}: {text}: {value:.2f} (goal {'<=' if at_most else '>='} {target:g})"


# -- one-time costs -------------------------------------------------------------------------------


def one_time(kind: str) -> dict[str, Any]:
    """In a fresh process: RSS and seconds for importing the evaluator and its first (small) scene."""
    base = rss()
    started = time.perf_counter()
    from podmortem_runtime import insseg

    scene = make_scene(0, 20_000, 20, 5, dense=kind != "once-sparse")
    insseg.associate(
        scene["classes"],
        scene["scores"],
        scene["masks"],
        scene["segment"],
        scene["instance"],
        class_names=SCANNET_NAMES,
        segment_ignore_index=IGNORE,
    )
    seconds = time.perf_counter() - started
    input_bytes = scene["masks"].indices.nbytes if kind == "once-sparse" else scene["masks"].nbytes
    return {
        "kind": kind,
        "seconds": seconds,
        "rss": rss() - base - input_bytes,
        "numba_imported": "numba" in sys.modules,
    }


def print_one_time() -> None:
    import tempfile

    print("One-time cost in a fresh process (import, and for dense numba's compile or cache load):")
    with tempfile.TemporaryDirectory(prefix="podmortem-numba-cache-") as cache:
        runs = [("once-sparse", "sparse", None), ("once-dense", "dense, empty cache", cache)]
        runs.append(("once-dense", "dense, cached (NUMBA_CACHE_DIR)", cache))
        for kind, label, cache_dir in runs:
            env = dict(os.environ, **MALLOC_ENV)
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "runtime_patch"), env.get("PYTHONPATH", "")])
            if cache_dir is not None:
                env["NUMBA_CACHE_DIR"] = cache_dir
            cmd = [sys.executable, __file__, "--worker", "--method", kind]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                print(f"  {label:<34} failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"  {label:<34} {r['rss'] / MIB:>7.1f} MB, {r['seconds']:>5.2f} s, "
                f"numba {'imported' if r['numba_imported'] else 'not imported'}"
            )
            if label.startswith("dense"):
                ONE_TIME_GOALS.append(
                    _goal(f"dense one-time cost ({label}) MB", r["rss"] / MIB, 150, at_most=True)
                )
    print()


def _same(a: float, b: float) -> bool:
    return (np.isnan(a) and np.isnan(b)) or a == b


if __name__ == "__main__":
    raise SystemExit(main())
