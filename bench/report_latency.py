"""Benchmark: termination-to-report latency, and the operator's memory with 1,000 followed pods.

Runs the real operator (kopf, the follower, the store) against the emulated
cluster of the end-to-end tests (kmock + emulated kubelet + an agent evidence
server with a real kernel record), each on its own thread.

* Latency: for N TrainingJob-less annotated pods, the time from the status PATCH
  that says "exit 137, OOMKilled" to the ``podmortem.io/failure-report``
  annotation being visible, measured from outside the operator (so it includes
  the watch event delivery); plus the operator's own measure (from seeing the
  termination to the report written). Target: < 2 s without Prometheus.
* Memory: the emulated cluster with P Running annotated pods runs in a process of
  its own (bench/_operator_cluster.py); this process runs only the operator. RSS
  before kopf starts, and once all P pods are followed.

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

from podmortem.demo.harness import Harness, evidence_for, harness, kill, run_pod
from podmortem.demo.threads import OperatorThread, wait_for
from podmortem.kernel import oom_parser

RECORD = Path("/work/shared/data/oom-records/01-k3s-v1-dmesgT-stress-4.15.log")


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


def memory(pods: int) -> None:
    """Operator RSS with ``pods`` followed pods; the cluster lives in a subprocess."""
    import subprocess

    from podmortem.control.settings import AgentSettings, OperatorSettings

    cluster = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve().parent / "_operator_cluster.py"), str(pods)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert cluster.stdout is not None
        url = cluster.stdout.readline().strip()
        if not url:
            raise RuntimeError("the emulated cluster did not start")
        with tempfile.TemporaryDirectory() as tmp:
            gc.collect()
            base = rss_bytes()
            settings = OperatorSettings(
                agent=AgentSettings(enabled=False), store_dir=Path(tmp) / "store", listen_host="127.0.0.1",
                metrics_port=0, health_port=0, log_http_port=0, log_http_auth=False, foreign_kinds=(),
            )
            operator = OperatorThread(url=url, settings=settings)
            started = time.monotonic()
            following = operator.start(timeout=60).service.following
            assert following is not None
            wait_for(lambda: len(following) >= pods or None, what="all follows", timeout=900, poll_s=0.1)
            took = time.monotonic() - started
            wait_for(lambda: sum((following.facts(u) or _NoFacts).lines  # type: ignore[attr-defined]
                                 for u in list(following._tasks)) >= 20 * pods or None,
                     what="every pod's first lines stored", timeout=900, poll_s=0.1)
            time.sleep(2.0)
            gc.collect()
            after = rss_bytes()
            print(f"followed pods: {len(following)} (all following after {took:.1f} s); operator RSS "
                  f"before kopf {base / 2**20:.1f} MiB, with them {after / 2**20:.1f} MiB; "
                  f"{(after - base) / pods / 1024:.1f} KiB per followed pod")
            operator.stop()
    finally:
        if cluster.stdin is not None:
            cluster.stdin.close()
        cluster.wait(30)


class _NoFacts:
    lines = 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20, help="pods killed one after another (latency)")
    parser.add_argument("--pods", type=int, default=1000, help="idle pods followed at once (memory)")
    args = parser.parse_args()
    if args.kills:
        latency(args.kills)
    if args.pods:
        memory(args.pods)
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
