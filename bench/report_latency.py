"""Benchmark: termination-to-report latency, and the operator's memory with 1,000 followed pods.

Runs the real operator (kopf, the follower, the store) against the emulated
cluster of the end-to-end tests (kmock + emulated kubelet + an agent evidence
server with a real kernel record), each on its own thread.

* Latency: for N TrainingJob-less annotated pods, the time from the status PATCH
  that says "exit 137, OOMKilled" to the ``podmortem.io/failure-report``
  annotation being visible, measured from outside the operator (so it includes
  the watch event delivery); plus the operator's own measure (from seeing the
  termination to the report written). Target: < 2 s without Prometheus.
* Memory and idle CPU with P followed pods: runs bench/operator_scale.py (see
  there; the emulated cluster is seeded with P Running annotated pods in its own
  process, the operator runs alone in another).

Usage: python bench/report_latency.py [--kills 20] [--pods 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from podmortem.kernel import oom_parser
from podmortem_demo.harness import Harness, evidence_for, harness, kill, run_pod

RECORD = Path(__file__).resolve().parents[1] / "tests/fixtures/oom-records/01-k3s-v1-dmesgT-stress-4.15.log"


def annotated_pod(h: Harness, name: str) -> None:
    h.create("/api/v1/namespaces/bench/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "annotations": {"podmortem.io/watch": "true"}},
        "spec": {"containers": [{"name": "trainer", "image": "x"}]},
    })


def annotation(h: Harness, name: str) -> str | None:
    obj = h.stored("v1/pods", "bench", name) or {}
    value = obj.get("metadata", {}).get("annotations", {}).get("podmortem.io/failure-report")
    return str(value) if value else None


def memory(pods: int) -> int:
    """Operator memory and idle CPU with ``pods`` followed pods: bench/operator_scale.py, in a fresh process
    (this one holds the latency run's cluster and operator)."""
    import subprocess

    scale = Path(__file__).resolve().parent / "operator_scale.py"
    return subprocess.run([sys.executable, str(scale), "--pods", str(pods)], check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20, help="pods killed one after another (latency)")
    parser.add_argument("--pods", type=int, default=1000,
                        help="idle pods followed at once (memory, idle CPU; 0: skip)")
    args = parser.parse_args()
    if args.kills:
        latency(args.kills)
    if args.pods:
        return memory(args.pods)
    return 0


def latency(kills: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, harness(Path(tmp)) as h:
        h.add_agent_pod()
        h.start_operator(h.settings())
        record = oom_parser.parse_text(RECORD.read_text())[0]
        outside: list[float] = []
        for i in range(kills):
            name = f"victim-{i}"
            annotated_pod(h, name)
            uid = run_pod(h, name=name, namespace="bench")
            h.sync(lambda name=name: h.api.pods["bench", name].containers["trainer"].write(100))
            h.sync(lambda uid=uid: h.agent.evidence.__setitem__(uid, evidence_for(uid, record)))
            started = time.monotonic()
            kill(h, name=name, namespace="bench")
            h.wait(lambda name=name: annotation(h, name), what=f"report of {name}", timeout=30)
            outside.append(time.monotonic() - started)
        inside = [o.latency_s for o in h.running[0].service.reporter.outcomes]
        print(f"reports: {len(outside)} (Prometheus off, agent evidence with a real kernel record)")
        print(f"termination -> report visible (outside, incl. watch delivery): "
              f"median {statistics.median(outside):.3f} s, max {max(outside):.3f} s")
        print(f"termination seen -> report written (operator's histogram):   "
              f"median {statistics.median(inside):.3f} s, max {max(inside):.3f} s  (target < 2 s)")



if __name__ == "__main__":
    sys.exit(main())
