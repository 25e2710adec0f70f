"""The emulated cluster for the operator's scale benchmark, run as a process of its own.

So the operator's process holds only the operator: kmock, the emulated kubelet
and the P pods' logs live here, and their CPU is not counted as the operator's.

Why the pods are seeded into kmock's storage, not created over HTTP: kmock 0.8
finds an object for every fetch, patch and create by scanning all stored objects
(``KubernetesEmulator.__get_objs``), so a POST and a PATCH per pod cost O(P) each
and O(P^2) in all; at 1,000 pods that took minutes. A real apiserver does not
work that way, and the operator's startup is what is measured, not the seeding.
Each pod is written straight into ``api.objects`` (kmock's ``ObjectsArray``,
keyed ``(resource, namespace, name)``), as the stored object the watch and list
serve: the emulated kubelet's own view of the pod (same uid, containerID,
Running status) plus the ``podmortem.io/watch`` annotation.

Each pod has written ``--initial-lines`` lines, then writes one line every
``--line-every`` seconds (staggered, so lines arrive evenly, not in bursts).

Protocol on stdin/stdout: once seeded and serving, one JSON line
``{"url": ..., "uids": [...], "seed_s": ...}``; then, for each ``stats`` line read
from stdin, one JSON line with this process's CPU seconds so far and the requests
served, by kind; EOF stops it.

Usage: python bench/_operator_cluster.py PODS [--initial-lines N] [--line-every S]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sys
import time

import kmock

import podmortem_demo.emulated.kubelet as kubelet_mod
from podmortem_demo.emulated import PodLogsApi, resources

NAMESPACE = "bench"

# The emulated kubelet wakes every follow stream each _POLL_S (20 ms) to notice a client that went
# away; with 1,000 open streams that is 50,000 wake-ups a second, a core of its own on a 2-core
# machine that the operator then competes with. Lines still wake a stream at once (an Event); only
# the "did the client leave" check slows to once a second, which nothing here depends on.
kubelet_mod._POLL_S = 1.0


def build_api() -> PodLogsApi:
    """The API with the resources the operator watches or writes (the one table every emulation uses)."""
    api = PodLogsApi()
    resources.declare(api)
    return api


def seed(api: PodLogsApi, *, pods: int, initial_lines: int) -> list[str]:
    """P Running, annotated pods: in the emulated kubelet and in kmock's store. Their uids."""
    uids = []
    for i in range(pods):
        name = f"idle-{i}"
        pod = api.add_pod(name, namespace=NAMESPACE, containers=("trainer",), seed=i)
        pod.containers["trainer"].write(initial_lines)
        obj = pod.to_json()
        obj["metadata"]["annotations"] = {"podmortem.io/watch": "true"}
        obj["spec"]["nodeName"] = "node-a"
        api.objects["v1/pods", NAMESPACE, name] = obj
        uids.append(pod.uid)
    return uids


async def tick(api: PodLogsApi, *, every_s: float) -> None:
    """Each pod writes one line every ``every_s`` seconds, spread evenly over that period."""
    pods = list(api.pods.values())
    step_s = 0.1
    per_step = max(1, round(len(pods) * step_s / every_s))
    i = 0
    while True:
        await asyncio.sleep(step_s)
        for _ in range(per_step):
            pods[i % len(pods)].containers["trainer"].write(1)
            i += 1


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def request_counts(api: PodLogsApi) -> dict[str, int]:
    """Requests served so far, by kind (kmock keeps every request it parsed)."""
    counts: collections.Counter[str] = collections.Counter()
    for request in api:
        path = request.url.path.rstrip("/")
        if path.endswith("/log"):
            kind = "pod log"
        elif request.method == "GET" and "/pods/" in path:
            kind = "pod read"
        elif request.method == "GET" and request.params.get("watch") in ("true", "1"):
            kind = "watch"
        else:
            method = getattr(request.method, "value", request.method)
            kind = f"{method} {path.split('/')[-1]}"
        counts[kind] += 1
    return dict(counts.most_common())


async def main(args: argparse.Namespace) -> None:
    api = build_api()
    started = time.monotonic()
    uids = seed(api, pods=args.pods, initial_lines=args.initial_lines)
    seed_s = time.monotonic() - started
    async with api, kmock.Server(api) as server:
        ticker = asyncio.create_task(tick(api, every_s=args.line_every)) if args.line_every > 0 else None
        url = str(server.url).rstrip("/")
        print(json.dumps({"url": url, "uids": uids, "seed_s": round(seed_s, 3)}), flush=True)
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            if line.strip() == "stats":
                print(json.dumps({"cpu_s": cpu_s(), "requests": request_counts(api)}), flush=True)
        if ticker is not None:
            ticker.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("pods", type=int, help="annotated Running pods to seed")
    parser.add_argument("--initial-lines", type=int, default=20,
                        help="lines each pod has written at the start")
    parser.add_argument("--line-every", type=float, default=10.0,
                        help="seconds between two lines of one pod afterwards (0: silent)")
    asyncio.run(main(parser.parse_args()))
