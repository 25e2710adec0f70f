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
* ``{"cmd": "lines", "pods": [NAME, ...], "n": N}``: each of those pods writes N lines now;
* ``{"cmd": "create", "jobs": {JOB: N, ...}, "initial_lines": N}``: N new annotated Running pods per
  job (``JOB-0`` ... ``JOB-{N-1}``, label ``podmortem.io/soak-job: JOB``), seeded into the store with
  an ADDED watch event each; answers their ``names`` and ``uids``;
* ``{"cmd": "restart", "pods": [NAME, ...], "exit_code": 1, "reason": "Error", "new_lines": N}``:
  those pods' containers end with that exit and start again (new containerID, restartCount + 1,
  ``lastState.terminated`` with ``reason``), with a MODIFIED watch event each;
* ``reports``: the report latencies measured since the last ``reports`` (seconds from a
  ``terminate``/``restart`` that deserves a report to the operator's PATCH that writes the
  ``podmortem.io/failure-report`` annotation naming that containerID) and how many are still awaited;
* ``purge``: forget what kmock kept of past requests (counts stay in ``stats``) and hard-delete the
  stored Events, so that kmock's per-request scans and memory do not grow with the run.

Deleted pods are hard-deleted from kmock's store (``del api.objects[key]``: no history kept), so the
emulated cluster's own cost follows the live pods, not all the pods ever created (``bench/operator_soak.py``).

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
import zlib
from collections.abc import Iterable
from typing import Any

import aiohttp.web
import attrs
import kmock

import podmortem_demo.emulated.kubelet as kubelet_mod
from podmortem.reports.stored_report import ANNOTATION
from podmortem_demo.emulated import PodLogsApi, resources

NAMESPACE = "bench"

#: The label that groups the pods of one emulated job (``create``).
JOB_LABEL = "podmortem.io/soak-job"
#: Requests kmock keeps once it has more than twice as many (`forget_requests`): the requests still
#: being handled are among the last few, and each request's cost is O(kept) in kmock.
KEEP_REQUESTS = 8

# The emulated kubelet wakes every follow stream each _POLL_S (20 ms) to notice a client that went
# away; with 1,000 open streams that is 50,000 wake-ups a second, a core of its own on a 2-core
# machine that the operator then competes with. Lines still wake a stream at once (an Event); only
# the "did the client leave" check slows to once a second, which nothing here depends on.
kubelet_mod._POLL_S = 1.0


@attrs.define(kw_only=True)
class ScaleApi(PodLogsApi):
    """The emulated API, noting when the operator's report for an awaited termination arrives."""

    #: Terminations awaiting a report: pod name -> {containerID hex: monotonic time of the termination}.
    awaited: dict[str, dict[str, float]] = attrs.field(factory=dict, init=False)
    #: Seconds from termination to report PATCH, since the last ``reports`` command.
    latencies: list[float] = attrs.field(factory=list, init=False)
    #: Whether posted Events are stored (False: answered 201 and dropped; see `_handle`).
    keep_events: bool = attrs.field(default=False)
    #: Requests served and already forgotten by ``purge``, by kind.
    purged_counts: collections.Counter[str] = attrs.field(factory=collections.Counter, init=False)

    def await_report(self, name: str, container_id: str) -> None:
        self.awaited.setdefault(name, {})[container_id.rsplit("/", 1)[-1]] = time.monotonic()

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if len(self._requests) > 2 * KEEP_REQUESTS:
            forget_requests(self, keep=KEEP_REQUESTS)
        res = request.resource
        if request.method == "POST" and res is not None and res.plural == "events" and not self.keep_events:
            # Answered as created, not stored: kmock scans every stored object for each request, and
            # a wave's thousands of report Events would make every later request slower.
            return aiohttp.web.json_response(request.data, status=201)
        if (self.awaited and request.method == "PATCH" and res is not None and res.plural == "pods"
                and request.name is not None and request.name in self.awaited):
            text = _annotation(request.data)
            if text is not None:
                now = time.monotonic()
                pending = self.awaited[request.name]
                for cid in [c for c in pending if c in text]:
                    self.latencies.append(now - pending.pop(cid))
                if not pending:
                    del self.awaited[request.name]
        return await super()._handle(request)


def _annotation(data: Any) -> str | None:
    try:
        value = data["metadata"]["annotations"][ANNOTATION]
    except (KeyError, TypeError):
        return None
    return value if isinstance(value, str) else None


def build_api() -> ScaleApi:
    """The API with the resources the operator watches or writes (the one table every emulation uses)."""
    api = ScaleApi()
    resources.declare(api)
    return api


def seed(api: PodLogsApi, *, pods: int, initial_lines: int) -> list[str]:
    """P Running, annotated pods: in the emulated kubelet and in kmock's store. Their uids."""
    return [_new_pod(api, f"idle-{i}", seed=i, initial_lines=initial_lines)[0] for i in range(pods)]


def _new_pod(api: PodLogsApi, name: str, *, seed: int, initial_lines: int,
             labels: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    """A Running, annotated pod in the emulated kubelet and in kmock's store: its uid and stored object."""
    pod = api.add_pod(name, namespace=NAMESPACE, containers=("trainer",), seed=seed)
    pod.containers["trainer"].write(initial_lines)
    obj = pod.to_json()
    obj["metadata"]["annotations"] = {"podmortem.io/watch": "true"}
    if labels:
        obj["metadata"]["labels"] = dict(labels)
    obj["spec"]["nodeName"] = "node-a"
    api.objects["v1/pods", NAMESPACE, name] = obj
    return pod.uid, api.objects["v1/pods", NAMESPACE, name].raw


async def tick(api: PodLogsApi, *, every_s: float) -> None:
    """Each live pod writes one line every ``every_s`` seconds, spread evenly over that period.

    The pods are those alive at the start of each pass over them (pods come and go: ``create``)."""
    step_s = 0.1
    pods: list[kubelet_mod.Pod] = []
    per_step = 1
    i = 0
    while True:
        await asyncio.sleep(step_s)
        for _ in range(per_step):
            if i >= len(pods):
                pods, i = list(api.pods.values()), 0
                per_step = max(1, round(len(pods) * step_s / every_s))
                if not pods:
                    break
            pod = pods[i]
            container = pod.containers["trainer"]
            if not pod.deleted and container.current.exit_code is None:
                container.write(1)
            i += 1


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def request_counts(api: PodLogsApi) -> dict[str, int]:
    """Requests served so far, by kind (kmock keeps every request it parsed, until ``purge``)."""
    counts: collections.Counter[str] = collections.Counter()
    if isinstance(api, ScaleApi):
        counts.update(api.purged_counts)
    counts.update(_kinds(api))
    return dict(counts.most_common())


def _kinds(requests: Iterable[kmock.Request]) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for request in requests:
        path = request.url.path.rstrip("/")
        if path.endswith("/log"):
            kind = "pod log"
        elif request.method == "GET" and "/pods/" in path:
            kind = "pod read"
        elif request.method == "GET" and request.params.get("watch") in ("true", "1"):
            kind = "watch"
        elif request.method == "PATCH" and "/pods/" in path:
            kind = "pod patch"
        else:
            method = getattr(request.method, "value", request.method)
            kind = f"{method} {path.split('/')[-1]}"
        counts[kind] += 1
    return counts


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

    def create(self, jobs: dict[str, int], *, initial_lines: int = 20) -> tuple[list[str], list[str]]:
        """New annotated Running pods, N per job (``JOB-i``, labelled with the job): names, uids."""
        reply = self.ask({"cmd": "create", "jobs": jobs, "initial_lines": initial_lines})
        return list(reply["names"]), list(reply["uids"])

    def restart(self, pods: list[str], *, exit_code: int, reason: str, new_lines: int = 0) -> int:
        """These pods' containers end (``exit_code``, ``reason``) and start again; how many did."""
        reply = self.ask({"cmd": "restart", "pods": pods, "exit_code": exit_code, "reason": reason,
                          "new_lines": new_lines})
        return int(reply["done"])

    def terminate(self, pods: list[str], *, exit_code: int, reason: str) -> int:
        reply = self.ask({"cmd": "terminate", "pods": pods, "exit_code": exit_code, "reason": reason})
        return int(reply["done"])

    def delete(self, pods: list[str]) -> int:
        return int(self.ask({"cmd": "delete", "pods": pods})["done"])

    def reports(self) -> tuple[list[float], int]:
        """Report latencies (s) measured since the last call, and the reports still awaited."""
        reply = self.ask("reports")
        return [float(x) for x in reply["latencies"]], int(reply["awaited"])

    def purge(self) -> dict[str, int]:
        """Forget kmock's past requests and the stored Events; what was dropped and what is stored."""
        return {k: int(v) for k, v in self.ask("purge").items()}

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


def _reportable(exit_code: int, reason: str) -> bool:
    """Whether the operator reports such an end (`podmortem.diagnosis.termination.find`)."""
    return exit_code != 0 or reason == "OOMKilled"


async def terminate(api: PodLogsApi, names: list[str], *, exit_code: int, reason: str) -> int:
    """End these pods' containers; the stored pods show it (with ``reason``), one event each."""
    return await _end(api, names, exit_code=exit_code, reason=reason, restart=False, new_lines=0)


async def restart(api: PodLogsApi, names: list[str], *, exit_code: int, reason: str, new_lines: int) -> int:
    """These pods' containers end and start again; the stored pods show the last end, one event each."""
    return await _end(api, names, exit_code=exit_code, reason=reason, restart=True, new_lines=new_lines)


async def _end(api: PodLogsApi, names: list[str], *, exit_code: int, reason: str, restart: bool,
               new_lines: int) -> int:
    done = 0
    for name in names:
        pod = api.pods.get((NAMESPACE, name))
        key = (PODS, NAMESPACE, name)  # a resource, not "v1/pods": kmock's `in` does not parse strings
        if pod is None or key not in api.objects:
            continue
        ended: list[str] = []
        for container in pod.containers.values():
            if container.current.exit_code is not None:
                continue
            ended.append(container.current.container_id)
            started_at = container.current.started_at
            if restart:
                container.restart(exit_code=exit_code, new_lines=new_lines)
            else:
                container.terminate(exit_code)
        if not ended:
            continue
        finished_at = kubelet_mod._rfc3339(pod.clock.now_ns)
        obj = dict(api.objects[key].raw)  # plain dicts: the view's items are views, not JSON
        status = pod.to_json()["status"]
        for cs in status["containerStatuses"]:
            for terminated in (cs["state"].get("terminated"), (cs.get("lastState") or {}).get("terminated")):
                if terminated is not None and terminated.get("containerID") in ended:
                    terminated.update(reason=reason, startedAt=started_at, finishedAt=finished_at)
        obj["status"] = status
        obj["metadata"] = {**obj["metadata"], "resourceVersion": pod.resource_version}
        api.objects[key] = obj
        if isinstance(api, ScaleApi) and _reportable(exit_code, reason):
            for cid in ended:
                api.await_report(name, cid)
        await publish(api, "MODIFIED", api.objects[key].raw)
        done += 1
    return done


async def create(api: PodLogsApi, jobs: dict[str, int], *, initial_lines: int) -> tuple[list[str], list[str]]:
    """N new pods per job, each announced with an ADDED event: their names and uids."""
    names, uids = [], []
    for job, n in jobs.items():
        for i in range(n):
            name = f"{job}-{i}"
            uid, raw = _new_pod(api, name, seed=zlib.crc32(name.encode()), initial_lines=initial_lines,
                                labels={JOB_LABEL: job})
            await publish(api, "ADDED", raw)
            names.append(name)
            uids.append(uid)
    return names, uids


EVENTS = kmock.resource("", "v1", "events")


def forget_requests(api: ScaleApi, *, keep: int = 0) -> int:
    """Forget all but the last ``keep`` requests kmock kept (their counts stay in ``stats``).

    kmock finds the reaction for each request by looking for that request among every request the
    reaction's filter has seen (``request in payload._source``): O(requests served so far) per request,
    quadratic over a run. The requests being handled were appended a moment ago: the last few stay.
    `ScaleApi` calls this itself as requests come in."""
    old = api._requests[:-keep] if keep else api._requests[:]
    if not old:
        return 0
    api.purged_counts.update(_kinds(old))
    del api._requests[:len(old)]
    for payload in api._payloads:
        payload._requests.clear()  # a reaction's own log: read only by tests' assertions
    return len(old)


def purge(api: ScaleApi) -> dict[str, int]:
    """Forget the requests kmock kept (but the last few) and hard-delete the stored Events."""
    forgotten = forget_requests(api, keep=KEEP_REQUESTS)
    events = [key for key in api.objects if key[0] == EVENTS]
    for key in events:
        del api.objects[key]
    return {"requests": forgotten, "events": len(events), "stored": len(api.objects)}


async def delete(api: PodLogsApi, names: list[str]) -> int:
    """These pods are gone: out of the kubelet and hard-deleted from kmock's store, one event each."""
    done = 0
    for name in names:
        if isinstance(api, ScaleApi):
            api.awaited.pop(name, None)
        pod = api.pods.get((NAMESPACE, name))
        key = (PODS, NAMESPACE, name)  # a resource, not "v1/pods": kmock's `in` does not parse strings
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
    if line.strip() == "reports" and isinstance(api, ScaleApi):
        latencies, api.latencies = api.latencies, []
        return {"latencies": [round(x, 4) for x in latencies],
                "awaited": sum(len(v) for v in api.awaited.values())}
    if line.strip() == "purge" and isinstance(api, ScaleApi):
        return purge(api)
    cmd = json.loads(line)
    names = [str(n) for n in cmd.get("pods", ())]
    if cmd["cmd"] == "terminate":
        return {"done": await terminate(api, names, exit_code=int(cmd.get("exit_code", 137)),
                                        reason=str(cmd.get("reason", "OOMKilled")))}
    if cmd["cmd"] == "delete":
        return {"done": await delete(api, names)}
    if cmd["cmd"] == "restart":
        return {"done": await restart(api, names, exit_code=int(cmd.get("exit_code", 1)),
                                      reason=str(cmd.get("reason", "Error")),
                                      new_lines=int(cmd.get("new_lines", 0)))}
    if cmd["cmd"] == "create":
        made, uids = await create(api, {str(j): int(n) for j, n in cmd["jobs"].items()},
                                  initial_lines=int(cmd.get("initial_lines", 20)))
        return {"names": made, "uids": uids}
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
