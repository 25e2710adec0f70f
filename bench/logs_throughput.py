"""Lines per second on one stream: `podmortem logs -f` against `kubectl logs -f`, same emulated stream.

Runs interleaved rounds in one process tree and prints ratios, plus curl reading the
raw stream to show the emulated server is not the bottleneck.
Usage: python bench/logs_throughput.py [--quick]
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


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed, proc.stdout.count(b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200k lines, 2 rounds")
    parser.add_argument("--lines", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    ns = parser.parse_args()
    lines = ns.lines or (200_000 if ns.quick else 1_000_000)
    rounds = ns.rounds or (2 if ns.quick else 5)
    tmp = Path(tempfile.mkdtemp(prefix="podmortem-bench-"))
    kubeconfig = tmp / "kubeconfig"
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("logs_server.py")),
                               "--lines", str(lines), "--kubeconfig", str(kubeconfig)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        podmortem = [sys.executable, "-m", "podmortem.cli.main", "logs", "-f", "bench"]
        tools: dict[str, list[str]] = {
            "curl": ["curl", "-sS", f"{url}/api/v1/namespaces/default/pods/bench/log?container=main"
                     "&follow=true&timestamps=true"],
            "kubectl": ["kubectl", "logs", "-f", "bench"],
            "podmortem": podmortem,
        }
        if shutil.which("kubectl") is None:
            raise SystemExit("kubectl is not installed")
        results: dict[str, list[float]] = {name: [] for name in tools}
        for _ in range(rounds):
            for name, cmd in tools.items():
                elapsed, n = timed(cmd, env)
                if n != lines:
                    raise SystemExit(f"{name} printed {n} lines, expected {lines}")
                results[name].append(lines / elapsed)
        best = {name: max(v) for name, v in results.items()}
        med = {name: statistics.median(v) for name, v in results.items()}
        print(f"lines={lines} rounds={rounds} (interleaved; process start included)")
        for name in tools:
            print(f"  {name:10s} median {med[name] / 1e6:6.3f} M lines/s   best {best[name] / 1e6:6.3f} M lines/s")
        print(f"  podmortem / kubectl (median): {med['podmortem'] / med['kubectl']:.2f}x  (target >= 1.0x)")
        print(f"  curl time / podmortem time (median): {med['podmortem'] / med['curl']:.2f}"
              "  (server share of the follower's time)")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
