"""Benchmark: parse (and diagnose) a synthesized kernel log of 10,000 varied OOM records.

Target: at least 2,000 records/s on one core for parsing. Rates are per second of
this process's CPU time (``time.process_time``), so other work on the machine does
not count against the parser; wall-clock rates are printed too. For scale, the run
also times a bare line-splitting pass over the same text (the floor any parser
pays) and a fixed pure-Python calibration loop (about 0.45 s on an idle, current
x86 core), to tell a slow machine from a slow parser.

    python bench/diagnose.py [--records N] [--seed S]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from podmortem.diagnosis import diagnose
from podmortem.kernel import oom_parser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the records come from the tests
from tests.kernel import synthetic

TARGET_RECORDS_PER_S = 2000.0


def synthesize(count: int, seed: int) -> tuple[str, int]:
    """``count`` varied records in every format, with unrelated lines between them."""
    rng = random.Random(seed)
    noise = ["[ 1.0] eth0: link up", "[ 2.0] EXT4-fs (sda1): re-mounted", "audit: type=1400 apparmor=STATUS"]
    lines: list[str] = []
    for i in range(count):
        kill = synthetic.random_kill(rng)
        fmt = synthetic.FORMATS[i % len(synthetic.FORMATS)]
        lines.extend(synthetic.render(kill, fmt, t0=1000.0 + i * 60, seq0=i * 200))
        lines.extend(rng.sample(noise, 2))
    return "\n".join(lines) + "\n", len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    text, line_count = synthesize(args.records, args.seed)
    print(f"synthesized {args.records} records, {line_count} lines, {len(text) / 2**20:.1f} MiB")

    t0 = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i
    calibration_s = time.process_time() - t0

    t0 = time.process_time()
    for _ in text.splitlines():
        pass
    floor_s = time.process_time() - t0

    w0, t0 = time.perf_counter(), time.process_time()
    records = oom_parser.parse_text(text)
    parse_s, parse_wall = time.process_time() - t0, time.perf_counter() - w0
    if len(records) != args.records:
        raise SystemExit(f"parsed {len(records)} records, expected {args.records}")
    partial = sum(r.partial for r in records)

    t0 = time.process_time()
    for record in records:
        diagnose(record)
    diagnose_s = time.process_time() - t0

    rate = len(records) / parse_s
    print(
        f"calibration:      10M-add loop took {calibration_s:.2f} s CPU "
        "(about 0.45 s on an idle current core)"
    )
    print(f"line split only:  {line_count / floor_s:12,.0f} lines/s (floor, same text)")
    print(
        f"parse:            {rate:12,.0f} records/s CPU  ({line_count / parse_s:,.0f} lines/s, "
        f"{parse_s:.2f} s CPU, {parse_wall:.2f} s wall = {len(records) / parse_wall:,.0f} records/s wall; "
        f"{partial} partial)"
    )
    print(f"parse + diagnose: {len(records) / (parse_s + diagnose_s):12,.0f} records/s CPU")
    print(
        f"target {TARGET_RECORDS_PER_S:,.0f} records/s on one core: ratio {rate / TARGET_RECORDS_PER_S:.2f}x "
        f"-> {'PASS' if rate >= TARGET_RECORDS_PER_S else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
