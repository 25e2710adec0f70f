"""Lines per second on one stream: `podmortem logs -f` against `kubectl logs -f`, same emulated stream.

One emulated pod (bench/logs_server.py, its own process) holds a finished log
of N short lines. Each round runs, one after the other: curl reading the raw
``timestamps=true`` stream (the server's own cost), `kubectl logs -f`,
`podmortem logs -f` to stdout, and `podmortem logs -f --store DIR` (a fresh
store each round, default fsync policy); then both tools with ``--timestamps``.
kubectl asks for ``timestamps=false``, so the emulated server strips the stamps
for it (in Python): "curl (as kubectl)" shows what that costs the server. Rounds are interleaved, so load from
other processes hits every tool alike; medians and their ratios are printed.
Process start-up is included for every tool, as a user sees it. Output goes
to a file (``> train.log``), or with ``--pipe`` to a pipe this script reads.

Usage: python bench/logs_throughput.py [--quick] [--lines N] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], env: dict[str, str], out: Path | None) -> tuple[float, int]:
    """Run to completion with stdout to a file (``> train.log``) or, if ``out`` is None, a pipe."""
    if out is None:
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, env=env, check=False)
        elapsed = time.perf_counter() - started
        data, err = proc.stdout, proc.stderr
    else:
        with out.open("wb") as f:
            started = time.perf_counter()
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, env=env, check=False)
            elapsed = time.perf_counter() - started
        data, err = out.read_bytes(), proc.stderr
        out.unlink()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {err.decode()[-500:]}")
    return elapsed, data.count(b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200k lines, 3 rounds")
    parser.add_argument("--lines", type=int, default=None, help="lines in the log (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7)")
    parser.add_argument("--pipe", action="store_true",
                        help="stdout to a pipe read by this script (default: to a file, like `> train.log`)")
    ns = parser.parse_args()
    lines = ns.lines or (200_000 if ns.quick else 1_000_000)
    rounds = ns.rounds or (3 if ns.quick else 7)
    if shutil.which("kubectl") is None:
        raise SystemExit("kubectl is not installed")
    tmp = Path(tempfile.mkdtemp(prefix="podmortem-bench-"))
    kubeconfig = tmp / "kubeconfig"
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("logs_server.py")),
                               "--lines", str(lines), "--kubeconfig", str(kubeconfig)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url:
            raise SystemExit("the emulated server did not start")
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        podmortem = [sys.executable, "-m", "podmortem.cli.main", "logs", "-f", "bench"]
        log_url = f"{url}/api/v1/namespaces/default/pods/bench/log?container=main&follow=true"
        tools: dict[str, list[str]] = {
            # What podmortem asks for, and what kubectl asks for (the server strips the stamps).
            "curl": ["curl", "-sS", log_url + "&timestamps=true"],
            "curl (as kubectl)": ["curl", "-sS", log_url],
            "kubectl": ["kubectl", "logs", "-f", "bench"],
            "podmortem": podmortem,
            "podmortem --store": [*podmortem, "--store", str(tmp / "store")],
            # Both keep the stamps: the server only copies bytes for either.
            "kubectl --timestamps": ["kubectl", "logs", "-f", "--timestamps", "bench"],
            "podmortem --timestamps": [*podmortem, "--timestamps"],
        }
        results: dict[str, list[float]] = {name: [] for name in tools}
        for _ in range(rounds):
            for name, cmd in tools.items():
                shutil.rmtree(tmp / "store", ignore_errors=True)
                elapsed, n = timed(cmd, env, None if ns.pipe else tmp / "out.log")
                if n != lines:
                    raise SystemExit(f"{name} printed {n} lines, expected {lines}")
                results[name].append(elapsed)
        med = {name: statistics.median(v) for name, v in results.items()}
        print(f"lines={lines:,} rounds={rounds} stdout to {'a pipe' if ns.pipe else 'a file'}"
              " (interleaved; process start-up included; medians)")
        for name in tools:
            print(f"  {name:24s} {med[name]:6.3f} s  {lines / med[name] / 1e6:6.3f} M lines/s"
                  f"   (best {lines / min(results[name]) / 1e6:.3f})")
        kubectl = med["kubectl"]
        print(f"  podmortem / kubectl:         {kubectl / med['podmortem']:.2f}x  (target >= 1.0x)")
        print(f"  podmortem --store / kubectl: {kubectl / med['podmortem --store']:.2f}x  (target >= 0.7x)")
        print(f"  podmortem / kubectl, both --timestamps: "
              f"{med['kubectl --timestamps'] / med['podmortem --timestamps']:.2f}x")
        print(f"  server's share: curl / podmortem time {med['curl'] / med['podmortem']:.2f}; "
              f"curl (as kubectl) / kubectl time {med['curl (as kubectl)'] / kubectl:.2f}")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
