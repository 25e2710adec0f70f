"""Serve emulated pods with logs, for the log benchmarks (in its own process, so it is measured apart).

Default: one pod ``bench`` whose container wrote N lines and terminated (the
throughput bench), and a pod ``tiny`` whose container wrote one line and terminated (each tool's
start-up and end, with no stream to speak of). With ``--pods K --running``: pods ``bench-0..K-1``, each
with N lines and still running, so follows stay open and idle (the scale bench).
Writes a kubeconfig, prints the API URL, and serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from podmortem_demo.emulated import kubeconfig_for, running_cluster


async def serve(*, lines: int, kubeconfig: Path, pods: int, running: bool) -> None:
    async with running_cluster() as (api, url):
        names = ["bench"] if pods == 1 and not running else [f"bench-{i}" for i in range(pods)]
        for name in names:
            pod = api.add_pod(name, max_burst=16, max_step_ns=200_000)
            main = pod.containers["main"]
            step = 100_000
            for start in range(0, lines, step):
                main.write(min(step, lines - start))
            if not running:
                main.terminate(0)
        if pods == 1 and not running:
            tiny = api.add_pod("tiny", max_burst=16, max_step_ns=200_000).containers["main"]
            tiny.write(1)
            tiny.terminate(0)
        kubeconfig_for(url, kubeconfig)
        print(url, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines per container")
    parser.add_argument("--pods", type=int, default=1)
    parser.add_argument("--running", action="store_true", help="containers keep running (idle follows)")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    ns = parser.parse_args()
    asyncio.run(serve(lines=ns.lines, kubeconfig=ns.kubeconfig, pods=ns.pods, running=ns.running))
