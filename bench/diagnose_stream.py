"""Benchmark: `podmortem diagnose` streams a 1 GiB kernel log in bounded memory.

Writes a kernel log of ``--mib`` MiB (default 1024) to a temporary file: ordinary kernel lines
(the kind a node prints between OOMs), with one synthesized OOM record (``tests/kernel/synthetic.py``,
every print format in turn) every ``--every-mib`` MiB. Then runs the installed CLI on it as a
user would, ``podmortem diagnose --json FILE``, as a subprocess, and the same on a file of the
first 16 MiB of it: the baseline, in the same run. Printed: each run's peak RSS (``ru_maxrss`` of
the child), its time and throughput, the number of reports, and the ratio of the peak RSS of the
big file to the baseline's. Goal: that ratio under 1.5 (memory does not follow the input's size).

    python bench/diagnose_stream.py [--mib 1024] [--every-mib 8] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the records come from the tests
from tests.kernel import synthetic

REPO = Path(__file__).resolve().parent.parent
NOISE = [
    "[{t:12.6f}] eth0: renamed from veth{n:x}",
    "[{t:12.6f}] IPv6: ADDRCONF(NETDEV_CHANGE): cali{n:x}: link becomes ready",
    "[{t:12.6f}] EXT4-fs (nvme0n1p{p}): mounted filesystem with ordered data mode. Quota mode: none.",
    "[{t:12.6f}] audit: type=1400 audit({t:.3f}:{n}): apparmor=\"STATUS\" operation=\"profile_load\"",
    "[{t:12.6f}] cni0: port {p}(veth{n:x}) entered forwarding state",
    "[{t:12.6f}] overlayfs: upperdir is in-use as upperdir/workdir of another mount, accessing files "
    "from both mounts will result in undefined behavior.",
]


def cli() -> list[str]:
    venv = REPO / ".venv" / "bin" / "podmortem"
    return [str(venv)] if venv.exists() else [sys.executable, "-m", "podmortem.cli.main"]


def write_log(path: Path, mib: int, every_mib: int, seed: int = 7) -> int:
    """Write the log; return how many OOM records it holds."""
    rng = random.Random(seed)
    target, every = mib << 20, every_mib << 20
    written = next_record = records = 0
    t = 1000.0
    with path.open("w", encoding="utf-8") as out:
        while written < target:
            chunk: list[str] = []
            for _ in range(2000):
                t += rng.random() / 100
                line = rng.choice(NOISE).format(t=t, n=rng.getrandbits(32), p=rng.randrange(1, 9))
                chunk.append(line)
            if written >= next_record:
                kill = synthetic.random_kill(rng)
                fmt = synthetic.FORMATS[records % len(synthetic.FORMATS)]
                chunk.extend(synthetic.render(kill, fmt, t0=t, seq0=records * 200))
                records += 1
                next_record += every
            text = "\n".join(chunk) + "\n"
            out.write(text)
            written += len(text)
    return records


def run(path: Path) -> tuple[float, float, int]:
    """(seconds, peak RSS in MiB, reports) of one ``diagnose --json`` run on ``path``."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([*cli(), "diagnose", "--json", str(path)], stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS, not the largest so far
        proc.returncode = os.waitstatus_to_exitcode(status)
        took = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode not in (0, 3):
        raise SystemExit(f"diagnose exit {proc.returncode}: {stderr.decode()[-500:]}")
    reports = len(json.loads(stdout)["reports"]) if proc.returncode == 0 else 0
    return took, usage.ru_maxrss / 1024, reports


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=1024, help="size of the big log (default 1024)")
    parser.add_argument("--every-mib", type=int, default=8, help="one OOM record every N MiB (default 8)")
    parser.add_argument("--dir", default=None, help="where to write the logs (default: temporary)")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=ns.dir) as tmp:
        small, big = Path(tmp) / "small.log", Path(tmp) / "big.log"
        small_records = write_log(small, 16, ns.every_mib)
        t0 = time.monotonic()
        big_records = write_log(big, ns.mib, ns.every_mib)
        print(f"wrote {ns.mib} MiB with {big_records} OOM records in {time.monotonic() - t0:.0f} s; "
              f"baseline 16 MiB with {small_records}")
        s_took, s_rss, s_reports = run(small)
        print(f"baseline 16 MiB: {s_took:.1f} s, peak RSS {s_rss:.0f} MiB, {s_reports} reports")
        b_took, b_rss, b_reports = run(big)
        size = os.path.getsize(big) / 2**20
        print(f"{size:.0f} MiB: {b_took:.1f} s ({size / b_took:.1f} MiB/s), peak RSS {b_rss:.0f} MiB, "
              f"{b_reports} reports (of {big_records} written)")
        ratio = b_rss / s_rss
        print(f"peak RSS {size:.0f} MiB / 16 MiB = {ratio:.2f}x (goal < 1.5x)  goal met: "
              f"{'yes' if ratio < 1.5 else 'no'}")


if __name__ == "__main__":
    main()
