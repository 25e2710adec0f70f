"""Pods whose containers write logs, served like the apiserver + kubelet serve them.

:class:`PodLogsApi` extends the emulated API with pods whose status and logs it
computes itself: ``GET .../pods/{name}`` and ``GET .../pods/{name}/log``.
Log requests honour ``container``, ``timestamps``, ``follow``, ``previous``,
``sinceTime`` (truncated to whole seconds, as the real apiserver passes it on),
``tailLines`` and ``limitBytes``, and take injected faults (see :mod:`faults`).

Lines are kept pre-rendered (``<RFC3339 ns> <text>\\n``) in one growing buffer
per container instance and sent in large slices, so the emulated server is
never the bottleneck of a throughput measurement.

Why one module of this size: pods, their containers' instances and the log streams with their
injected faults share one timeline per container; split, each part would reach into the others'
state.
"""

from __future__ import annotations

import array
import asyncio
import bisect
import collections
import contextlib
import datetime
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import attrs
import kmock

from podmortem.logs import lines as logs_lines
from podmortem.logs import timestamps
from podmortem_demo.emulated import faults
from podmortem_demo.emulated.apiserver import KubernetesApi

#: Bytes per write to the socket while serving a log.
_CHUNK = 256 * 1024
_POLL_S = 0.02

LineText = Callable[[int], bytes]


def plain_text(container: str, instance: int) -> LineText:
    """Short, unique, parseable lines: ``<container> <instance> <seq> ...``."""
    prefix = f"{container} {instance} ".encode()
    return lambda seq: prefix + b"%d step=%d loss=0.%04d" % (seq, seq // 7, seq % 9973)


def repetitive_text(container: str, instance: int) -> LineText:
    """Lines that repeat (empty lines, the same progress tick): only their position tells them apart.

    With bursts sharing a timestamp, identical lines are identical on the wire too, which is
    what a resume that matches lines by content must not trip over.
    """
    return lambda seq: b"" if seq % 3 == 0 else b"tick"


def awkward_text(container: str, instance: int) -> LineText:
    """Unique lines with the hard cases mixed in: ``\\r``, ANSI, invalid UTF-8, multi-byte, >16 KiB."""
    prefix = f"{container} {instance} ".encode()

    def text(seq: int) -> bytes:
        head = prefix + b"%d " % seq
        kind = seq % 11
        if kind == 1:
            return head + b"epoch 3: 10%|#    |\r epoch 3: 20%|##   |\r"
        if kind == 3:
            return head + b"\x1b[31mERROR\x1b[0m \xff\xfe invalid utf-8"
        if kind == 5:
            return head + "ünïcödé → 世界 🙂".encode() * 3
        if kind == 7 and seq % 77 == 7:
            return head + b"x" * (17 * 1024)
        return head + b"ok"
    return text


class LogFile:
    """One container instance's log: complete lines only, with timestamps and rotation."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.ts = array.array("q")
        self.ends = array.array("Q")
        #: Index of the first line still in the current file; rotation moves it forward.
        self.first_line = 0
        #: ``first_line`` after each rotation, in order: where lines may have been lost.
        self.rotations: list[int] = []
        self.closed = False
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self.ts)

    def offset_of(self, line: int) -> int:
        return self.ends[line - 1] if line > 0 else 0

    def append(self, stamped: list[tuple[int, bytes]]) -> None:
        data, ts, ends = self.data, self.ts, self.ends
        for ts_ns, text in stamped:
            data += timestamps.format_ns(ts_ns).encode() + b" " + text + b"\n"
            ts.append(ts_ns)
            ends.append(len(data))
        self.notify()

    def append_rendered(self, block: bytes, stamps: list[int], ends_in_block: list[int]) -> None:
        base = len(self.data)
        self.data += block
        self.ts.extend(stamps)
        self.ends.extend(base + e for e in ends_in_block)
        self.notify()

    def rotate(self, *, keep: int = 0) -> None:
        """Start a new file: only the last ``keep`` lines (written after the rotation) stay readable."""
        self.first_line = max(self.first_line, len(self.ts) - keep)
        self.rotations.append(self.first_line)
        self.notify()

    def lines(self) -> list[tuple[int, bytes]]:
        """Every line this instance ever wrote, rotated or not: (timestamp ns, text)."""
        texts = bytes(self.data).split(b"\n")[:-1]
        return [(ts, line.partition(b" ")[2]) for ts, line in zip(self.ts, texts, strict=True)]

    def close(self) -> None:
        self.closed = True
        self.notify()

    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self, *, within_s: float) -> None:
        """Return when lines are added, the file rotates or closes, or after ``within_s`` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                await self._changed.wait()

    def start_line(self, *, since_ns: int | None, tail_lines: int | None) -> int:
        start = self.first_line
        if since_ns is not None:
            start = max(start, bisect.bisect_left(self.ts, since_ns))
        if tail_lines is not None:
            start = max(start, len(self.ts) - tail_lines)
        return start


@dataclass
class Instance:
    """One run of a container: a containerID, a log file, running or terminated."""

    number: int
    container_id: str
    log: LogFile = field(default_factory=LogFile)
    exit_code: int | None = None
    started_at: str = ""


@dataclass
class Clock:
    """Runtime timestamps of a pod: bursts of lines share one timestamp, many bursts a second."""

    now_ns: int
    rng: random.Random
    #: Lines per burst are drawn from 1..max_burst; all lines of a burst share a timestamp.
    max_burst: int = 8
    #: Gap between bursts in ns, drawn from 1..max_step_ns (~1 ms: ~thousands of lines/s).
    max_step_ns: int = 2_000_000

    def stamps(self, n: int) -> list[int]:
        out: list[int] = []
        rng = self.rng
        while len(out) < n:
            self.now_ns += rng.randint(1, self.max_step_ns)
            out.extend([self.now_ns] * min(n - len(out), rng.randint(1, self.max_burst)))
        return out


class Container:
    """A container of an emulated pod: its instances, its fault queue and its line text."""

    def __init__(self, pod: Pod, name: str, text: Callable[[str, int], LineText]) -> None:
        self.pod = pod
        self.name = name
        self._text_factory = text
        self.instances: list[Instance] = []
        self.faults: collections.deque[faults.LogFault] = collections.deque()
        #: When set, a log request that finds no fault left first terminates the container.
        self.terminate_when_faults_done = False
        self._seq = 0
        self.start()

    @property
    def current(self) -> Instance:
        return self.instances[-1]

    def start(self) -> Instance:
        number = len(self.instances)
        digest = hashlib.sha256(f"{self.pod.namespace}/{self.pod.name}/{self.name}/{number}".encode())
        inst = Instance(number=number, container_id="containerd://" + digest.hexdigest(),
                        started_at=_rfc3339(self.pod.clock.now_ns))
        self.instances.append(inst)
        self._text = self._text_factory(self.name, number)
        self._seq = 0
        return inst

    def write(self, n: int) -> None:
        """The current instance writes ``n`` lines now."""
        if n <= 0:
            return
        inst = self.current
        if inst.exit_code is not None:
            raise RuntimeError(f"container {self.name} instance {inst.number} has terminated")
        stamps = self.pod.clock.stamps(n)
        text = self._text
        seq = self._seq
        fmt = timestamps.format_ns
        parts: list[bytes] = []
        ends: list[int] = []
        size = 0
        last_ts = -1
        last_stamp = b""
        for i, ts in enumerate(stamps):
            if ts != last_ts:
                last_ts, last_stamp = ts, fmt(ts).encode() + b" "
            line = last_stamp + text(seq + i) + b"\n"
            parts.append(line)
            size += len(line)
            ends.append(size)
        self._seq = seq + n
        inst.log.append_rendered(b"".join(parts), stamps, ends)

    def terminate(self, exit_code: int = 0) -> None:
        inst = self.current
        if inst.exit_code is None:
            inst.exit_code = exit_code
            inst.log.close()
        self.pod.touch()

    def restart(self, *, new_lines: int = 0, exit_code: int = 1) -> Instance:
        """The current instance dies; a new one (new containerID) starts and writes ``new_lines``."""
        self.terminate(exit_code)
        inst = self.start()
        self.write(new_lines)
        self.pod.touch()
        return inst

    def rotate(self, *, keep: int = 0) -> None:
        self.current.log.rotate(keep=keep)

    def status(self) -> dict[str, Any]:
        inst = self.current
        state: dict[str, Any]
        if inst.exit_code is None:
            state = {"running": {"startedAt": inst.started_at}}
        else:
            state = {"terminated": {"exitCode": inst.exit_code, "containerID": inst.container_id,
                                    "reason": "Completed" if inst.exit_code == 0 else "Error"}}
        last: dict[str, Any] = {}
        if len(self.instances) > 1:
            prev = self.instances[-2]
            last = {"terminated": {"exitCode": prev.exit_code, "containerID": prev.container_id,
                                   "reason": "Error"}}
        return {
            "name": self.name, "image": "trainer:latest", "ready": inst.exit_code is None,
            "containerID": inst.container_id, "restartCount": len(self.instances) - 1,
            "state": state, "lastState": last,
        }


def _rfc3339(ts_ns: int) -> str:
    return timestamps.format_seconds(ts_ns)


class Pod:
    """An emulated pod: containers with logs, and a status computed from them."""

    def __init__(self, api: PodLogsApi, *, namespace: str, name: str, containers: list[str],
                 text: Callable[[str, int], LineText], clock: Clock) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.clock = clock
        self.uid = hashlib.sha256(f"{namespace}/{name}/{clock.now_ns}".encode()).hexdigest()[:32]
        self.deleted = False
        #: Faults for pod reads, one per GET; ``None`` entries are served normally.
        self.pod_faults: collections.deque[faults.HttpError | None] = collections.deque()
        self.containers = {c: Container(self, c, text) for c in containers}
        self.resource_version = api.next_resource_version()

    def touch(self) -> None:
        self.resource_version = self.api.next_resource_version()

    def delete(self) -> None:
        self.deleted = True
        for c in self.containers.values():
            c.current.log.close()
        self.api.pods.pop((self.namespace, self.name), None)

    def to_json(self) -> dict[str, Any]:
        statuses = [c.status() for c in self.containers.values()]
        done = all("terminated" in s["state"] for s in statuses)
        failed = any(s["state"].get("terminated", {}).get("exitCode") for s in statuses)
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid,
                         "resourceVersion": self.resource_version,
                         "creationTimestamp": _rfc3339(self.clock.now_ns)},
            "spec": {"containers": [{"name": n, "image": "trainer:latest"} for n in self.containers]},
            "status": {"phase": ("Failed" if failed else "Succeeded") if done else "Running",
                       "containerStatuses": statuses},
        }


def _parse_since(value: str | None) -> int | None:
    if not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise kmock.KubernetesError(status=400, reason="BadRequest",
                                    message=f"invalid sinceTime {value!r}") from exc
    # The apiserver hands sinceTime to the kubelet as RFC3339 without a fraction.
    return int(parsed.timestamp()) * timestamps.NS_PER_SECOND


def _int_param(params: dict[str, str], name: str) -> int | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise kmock.KubernetesError(status=400, reason="BadRequest",
                                    message=f"invalid {name} {value!r}") from exc


def _bool_param(params: dict[str, str], name: str) -> bool:
    return params.get(name, "false").lower() in ("true", "1")


@attrs.define(kw_only=True)
class PodLogsApi(KubernetesApi):
    """The emulated API with pods that log; create them with :meth:`add_pod`."""

    pods: dict[tuple[str, str], Pod] = attrs.field(factory=dict, init=False)
    #: Log requests served, for tests to check the query parameters the client sent.
    log_requests: list[dict[str, str]] = attrs.field(factory=list, init=False)
    #: Whether ``GET`` of a pod answers with the emulated kubelet's view of it (its containers'
    #: states); False answers with the object as stored (the demo writes real statuses there).
    pod_reads_from_kubelet: bool = attrs.field(default=True, kw_only=True)
    _closing: bool = attrs.field(default=False, init=False)
    _closed: asyncio.Event = attrs.field(factory=asyncio.Event, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # Discovery (kubectl asks /api/v1 before anything else) must list pods and pods/log.
        self.resources["v1/pods"] = kmock.ResourceInfo(
            kind="Pod", singular="pod", shortnames={"po"}, namespaced=True,
            verbs={"get", "list", "watch", "create", "delete", "patch"}, subresources={"log", "status"},
        )

    def add_pod(
        self, name: str, *, namespace: str = "default", containers: tuple[str, ...] = ("main",),
        text: Callable[[str, int], LineText] = plain_text, start_ns: int | None = None,
        seed: int = 0, max_burst: int = 8, max_step_ns: int = 2_000_000,
    ) -> Pod:
        """A running pod whose containers have written nothing yet (use ``Container.write``)."""
        if start_ns is None:
            start_ns = 1_714_560_000 * timestamps.NS_PER_SECOND  # 2024-05-01, fixed for repeatable logs
        clock = Clock(now_ns=start_ns, rng=random.Random(seed), max_burst=max_burst, max_step_ns=max_step_ns)
        pod = Pod(self, namespace=namespace, name=name, containers=list(containers), text=text, clock=clock)
        self.pods[namespace, name] = pod
        return pod

    async def __aexit__(self, *exc: Any) -> None:
        self._closing = True
        self._closed.set()
        for pod in self.pods.values():
            for c in pod.containers.values():
                for inst in c.instances:
                    inst.log.notify()
        await super().__aexit__(*exc)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        res = request.resource
        if (request.method == "GET" and res is not None and res.plural == "pods"
                and request.namespace is not None and request.name is not None):
            pod = self.pods.get((request.namespace, request.name))
            subresource = getattr(request, "subresource", None)
            if subresource is None:
                subresource = _subresource(request)
            if subresource == "log":
                if pod is None:
                    raise kmock.KubernetesObjectNotFoundError()
                return await self._serve_log(request, pod)
            if subresource is None and pod is not None and self.pod_reads_from_kubelet:
                fault = pod.pod_faults.popleft() if pod.pod_faults else None
                if fault is not None:
                    return _error_response(fault)
                return aiohttp.web.json_response(pod.to_json())
        return await super()._handle(request)

    async def _serve_log(self, request: kmock.Request, pod: Pod) -> aiohttp.web.StreamResponse:
        params = dict(request.params)
        self.log_requests.append(params)
        name = params.get("container")
        if not name:
            if len(pod.containers) != 1:
                raise kmock.KubernetesError(
                    status=400, reason="BadRequest",
                    message=f"a container name must be specified for pod {pod.name}, choose one of: "
                            f"{list(pod.containers)}")
            name = next(iter(pod.containers))
        container = pod.containers.get(name)
        if container is None:
            raise kmock.KubernetesError(status=400, reason="BadRequest",
                                        message=f"container {name} is not valid for pod {pod.name}")
        fault = container.faults.popleft() if container.faults else None
        if fault is None and container.terminate_when_faults_done:
            container.terminate(0)
        if isinstance(fault, faults.HttpError):
            return _error_response(fault)
        if isinstance(fault, faults.Rotate):
            container.write(fault.write_before)
            container.rotate(keep=fault.keep)
            fault = None
        elif isinstance(fault, faults.Write):
            container.write(fault.lines)
            fault = None
        previous = _bool_param(params, "previous")
        if previous:
            if len(container.instances) < 2:
                raise kmock.KubernetesError(
                    status=400, reason="BadRequest",
                    message=f"previous terminated container {name!r} in pod {pod.name!r} not found")
            inst = container.instances[-2]
        else:
            inst = container.current
        raw = request._raw_request
        assert raw is not None
        return await self._stream(raw, params, container, inst, fault)

    async def _stream(self, raw: aiohttp.web.BaseRequest, params: dict[str, str], container: Container,
                      inst: Instance, fault: faults.LogFault | None) -> aiohttp.web.StreamResponse:
        log = inst.log
        follow = _bool_param(params, "follow")
        with_ts = _bool_param(params, "timestamps")
        limit = _int_param(params, "limitBytes")
        start = log.start_line(since_ns=_parse_since(params.get("sinceTime")),
                               tail_lines=_int_param(params, "tailLines"))
        pos = log.offset_of(start)
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(raw)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + fault.seconds if isinstance(fault, faults.EofAfterSeconds) else None
        after_lines = getattr(fault, "after_lines", getattr(fault, "lines", None))
        extra = getattr(fault, "extra_bytes", 0)
        stop_at: int | None = None
        sent = 0
        while True:
            if stop_at is None and after_lines is not None and len(log) >= start + after_lines:
                stop_at = log.offset_of(start + after_lines)
                if extra and len(log) > start + after_lines:
                    # A few bytes of the next line, never all of it: the cut falls inside it.
                    stop_at = min(stop_at + extra, log.offset_of(start + after_lines + 1) - 1)
            end = len(log.data)
            if stop_at is not None:
                end = min(end, stop_at)
            if limit is not None:
                end = min(end, pos + limit - sent)
            while pos < end:
                upto = min(end, pos + _CHUNK)
                chunk = bytes(log.data[pos:upto])
                if not with_ts:
                    upto, chunk = _without_timestamps(log.data, pos, upto, end)
                await response.write(chunk)
                sent += upto - pos
                pos = upto
            if stop_at is not None and pos >= stop_at:
                return await self._fault_end(raw, response, container, fault)
            if limit is not None and sent >= limit:
                break
            if not follow or self._closing or (log.closed and pos >= len(log.data)):
                break
            if deadline is not None and loop.time() >= deadline:
                break
            if raw.transport is None or raw.transport.is_closing():
                return response
            wait = _POLL_S if deadline is None else max(0.0, min(_POLL_S, deadline - loop.time()))
            await log.wait_changed(within_s=wait)
        await response.write_eof()
        return response

    async def _fault_end(self, raw: aiohttp.web.BaseRequest, response: aiohttp.web.StreamResponse,
                         container: Container, fault: faults.LogFault | None) -> aiohttp.web.StreamResponse:
        if isinstance(fault, faults.Reset):
            if raw.transport is not None:
                raw.transport.abort()
            return response
        if isinstance(fault, faults.Stall):
            # aiohttp tells a handler nothing when its client goes away: look at the transport
            # every poll, and wake at once when the server closes.
            while not self._closing and raw.transport is not None and not raw.transport.is_closing():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_POLL_S):
                        await self._closed.wait()
            return response
        if isinstance(fault, faults.Restart):
            container.restart(new_lines=fault.new_lines)
        elif isinstance(fault, faults.Delete):
            container.pod.delete()
        await response.write_eof()
        return response


def _without_timestamps(data: bytearray, pos: int, upto: int, end: int) -> tuple[int, bytes]:
    """The bytes to send for ``data[pos:upto]`` without timestamps, and where the next chunk starts.

    Only whole lines can be stripped, so a chunk ends at its last newline; a line longer than a
    chunk is sent whole. A line cut by a hard stop (a fault or ``limitBytes``) is sent without
    its timestamp, as far as it goes.
    """
    nl = data.rfind(b"\n", pos, upto) + 1
    if nl == 0:
        nl = data.find(b"\n", pos, end) + 1
    if nl:
        return nl, logs_lines.strip_timestamps(bytes(data[pos:nl]))
    part = bytes(data[pos:end])
    space = part.find(b" ")
    return end, part[space + 1:] if space != -1 else b""


def _subresource(request: kmock.Request) -> str | None:
    parts = request.url.path.rstrip("/").split("/")
    # /api/v1/namespaces/{ns}/pods/{name}[/{subresource}]
    return parts[7] if len(parts) > 7 else None


def _error_response(fault: faults.HttpError) -> aiohttp.web.StreamResponse:
    headers = {}
    if fault.retry_after is not None:
        headers["Retry-After"] = f"{fault.retry_after:g}"
    body = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": fault.status,
            "reason": "InjectedFault", "message": f"injected HTTP {fault.status}"}
    return aiohttp.web.json_response(body, status=fault.status, headers=headers)
