"""Benchmark: termination-to-report latency, and the operator's memory with 1,000 followed pods.

Runs the real operator (kopf, the follower, the store) against the emulated
cluster of the end-to-end tests (kmock + emulated kubelet + an agent evidence
server with a real kernel record), each on its own thread.

* Latency: for N TrainingJob-less annotated pods, the time from the status PATCH
  that says "exit 137, OOMKilled" to the ``podmortem.io/failure-report``
  annotation being visible, measured from outside the operator (so it includes
  the watch event delivery); plus the operator's own measure (from seeing the
  termination to the report written). Target: < 2 s without Prometheus.
* Memory: process RSS before and after the operator follows P idle pods. The
  emulated API server shares the process, so the per-pod figure is an upper bound.

Usage: python bench/report_latency.py [--kills 20] [--pods 1000]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.handlers.harness import Harness, harness
from tests.handlers.test_operator_e2e import evidence_for, kill, run_pod


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20, help="pods killed one after another (latency)")
    parser.add_argument("--pods", type=int, default=1000, help="idle pods followed at once (memory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, harness(Path(tmp)) as h:
        h.add_agent_pod()
        h.start_operator(h.settings())
        outside: list[float] = []
        for i in range(args.kills):
            name = f"victim-{i}"
            annotated_pod(h, name)
            uid = run_pod(h, name=name, namespace="bench")
            h.sync(lambda name=name: h.api.pods["bench", name].containers["trainer"].write(100))
            h.sync(lambda uid=uid: h.agent.evidence.__setitem__(
                uid, evidence_for(uid, "01-k3s-v1-dmesgT-stress-4.15.log")))
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

        gc.collect()
        following = h.running[0].service.following
        assert following is not None
        before_pods = len(following)
        base = rss_bytes()
        for i in range(args.pods):
            annotated_pod(h, f"idle-{i}")
        for i in range(args.pods):
            run_pod(h, name=f"idle-{i}", namespace="bench")
        # The pods exist, the follows start as their Running events arrive.
        h.wait(lambda: len(following) - before_pods >= args.pods or None, what="all follows", timeout=600)
        time.sleep(2.0)
        gc.collect()
        after = rss_bytes()
        per_pod = (after - base) / args.pods / 1024
        print(f"followed pods: {len(following)}; RSS before follows {base / 2**20:.1f} MiB, "
              f"after {after / 2**20:.1f} MiB; delta per followed pod {per_pod:.1f} KiB")
        print("(an upper bound: the emulated API server, its pod objects and its open log streams "
              "share this process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
