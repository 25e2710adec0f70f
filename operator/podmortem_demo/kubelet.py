"""A small kubelet: runs the emulated API's pods as real processes, in real memory cgroups.

It does for the demo what a node's kubelet and container runtime do for a
training pod, no more:

- binds unscheduled pods to its node (the scheduler's one job here) and runs
  those bound to it: the first container's ``command`` + ``args`` as a process
  (``python``/``python3`` mean this interpreter), with the container's ``env``;
- puts the process in a fresh memory cgroup whose limit is the container's
  ``resources.limits.memory`` (only the child joins it, see
  :class:`podmortem_demo.sandbox.MemoryCgroup`); without a writable cgroup, a
  :class:`~podmortem_demo.watchdog.LimitWatchdog` enforces the limit instead, and
  the container's environment says so (``PODMORTEM_DEMO_PSS_LIMIT_BYTES``);
- stamps every stdout/stderr line with the time it was read (RFC3339Nano in
  the served log) into the emulated pod log, which the follower reads through
  the API; it queues stream cuts on that log, so the follower has to reconnect;
- writes the pod status as a kubelet does: Running with a containerID, then
  terminated with the real exit code (128 + signal), and reason ``OOMKilled``
  when the cgroup's ``oom_kill`` count rose (whichever process the kernel
  chose, as containerd reports it), ``Completed`` or ``Error`` otherwise;
- when the container's main process exits, kills what is left in its cgroup,
  as the runtime does when a container's PID namespace ends.

Everything runs on the emulated API's event loop; output is read by one thread
per pipe and handed to the loop, which keeps the log's order.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import aiohttp

from podmortem import quantity
from podmortem_demo import sandbox
from podmortem_demo.cluster import DemoApi, LiveLog
from podmortem_demo.emulated import faults
from podmortem_demo.watchdog import PSS_LIMIT_ENV, LimitWatchdog

logger = logging.getLogger(__name__)

PYTHON_NAMES = frozenset({"python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"})


@dataclass(frozen=True)
class KubeletSettings:
    """What the demo kubelet needs to know; each default says why."""

    #: The node it runs pods for; pods without a node are bound to it.
    node_name: str = "demo-node"
    #: Stream cuts queued on each container log, one per log request in order: the first request
    #: ends cleanly after this many lines (plus a few bytes of the next line, so the cut falls inside
    #: a line), the next one after as many more, and so on. Like the kubelet's 4-hour cut, the
    #: stream ends while the container keeps writing; the follower must reconnect and lose nothing.
    cut_after_lines: tuple[int, ...] = (300,)
    #: Bytes of the next line sent before a cut: a partial line the follower must not deliver.
    cut_extra_bytes: int = 7
    #: Seconds between two looks at the stored pods (a kubelet's watch, coarsely).
    poll_s: float = 0.05
    #: Seconds a pod's leftover processes get after SIGKILL before the cgroup removal gives up.
    cleanup_timeout_s: float = 10.0
    #: Address the pods get as podIP/hostIP: everything in the demo listens on loopback.
    pod_ip: str = "127.0.0.1"


@dataclass
class PodRun:
    """One pod the kubelet runs, from start to its recorded end (read by the demo's runner)."""

    namespace: str
    name: str
    uid: str
    container: str
    container_id: str
    limit_bytes: int | None
    argv: list[str]
    log: LiveLog
    cgroup: sandbox.MemoryCgroup | None = None
    #: The cgroup's path as the kernel prints it in OOM records (relative to the memory hierarchy).
    cgroup_path: str | None = None
    pid: int | None = None
    started_at: str = ""
    finished_at: str = ""
    exit_code: int | None = None
    reason: str = ""
    oom_kills: int = 0
    #: The cgroup's own peak (or the watchdog's PSS peak without a cgroup), bytes.
    peak_bytes: int | None = None
    #: Set when the limit was enforced by the watchdog rather than the kernel.
    watchdog: LimitWatchdog | None = None
    cuts_injected: int = 0
    error: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def cuts_served(self) -> int:
        """Cuts a log request actually took (a queued cut nobody requested did not happen)."""
        left = sum(1 for f in self.log.container.faults if isinstance(f, faults.EofAfter))
        return self.cuts_injected - left

    @property
    def produced(self) -> list[tuple[int, bytes]]:
        return self.log.lines


@dataclass
class KubeletHooks:
    """Where the runner plugs in: the agent learns the pod's cgroup, progress shows, exits are seen."""

    #: The pod's process is about to start in its cgroup (called on the loop).
    started: Callable[[PodRun], None] | None = None
    #: One output line, as stored in the log (called on the loop).
    line: Callable[[PodRun, bytes], None] | None = None
    #: The container exited (called on the loop just before the terminated status is written). It
    #: cannot hold the status back: a node's kubelet does not wait for the kernel log either.
    exited: Callable[[PodRun], None] | None = None


def container_id(uid: str, container: str) -> str:
    return "containerd://" + hashlib.sha256(f"{uid}/{container}/0".encode()).hexdigest()


def resolve_argv(container: Mapping[str, Any]) -> list[str]:
    """The container's command line on this machine; ``python`` runs this interpreter."""
    argv = [str(a) for a in (container.get("command") or [])] + [
        str(a) for a in (container.get("args") or [])
    ]
    if not argv:
        raise ValueError(
            f"container {container.get('name')!r} has no command: the demo kubelet runs commands, not images"
        )
    if argv[0] in PYTHON_NAMES:
        argv[0] = sys.executable
    return argv


_FIELD_REF = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def container_env(
    container: Mapping[str, Any], base: Mapping[str, str], meta: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Literal values, and the downward API's label/annotation fieldRefs (a JobSet pod's index)."""
    env = dict(base)
    for item in container.get("env") or []:
        if "value" in item:
            env[str(item["name"])] = str(item["value"])
            continue
        ref = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        m = _FIELD_REF.fullmatch(str(ref))
        value = ((meta or {}).get(m.group(1)) or {}).get(m.group(2)) if m is not None else None
        if value is not None:
            env[str(item["name"])] = str(value)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def memory_limit(container: Mapping[str, Any]) -> int | None:
    value = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    return None if value is None else quantity.parse_bytes(value)


def exit_code_of(returncode: int) -> int:
    """Popen's ``-N`` for a signal is what a container runtime reports as ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode


def termination_reason(exit_code: int, *, oom_killed: bool) -> str:
    if oom_killed:
        return "OOMKilled"
    return "Completed" if exit_code == 0 else "Error"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pump(stream: IO[bytes], loop: asyncio.AbstractEventLoop, deliver: Callable[[bytes], None]) -> None:
    """Read lines from a pipe until EOF, handing each (newline removed) to the loop in order."""
    with stream:
        for raw in iter(stream.readline, b""):
            text = raw[:-1] if raw.endswith(b"\n") else raw
            loop.call_soon_threadsafe(deliver, text)


def _spawn(run: PodRun, env: Mapping[str, str], kwargs: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Start the container's process: in its cgroup (only the child joins), or as a plain child."""
    if run.cgroup is not None:
        return run.cgroup.popen(run.argv, env=env, **kwargs)
    return subprocess.Popen(run.argv, env=env, **kwargs)


class DemoKubelet:
    """Runs the pods bound to one node (an async context manager on the API's loop)."""

    def __init__(
        self,
        *,
        api: DemoApi,
        url: str,
        settings: KubeletSettings | None = None,
        cgroup_root: sandbox.CgroupRoot | None,
        memory_root: Path | None = None,
        workdir: Path,
        hooks: KubeletHooks | None = None,
        static_cgroup_path: Callable[[PodRun], str | None] | None = None,
    ) -> None:
        """``cgroup_root=None``: no memory cgroups; limits are enforced by the watchdog.
        ``memory_root``: the memory hierarchy's mount, to print cgroup paths as the kernel does.
        ``static_cgroup_path``: without cgroups, the path the agent is told for a pod."""
        self.api = api
        self.url = url
        self.settings = settings or KubeletSettings()
        self.cgroup_root = cgroup_root
        self.memory_root = (
            memory_root
            if memory_root is not None
            else (cgroup_root.path if cgroup_root is not None else None)
        )
        self.workdir = workdir
        self.hooks = hooks or KubeletHooks()
        self.static_cgroup_path = static_cgroup_path
        self.runs: dict[str, PodRun] = {}
        self._seen: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._watcher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> DemoKubelet:
        self._session = aiohttp.ClientSession()
        self._watcher = asyncio.create_task(self._watch(), name="demo-kubelet-watch")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        for proc in self._procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=self.settings.cleanup_timeout_s)
        for run in self.runs.values():
            if run.cgroup is not None:
                await asyncio.to_thread(run.cgroup.remove, timeout=self.settings.cleanup_timeout_s)
        if self._session is not None:
            await self._session.close()

    async def wait_for(self, namespace: str, name: str, *, within_s: float) -> PodRun:
        """The run of a pod, once the kubelet started it."""
        deadline = asyncio.get_running_loop().time() + within_s
        while True:
            for run in self.runs.values():
                if (run.namespace, run.name) == (namespace, name):
                    return run
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"the kubelet did not start pod {namespace}/{name} within {within_s:g} s")
            await asyncio.sleep(self.settings.poll_s)

    # -- the API ---------------------------------------------------------------------------------

    async def _patch(self, path: str, body: dict[str, Any]) -> None:
        assert self._session is not None
        async with self._session.patch(
            self.url + path, data=json.dumps(body), headers={"Content-Type": "application/merge-patch+json"}
        ) as resp:
            if resp.status >= 400:
                raise RuntimeError(f"PATCH {path}: HTTP {resp.status}: {(await resp.text())[:200]}")

    async def _watch(self) -> None:
        node = self.settings.node_name
        while True:
            for pod in self.api.stored("v1/pods", None):
                meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
                uid = str(meta.get("uid", ""))
                if not uid or uid in self._seen:
                    continue
                if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
                    self._seen.add(uid)  # started by someone else (e.g. the agent's own pod)
                    continue
                where = spec.get("nodeName")
                if where and where != node:
                    self._seen.add(uid)
                    continue
                self._seen.add(uid)
                task = asyncio.create_task(
                    self._run_pod(pod, bind=not where), name=f"demo-pod-{meta.get('name')}"
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            await asyncio.sleep(self.settings.poll_s)

    # -- one pod -----------------------------------------------------------------------------------

    async def _run_pod(self, pod: dict[str, Any], *, bind: bool) -> None:
        meta = pod["metadata"]
        ns, name, uid = str(meta.get("namespace", "default")), str(meta["name"]), str(meta["uid"])
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        if bind:
            await self._patch(path, {"spec": {"nodeName": self.settings.node_name}})
        container = (pod.get("spec") or {}).get("containers", [{}])[0]
        cname = str(container.get("name", "main"))
        cid = container_id(uid, cname)
        emulated = self.api.add_pod(name, namespace=ns, containers=(cname,))
        emulated.uid = uid
        live = emulated.containers[cname]
        live.current.container_id = cid
        run = PodRun(
            namespace=ns,
            name=name,
            uid=uid,
            container=cname,
            container_id=cid,
            limit_bytes=None,
            argv=[],
            log=LiveLog(live),
        )
        self.runs[uid] = run
        try:
            run.limit_bytes = memory_limit(container)
            run.argv = resolve_argv(container)
        except ValueError as exc:
            run.error = str(exc)
            await self._fail_to_start(run, path, str(exc))
            return
        for n in self.settings.cut_after_lines:
            live.faults.append(faults.EofAfter(lines=n, extra_bytes=self.settings.cut_extra_bytes))
            run.cuts_injected += 1
        try:
            await self._execute(run, container, path, meta)
        finally:
            run.done.set()

    async def _fail_to_start(self, run: PodRun, path: str, message: str) -> None:
        run.log.close(128)
        await self._patch(
            path + "/status",
            {
                "status": {
                    "phase": "Failed",
                    "reason": "CreateContainerError",
                    "message": message,
                    "containerStatuses": [
                        {
                            "name": run.container,
                            "ready": False,
                            "restartCount": 0,
                            "image": "",
                            "state": {"waiting": {"reason": "CreateContainerError", "message": message}},
                        }
                    ],
                }
            },
        )
        run.done.set()

    async def _execute(
        self, run: PodRun, container: Mapping[str, Any], path: str, meta: Mapping[str, Any] | None = None
    ) -> None:
        loop = asyncio.get_running_loop()
        if self.cgroup_root is not None:
            run.cgroup = sandbox.MemoryCgroup(
                root=self.cgroup_root, prefix="podmortem-demo-pod", limit_bytes=run.limit_bytes
            )
            await asyncio.to_thread(run.cgroup.create)
            root = self.memory_root or self.cgroup_root.path
            run.cgroup_path = "/" + str(run.cgroup.path.relative_to(root))
        elif self.static_cgroup_path is not None:
            run.cgroup_path = self.static_cgroup_path(run)
        if self.hooks.started is not None:
            self.hooks.started(run)

        env = container_env(container, os.environ, meta)
        env.pop(PSS_LIMIT_ENV, None)
        if run.cgroup is None:
            # No cgroup holds the pod: its memory is what the watchdog sums (the trainer reports that).
            env[PSS_LIMIT_ENV] = "" if run.limit_bytes is None else str(run.limit_bytes)
        popen_kwargs: dict[str, Any] = dict(
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            start_new_session=True,
        )
        proc = _spawn(run, env, popen_kwargs)
        self._procs[run.uid] = proc
        run.pid = proc.pid
        run.started_at = _now()
        if run.cgroup is None and run.limit_bytes is not None:
            run.watchdog = LimitWatchdog(root_pid=proc.pid, limit_bytes=run.limit_bytes).start()

        def deliver(text: bytes) -> None:
            run.log.append(text)
            if self.hooks.line is not None:
                self.hooks.line(run, text)

        assert proc.stdout is not None and proc.stderr is not None
        pumps = [
            threading.Thread(
                target=_pump, args=(stream, loop, deliver), daemon=True, name=f"demo-pump-{run.name}"
            )
            for stream in (proc.stdout, proc.stderr)
        ]
        for pump in pumps:
            pump.start()
        await self._patch(
            path + "/status",
            {
                "status": {
                    "phase": "Running",
                    "hostIP": self.settings.pod_ip,
                    "podIP": self.settings.pod_ip,
                    "startTime": run.started_at,
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": run.started_at}],
                    "containerStatuses": [
                        {
                            "name": run.container,
                            "containerID": run.container_id,
                            "image": container.get("image", ""),
                            "ready": True,
                            "started": True,
                            "restartCount": 0,
                            "state": {"running": {"startedAt": run.started_at}},
                        }
                    ],
                }
            },
        )

        began = time.monotonic()
        returncode = await asyncio.to_thread(proc.wait)
        ran_s = time.monotonic() - began
        await asyncio.to_thread(self._kill_leftovers, run, proc)
        for pump in pumps:
            await asyncio.to_thread(pump.join)
        if run.watchdog is not None:
            run.watchdog.stop()
            run.peak_bytes = run.watchdog.peak_bytes
        if run.cgroup is not None:
            run.oom_kills = run.cgroup.oom_kills()
            run.peak_bytes = run.cgroup.peak_bytes()
        oom = run.oom_kills > 0 or (run.watchdog is not None and run.watchdog.kill is not None)
        run.exit_code = exit_code_of(returncode)
        run.reason = termination_reason(run.exit_code, oom_killed=oom)
        run.finished_at = _now()
        logger.info(
            "pod %s/%s: exit %s (%s) after %.2f s", run.namespace, run.name, run.exit_code, run.reason, ran_s
        )
        if self.hooks.exited is not None:
            self.hooks.exited(run)
        run.log.close(run.exit_code)
        phase = "Succeeded" if run.exit_code == 0 else "Failed"
        await self._patch(
            path + "/status",
            {
                "status": {
                    "phase": phase,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "False",
                            "reason": "PodCompleted",
                            "lastTransitionTime": run.finished_at,
                        }
                    ],
                    "containerStatuses": [
                        {
                            "name": run.container,
                            "containerID": run.container_id,
                            "image": container.get("image", ""),
                            "ready": False,
                            "started": False,
                            "restartCount": 0,
                            "state": {
                                "terminated": {
                                    "exitCode": run.exit_code,
                                    "reason": run.reason,
                                    "containerID": run.container_id,
                                    "startedAt": run.started_at,
                                    "finishedAt": run.finished_at,
                                }
                            },
                        }
                    ],
                }
            },
        )

    def _kill_leftovers(self, run: PodRun, proc: subprocess.Popen[bytes]) -> None:
        """The container's main process is gone: nothing else of it may keep running (or the pipes open)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if run.cgroup is not None:
            for pid in run.cgroup.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
