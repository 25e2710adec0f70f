"""Real kernel: fresh fork workers leave a second heap in the cgroup; "none" and "persistent" do not.

The workload (workload.py) grows a 300 MiB heap of bool masks over 3
evaluations and recomputes it during each. Each run gets its own fresh memory
cgroup; only the workload joins it, never pytest. Peaks are measured uncapped
first, then a limit is set between them. No wall-time and no exit-137
assertions: under the limit the kernel may kill a worker instead of the main
process, which then exits 1 with a DataLoader error.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterator

import pytest
import torch  # noqa: F401  imported before any measurement: its first import charges page cache

from podmortem import memory_line
from podmortem_demo import sandbox

from . import harness

pytestmark = pytest.mark.kernel

MIB = 1024**2
HEAP_MIB = 300
# The trainer's own mmap threshold is pinned: with glibc's dynamic one, identical "persistent" runs
# peaked anywhere from 470 to 686 MiB (heap holes left by freed masks), sometimes above the limit
# this module sets between the peaks; pinned, 7 rounds (uncapped, then capped) stayed within 2 MiB
# (anon peaks: persistent 470, none 448, fresh-fork 767 MiB).
ARGS = (
    "--heap-mib",
    str(HEAP_MIB),
    "--evals",
    "3",
    "--workers",
    "2",
    "--items",
    "12",
    "--trainer-mmap-threshold",
    str(128 * 1024),
)
VARIANTS = ("fresh-fork", "none", "persistent")


@pytest.fixture(scope="module")
def uncapped() -> Iterator[dict[str, harness.Run]]:
    """One uncapped run of each variant, each in its own throwaway cgroup (removed after)."""
    try:
        root = sandbox.find_root()
    except sandbox.CgroupUnavailable as exc:
        pytest.skip(f"needs a writable memory cgroup: {exc}")

    def run(variant: str) -> harness.Run:
        with sandbox.MemoryCgroup(root=root, prefix="podmortem-test") as cg:
            return harness.run_variant(cg, variant, args=ARGS)

    # Side by side, each in its own cgroup: their charges cannot mix, and the test takes a third of the time.
    with concurrent.futures.ThreadPoolExecutor(len(VARIANTS)) as pool:
        runs = dict(zip(VARIANTS, pool.map(run, VARIANTS), strict=True))
    for variant, result in runs.items():
        assert result.returncode == 0, f"{variant}: {result.stderr}"
    yield runs


def test_fresh_fork_holds_a_second_copy_of_the_heap(uncapped: dict[str, harness.Run]) -> None:
    fresh = uncapped["fresh-fork"].anon_peak_bytes
    for fixed in ("none", "persistent"):
        other = uncapped[fixed].anon_peak_bytes
        # A quarter of the heap is a margin well inside the measured gap (about 0.6-0.9 of it).
        assert fresh - other > HEAP_MIB * MIB // 4, (
            f"memory.stat rss peak: fresh-fork {fresh / MIB:.0f} MiB vs {fixed} {other / MIB:.0f} MiB"
        )


def test_memory_line_pod_peak_is_the_cgroups_own_counter(uncapped: dict[str, harness.Run]) -> None:
    for variant, run in uncapped.items():
        assert len(run.memory_lines) == 3
        last = memory_line.parse(run.memory_lines[-1])
        assert last is not None and last.pod is not None and last.workers is not None
        if run.cgroup_peak_bytes is None:
            pytest.skip("this cgroup v2 kernel keeps no memory.peak (before Linux 5.19)")
        # Equal at the printed precision: half of the last digit of the printed unit, plus 64 KiB for
        # what the workload charges between its last line and the counter being read.
        unit = 1024**3 if run.cgroup_peak_bytes >= 1024**3 else MIB
        assert abs(last.pod.peak_bytes - run.cgroup_peak_bytes) <= unit * 0.005 + 64 * 1024, (
            variant,
            run.memory_lines[-1],
            run.cgroup_peak_bytes,
        )
        assert last.pod.epoch_peak_bytes is not None and last.pod.epoch_peak_bytes <= last.pod.peak_bytes
    assert memory_line.parse(uncapped["persistent"].memory_lines[-1]).workers.count >= 2  # type: ignore[union-attr]


def test_a_limit_between_the_peaks_kills_only_fresh_fork(
    uncapped: dict[str, harness.Run], make_cgroup: Callable[..., sandbox.MemoryCgroup]
) -> None:
    survivors = max(uncapped["none"].cgroup_peak_bytes or 0, uncapped["persistent"].cgroup_peak_bytes or 0)
    fresh = uncapped["fresh-fork"].anon_peak_bytes  # anonymous memory alone: no page cache to reclaim
    assert survivors < fresh
    limit = (survivors + fresh) // 2
    cgroups = {variant: make_cgroup(limit_bytes=limit) for variant in VARIANTS}
    with concurrent.futures.ThreadPoolExecutor(len(VARIANTS)) as pool:
        runs = dict(
            zip(
                VARIANTS,
                pool.map(lambda v: harness.run_variant(cgroups[v], v, args=ARGS), VARIANTS),
                strict=True,
            )
        )
    for variant, run in runs.items():
        cg = cgroups[variant]
        detail = f"{variant} under {limit / MIB:.0f} MiB: rc {run.returncode}, {run.stderr[-300:]}"
        if variant == "fresh-fork":
            assert cg.oom_kills() >= 1, detail
            assert run.returncode != 0, detail
        else:
            assert cg.oom_kills() == 0, detail
            assert run.returncode == 0, detail
            assert len(run.memory_lines) == 3


LATE_HEAP_MIB = 600
LATE_ARGS = ("--heap-mib", str(LATE_HEAP_MIB), "--evals", "3", "--workers", "2", "--items", "12", "--late")
LATE_ARGS += ("--trainer-mmap-threshold", str(128 * 1024))


def test_a_loader_built_after_the_heap_grew_gets_no_copies() -> None:
    """Built (and first iterated) with 200 MiB of masks held, then growing to 600: "auto" must not fork.

    Deciding at construction time forked from the grown trainer (the issue measured 0.94x of
    fresh fork); deciding when the workers start picks the fork server here.
    """
    try:
        root = sandbox.find_root()
    except sandbox.CgroupUnavailable as exc:
        pytest.skip(f"needs a writable memory cgroup: {exc}")

    def run(variant: str) -> harness.Run:
        with sandbox.MemoryCgroup(root=root, prefix="podmortem-test") as cg:
            return harness.run_variant(cg, variant, args=LATE_ARGS)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        fresh, auto = pool.map(run, ("fresh-fork", "auto"))
    for result in (fresh, auto):
        assert result.returncode == 0, f"{result.variant}: {result.stderr}"
    chosen = [line for line in auto.lines if line.startswith("policy ")]
    assert chosen and chosen[0].startswith("policy forkserver:"), chosen
    # Anonymous memory alone (no page cache, which differs from machine to machine), and a margin in
    # heap, not a ratio: the fork server's workers each import torch (~180 MiB PSS), so "auto" saves
    # the heap's second copy less their cost. Measured: 310 MiB below fresh fork here (0.79x), 298 on
    # CI (0.80x, which failed the 0.8 ratio this test had); forking from the grown trainer saved about
    # 90 MiB (0.94x). A third of the final heap lies between.
    gap = fresh.anon_peak_bytes - auto.anon_peak_bytes
    assert gap > LATE_HEAP_MIB * MIB // 3, (
        f"auto peaked {gap / MIB:.0f} MiB below fresh fork ({fresh.anon_peak_bytes / MIB:.0f} vs "
        f"{auto.anon_peak_bytes / MIB:.0f} MiB anonymous; {auto.memory_lines[-1]})"
    )
