"""An emulated cluster of many pods, run as a process of its own (``python -m podmortem_demo.scale_cluster``).

For the operator's scale benchmark and its tests at scale: the operator's process
holds only the operator; kmock, the emulated kubelet and the P pods' logs live
here, and their CPU is not counted as the operator's.

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
``{"url": ..., "uids": [...], "names": [...], "seed_s": ...}``; then one JSON line
answered per command line read from stdin; EOF stops it. Commands:

* ``stats``: this process's CPU seconds so far and the requests served, by kind;
* ``{"cmd": "terminate", "pods": [NAME, ...], "exit_code": 137, "reason": "OOMKilled"}``:
  those pods' containers end (their log streams end), and the stored pods show it,
  with a MODIFIED watch event each, as the kubelet's status update would;
* ``{"cmd": "delete", "pods": [NAME, ...]}``: those pods are gone (404, DELETED event);
* ``{"cmd": "lines", "pods": [NAME, ...], "n": N}``: each of those pods writes N lines now.

Usage: python -m podmortem_demo.scale_cluster PODS [--initial-lines N] [--line-every S]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import time
from typing import Any

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
            pod = pods[i % len(pods)]
            container = pod.containers["trainer"]
            if not pod.deleted and container.current.exit_code is None:
                container.write(1)
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


class ScaleCluster:
    """This module run as a process of its own: its URL, pods and commands (from a bench or a test)."""

    def __init__(self, pods: int, *, initial_lines: int = 20, line_every: float = 10.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "podmortem_demo.scale_cluster", str(pods),
             "--initial-lines", str(initial_lines), "--line-every", str(line_every)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise RuntimeError(f"the emulated cluster did not start (exit {self.proc.returncode})")
        info = json.loads(line)
        self.url: str = info["url"]
        self.uids: list[str] = info["uids"]
        self.names: list[str] = info["names"]
        self.seed_s: float = info["seed_s"]

    def ask(self, command: str | dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((command if isinstance(command, str) else json.dumps(command)) + "\n")
        self.proc.stdin.flush()
        reply: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return reply

    def stats(self) -> tuple[float, dict[str, int]]:
        """The cluster process's CPU seconds so far, and the API requests it served, by kind."""
        reply = self.ask("stats")
        return float(reply["cpu_s"]), dict(reply["requests"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> ScaleCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: kmock serves watch events from a bus per resource, fed by its own request handling; objects written
#: straight into its store (see `seed`) announce their changes on that same bus here.
PODS = kmock.resource("", "v1", "pods")


async def publish(api: PodLogsApi, kind: str, obj: dict[str, Any]) -> None:
    await api._buses[PODS].put({"type": kind, "object": obj})


async def terminate(api: PodLogsApi, names: list[str], *, exit_code: int, reason: str) -> int:
    """End these pods' containers; the stored pods show it (with ``reason``), one event each."""
    done = 0
    for name in names:
        pod = api.pods.get((NAMESPACE, name))
        key = ("v1/pods", NAMESPACE, name)
        if pod is None or key not in api.objects:
            continue
        for container in pod.containers.values():
            container.terminate(exit_code)
        obj = dict(api.objects[key])
        status = pod.to_json()["status"]
        for cs in status["containerStatuses"]:
            terminated = cs["state"].get("terminated")
            if terminated is not None:
                terminated["reason"] = reason
                terminated["finishedAt"] = kubelet_mod._rfc3339(pod.clock.now_ns)
        obj["status"] = status
        obj["metadata"] = {**obj["metadata"], "resourceVersion": pod.resource_version}
        api.objects[key] = obj
        await publish(api, "MODIFIED", api.objects[key].raw)
        done += 1
    return done


async def delete(api: PodLogsApi, names: list[str]) -> int:
    done = 0
    for name in names:
        pod = api.pods.get((NAMESPACE, name))
        key = ("v1/pods", NAMESPACE, name)
        if pod is not None:
            pod.delete()
        if key in api.objects:
            raw = api.objects[key].raw
            del api.objects[key]
            await publish(api, "DELETED", raw)
            done += 1
    return done


async def command(api: PodLogsApi, line: str) -> dict[str, Any]:
    if line.strip() == "stats":
        return {"cpu_s": cpu_s(), "requests": request_counts(api)}
    cmd = json.loads(line)
    names = [str(n) for n in cmd.get("pods", ())]
    if cmd["cmd"] == "terminate":
        return {"done": await terminate(api, names, exit_code=int(cmd.get("exit_code", 137)),
                                        reason=str(cmd.get("reason", "OOMKilled")))}
    if cmd["cmd"] == "delete":
        return {"done": await delete(api, names)}
    if cmd["cmd"] == "lines":
        for name in names:
            pod = api.pods.get((NAMESPACE, name))
            if pod is not None:
                for container in pod.containers.values():
                    container.write(int(cmd["n"]))
        return {"done": len(names)}
    return {"error": f"unknown command {cmd['cmd']!r}"}


async def main(args: argparse.Namespace) -> None:
    api = build_api()
    started = time.monotonic()
    uids = seed(api, pods=args.pods, initial_lines=args.initial_lines)
    seed_s = time.monotonic() - started
    async with api, kmock.Server(api) as server:
        ticker = asyncio.create_task(tick(api, every_s=args.line_every)) if args.line_every > 0 else None
        url = str(server.url).rstrip("/")
        names = [f"idle-{i}" for i in range(args.pods)]
        print(json.dumps({"url": url, "uids": uids, "names": names, "seed_s": round(seed_s, 3)}), flush=True)
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            if line.strip():
                print(json.dumps(await command(api, line)), flush=True)
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
