"""Benchmark: the job-level root cause for a job of N pods (default 1,000), against a baseline.

Each pod has a 50-line log tail: one rank is OOM-killed first, the others print real NCCL
watchdog, NCCL remote-error and torchrun SIGTERM texts (tests/fixtures/training-logs) and fail
later. Measured: `job_root_cause.root_cause` over all pods (it reads every tail), and the
per-pod log reading `training_log.read` the operator runs for each pod's own report, and the
annotation's job section (`diagnosis.job_section.section`, rows trimmed to 4 KiB). Baseline,
in the same run: one pass of `str.splitlines` + a substring test over every tail, the least any
reader of the same text must do. Goal: the whole job report in under 1 s for 1,000 pods.

Usage: python bench/job_root_cause.py [--pods 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from podmortem.diagnosis import job_root_cause as jrc
from podmortem.diagnosis import job_section, training_log

LOGS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "training-logs"
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def make_pods(n: int, seed: int = 1) -> list[jrc.PodFacts]:
    texts = [
        (LOGS / name).read_text().splitlines()
        for name in ("nccl-watchdog-torch25.log", "nccl-remote-error.log", "torchrun-sigterm.log")
    ]
    rng = random.Random(seed)
    root = rng.randrange(n)
    pods = []
    for rank in range(n):
        filler = [f"[rank{rank}]: step {i} loss=0.{i:04d}" for i in range(50)]
        own = rank == root
        tail = filler[: 50 - len(texts[rank % 3])] + ([] if own else texts[rank % 3])
        at = T0 + timedelta(seconds=0 if own else 60 + rng.random() * 10)
        pods.append(
            jrc.PodFacts(
                pod=f"job-worker-{rank}",
                container="pytorch",
                rank=rank,
                exit_code=137 if own else 1,
                reason="OOMKilled" if own else "Error",
                finished_at=at,
                last_line_at=at,
                verdict="memcg-limit" if own else None,
                last_lines=tuple(tail),
            )
        )
    rng.shuffle(pods)
    return pods


def best(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    pods = make_pods(args.pods)
    blobs = ["\n".join(p.last_lines) for p in pods]

    def baseline() -> None:
        for blob in blobs:
            for line in blob.splitlines():
                _ = "Watchdog caught" in line

    def job() -> None:
        result = jrc.root_cause(pods)
        assert result.root is not None and result.root.verdict == "memcg-limit"

    def per_pod() -> None:
        for p in pods:
            training_log.read(p.last_lines)

    result = jrc.root_cause(pods)

    def section() -> None:
        doc = job_section.section(result, max_bytes=4096).to_json()
        assert doc["rootCause"]["verdict"] == "memcg-limit"

    b = best(baseline, args.repeat)
    j = best(job, args.repeat)
    r = best(per_pod, args.repeat)
    s = best(section, args.repeat)
    print(f"pods: {args.pods}, 50 log lines each, best of {args.repeat}")
    print(f"baseline (split + one substring test per line): {b * 1000:.1f} ms")
    print(f"job root cause (all pods):                     {j * 1000:.1f} ms  ({j / b:.1f}x baseline)")
    print(f"per-pod log reading (all pods):                {r * 1000:.1f} ms  ({r / b:.1f}x baseline)")
    print(f"job section, trimmed to 4 KiB:                 {s * 1000:.1f} ms  ({s / b:.1f}x baseline)")
    total = j + r + s
    print(f"goal: job report under 1 s for 1,000 pods: {'met' if total < 1.0 else 'NOT met'} ({total:.3f} s)")


if __name__ == "__main__":
    main()
