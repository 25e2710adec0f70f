"""Serve one emulated pod with a finished log of N lines, for the log benchmarks.

Prints the API URL, writes a kubeconfig, and serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from podmortem.testing import kubeconfig_for, running_cluster


async def serve(lines: int, kubeconfig: Path) -> None:
    async with running_cluster() as (api, url):
        pod = api.add_pod("bench", max_burst=16, max_step_ns=200_000)
        main = pod.containers["main"]
        step = 100_000
        for start in range(0, lines, step):
            main.write(min(step, lines - start))
        main.terminate(0)
        kubeconfig_for(url, kubeconfig)
        print(url, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    ns = parser.parse_args()
    asyncio.run(serve(ns.lines, ns.kubeconfig))
