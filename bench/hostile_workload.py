"""The operator's log-serving half under a hostile workload: 16 MiB lines, 500 readers, report pages.

One process is the operator's half that matters here, arranged as ``run_operator`` arranges it: a
``LogStore`` and, on the same event loop, the log server (``logs.http.make_app`` and
``logs.http.runner``) with the report page's routes (``report_page.add_routes``; the report comes
from a ``ReportFinder`` whose foreign-report stand-in holds it, as in
``tests/podmortem_operator/test_report_page_*.py``, so no Kubernetes API is needed). Every line goes
through the operator's ``following.WatchingSink`` (and so its bounded ``LineTail`` per container)
into the store, as the follower hands it over: a ``LineBatch`` of ``<RFC3339> <text>`` lines.

The hostile containers' lines are written straight into that sink, not fetched by 50 followers
from an emulated kubelet: the kubelet emulation keeps every container's whole log in memory and
would send each 16 MiB line through an HTTP server of its own, whose CPU would compete on this
project's 2-core machine with the very server measured. The store's write path, the operator's
tail of each container and every byte served are the same either way; what is not measured is the
follower's own reading and joining of a 16 MiB line (``logs/lines.py StreamParser``), which would
add to the server's load (the one join of each line is done here, in the server process).

In the server process:

* 50 hostile containers (bare pods ``hostile-N``), each printing a tqdm-like progress bar redrawn
  with ``\\r`` and no newline until the line is 16 MiB (``lines.MAX_LINE_BYTES``, timestamp
  included: the longest line the follower keeps): one such line every ``--line-every`` seconds
  (default 30: each container prints one in the 30 s phase, 0.6 s apart), with 5 short lines
  before it;
* a normal writer: 4,000 short lines/s over 4 pods in 10 batches a second each. Its time to write
  its lines is the write-slowdown measure: with everything below / alone, first in the same run;
* a quiet pod (1,000 lines, then one a second);
* an event-loop stall probe: a task that sleeps 10 ms in a loop and records how late it wakes.

In a second process, the readers (so that their CPU and memory are not the server's): 32
``format=jsonl`` readers following hostile logs from their start, 168 following the normal
writer's pods (every line counted, order checked), 100 slow (4 KB a second; half on hostile logs),
200 stalled (never read after sending the request; half on hostile logs in jsonl), and 8 clients
each fetching the report page of a job whose pod is ``hostile-0``, again 1 s after each answer. The
server's reader caps are raised to let them all in, as ``--http-max-readers`` and
``--http-max-readers-per-caller`` would. In a third, light process: ``GET /logs/bench/quiet?tail=10``
every 50 ms on a new connection, in both phases.

Printed, each against a baseline measured in the same run, with ``goal met: yes/no``:

* the normal writer's time with the hostile load / alone (goal <= 1.10);
* the ``tail=10`` request's p50/p99 latency (goal: p99 < 200 ms);
* the longest event-loop stall (goal: none over 100 ms);
* the server's peak RSS (``VmHWM``, and ``VmRSS`` polled every 50 ms) against the chart's 1 GiB
  operator limit (goal: under 0.7 GiB), with its RSS before the hostile load (which holds the
  16 MiB progress bar the hostile lines are cut from);

and for context: CPU of the server, the readers and the whole machine, report pages answered and
their latency and size, whether every following reader got every line, the tail held per hostile
container. ``--watchdog`` adds where the server's loop thread was whenever it stalled over 100 ms.

Run: ``python bench/hostile_workload.py`` (about 80 s; ``--seconds``, ``--hostile``, ``--line-every``,
``--line-mib``, ``--readers-*`` and ``--pages`` scale it). The store goes to a temporary directory
(under ``--dir`` if given): about 0.8 GiB with the defaults, deleted at the end.
"""

# The processes signal phases through a small file, polled: blocking file calls are fine here.
# ruff: noqa: ASYNC110

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

LIMIT = 1 << 30  # the chart's operator memory limit
RSS_GOAL = 0.7 * LIMIT
NS = "bench"
REPORT_JOB = "hostile"
#: How long any one wait between phases may take before the run is abandoned.
PHASE_TIMEOUT_S = 180.0
#: A redrawn progress bar: ``\r``, block characters (3 UTF-8 bytes, 6 as a JSON escape).
BAR = "\r 45%|████▌     | 450/1000 [00:10<00:12, 43.21it/s]".encode()


@dataclass
class Config:
    seconds: float
    rate: int
    batches: int
    pods: int
    hostile: int
    line_every: float
    line_bytes: int
    readers_jsonl: int
    readers_following: int
    readers_slow: int
    readers_stalled: int
    pages: int
    page_pause: float
    probe_every: float
    drain: float
    watchdog: bool = False

    @property
    def caps(self) -> int:
        return (self.readers_jsonl + self.readers_following + self.readers_slow + self.readers_stalled
                + self.pages + 10)


# --- files shared by the processes ----------------------------------------------------------------

def set_phase(work: Path, phase: str) -> None:
    tmp = work / "phase.tmp"
    tmp.write_text(phase)
    os.replace(tmp, work / "phase")  # atomic: a reader never sees half a phase


def get_phase(work: Path) -> str:
    return (work / "phase").read_text()


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


async def wait_phase(work: Path, *phases: str, within_s: float = PHASE_TIMEOUT_S) -> str:
    deadline = time.monotonic() + within_s
    while (phase := get_phase(work)) not in phases:
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for phase {phases} (at {phase!r})")
        await asyncio.sleep(0.05)
    return phase


def proc_status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores (``/proc/stat``)."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / hz, sum(fields) / hz


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


# --- the server process ---------------------------------------------------------------------------

class Foreign:
    """The report finder's foreign-report stand-in: one report, of a job whose pod prints 16 MiB lines."""

    def __init__(self, report: dict[str, Any]) -> None:
        self.report = report

    def foreign_report(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.report if (namespace, name) == (NS, REPORT_JOB) else None


async def server_main(cfg: Config, work: Path) -> None:
    from aiohttp import web

    from podmortem import startup_gc
    from podmortem.connection_limits import ServerLimits
    from podmortem.logs import timestamps
    from podmortem.logs.cursor import LogCursor
    from podmortem.logs.lines import LineBatch
    from podmortem.logs.serving import auth
    from podmortem.logs.serving import http as log_http
    from podmortem.logs.settings import HttpSettings
    from podmortem.logs.storage.store import LogStore, StoreSettings
    from podmortem.operator.followed_pods import PodLogFacts, WatchingSink
    from podmortem.operator.reporting import report_page

    startup_gc.freeze()  # as `podmortem operator` does after its imports

    loop = asyncio.get_running_loop()
    fmt = timestamps.format_ns

    def batch(container: str, stamped: Sequence[tuple[int, bytes | memoryview]]) -> LineBatch:
        """The lines as the follower hands them over: one fresh ``<RFC3339> <text>\\n`` block."""
        parts: list[bytes | memoryview] = []
        for ts, text in stamped:
            parts += [fmt(ts).encode(), b" ", text, b"\n"]
        return LineBatch(container=container, raw=b"".join(parts), count=len(stamped),
                         first_ts_ns=stamped[0][0], last_ts_ns=stamped[-1][0])

    class Pod:
        """One container of a followed pod: its sink as the operator wraps it, its cursor, its count."""

        def __init__(self, st: LogStore, name: str, job: str | None) -> None:
            self.facts = PodLogFacts(namespace=NS, pod=name, pod_uid=name)
            self.sink = WatchingSink(inner=st.sink(namespace=NS, pod=name, job=job), facts=self.facts,
                                     on_memory_line=None)
            self.cursor = LogCursor(container_id=f"containerd://{name}")
            self.lines = 0
            self.last_ts = 0

        def stamp(self) -> int:
            self.last_ts = max(time.time_ns(), self.last_ts + 1)
            self.cursor.accept(self.last_ts)
            self.lines += 1
            return self.last_ts

        async def write(self, texts: list[bytes | memoryview]) -> None:
            await self.sink.write("main", batch("main", [(self.stamp(), t) for t in texts]), self.cursor)

    # The longest line the follower keeps is MAX_LINE_BYTES with its timestamp: the bar fills the rest.
    text_bytes = cfg.line_bytes - len(fmt(time.time_ns())) - 1
    template = memoryview((BAR * (text_bytes // len(BAR) + 1))[:text_bytes])

    report = {
        "verdict": "memcg-limit",
        "pod": {"namespace": NS, "name": "hostile-0", "container": "main",
                "finishedAt": "2099-01-01T00:00:00Z"},
        "findings": [{"code": "memcg-limit", "severity": "critical", "message": "hit its own limit"}],
    }
    reviewer = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))
    # Every reader here is one caller from one address: the caps are raised past the fair-share rule
    # (a caller holds fewer readers than the slots left free) and the per-address connection cap, as
    # --http-max-readers and the connection settings would be for a crowd behind one proxy.
    settings = HttpSettings(host="127.0.0.1", port=0, max_readers=2 * cfg.caps + 2,
                            max_readers_per_caller=cfg.caps,
                            connections=ServerLimits(max_connections=4 * cfg.caps + 64,
                                                     max_connections_per_peer=4 * cfg.caps + 64))

    phase = "setup"
    stalls: dict[str, list[float]] = {"baseline": [], "loaded": []}
    cpu: dict[str, float] = {}

    last_tick = [time.monotonic()]

    async def stall_probe() -> None:
        while True:
            asked = loop.time()
            await asyncio.sleep(0.010)
            last_tick[0] = time.monotonic()
            # The readers connecting and catching up ("between") count with the load they are part of.
            if (key := "loaded" if phase == "between" else phase) in stalls:
                stalls[key].append(loop.time() - asked - 0.010)

    stacks: collections.Counter[str] = collections.Counter()
    watching = threading.Event()

    def watchdog(loop_thread: int) -> None:
        """Diagnosis: where the event loop's thread is while the stall probe is over 100 ms late."""
        while not watching.wait(0.02):
            if time.monotonic() - last_tick[0] > 0.1:
                frame = sys._current_frames().get(loop_thread)
                if frame is not None:
                    stacks["".join(traceback.format_stack(frame, limit=12))] += 1

    if cfg.watchdog:
        threading.Thread(target=watchdog, args=(threading.get_ident(),), daemon=True).start()

    async with LogStore(work / "store", settings=StoreSettings()) as st:
        app = log_http.make_app(log_store=st, reviewer=reviewer, settings=settings)
        report_page.add_routes(app, report_page.ReportFinder(kube=None, foreign=Foreign(report)))
        runner = log_http.runner(app, settings)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = int(runner.addresses[0][1])

            normal = [Pod(st, f"normal-{i}", "normal") for i in range(cfg.pods)]
            hostile = [Pod(st, f"hostile-{i}", None) for i in range(cfg.hostile)]
            quiet = Pod(st, "quiet", "quiet")
            for i in range(0, 1000, 100):
                await quiet.write([b"quiet line %d of a pod that prints little" % n
                                   for n in range(i, i + 100)])
            for pod in hostile:  # the pods exist (readers may open them); their long lines come later
                await pod.write([b"epoch 0 starting: the progress bar follows" for _ in range(5)])

            async def quiet_ticker() -> None:
                while True:
                    await asyncio.sleep(1.0)
                    await quiet.write([b"quiet line %d of a pod that prints little" % quiet.lines])

            probe = asyncio.create_task(stall_probe())
            ticker = asyncio.create_task(quiet_ticker())
            base = time.time_ns()
            counters = [0] * cfg.pods

            async def write_normal(n_seconds: float) -> tuple[float, float]:
                """Write ``rate`` lines/s for ``n_seconds``, ``batches`` a second a pod: time, max lag."""
                hz = cfg.batches
                per_batch = max(1, cfg.rate // hz // cfg.pods)
                start = time.monotonic()
                worst = 0.0
                for tick in range(int(n_seconds * hz)):
                    worst = max(worst, time.monotonic() - (start + tick / hz))
                    for i, pod in enumerate(normal):
                        stamped = []
                        for _ in range(per_batch):
                            n = counters[i]
                            ts = base + n * 1000
                            pod.cursor.accept(ts)
                            stamped.append((ts, b"step %09d loss 0.1234 lr 0.001 padding-padding" % n))
                            counters[i] = n + 1
                        pod.lines += per_batch
                        await pod.sink.write("main", batch("main", stamped), pod.cursor)
                    delay = start + (tick + 1) / hz - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                return time.monotonic() - start, worst

            hostile_lag: list[float] = []
            hostile_bytes = [0]

            async def write_hostile(i: int, pod: Pod, start: float, n_seconds: float) -> None:
                k = 0
                first = start + i * cfg.line_every / cfg.hostile  # staggered over the interval
                while (due := first + k * cfg.line_every) < start + n_seconds:
                    delay = due - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    hostile_lag.append(time.monotonic() - due)
                    await pod.write([b"epoch %d step %d loss 0.4321 (the bar is next)" % (k, j)
                                     for j in range(5)])
                    await pod.write([template])  # one fresh 16 MiB block, as the follower joins it
                    hostile_bytes[0] += cfg.line_bytes
                    k += 1

            write_json(work / "port.json", {"port": port})
            set_phase(work, "ready")
            await wait_phase(work, "baseline")  # the probe process is up and has had its first answer

            phase = "baseline"
            c0 = cpu_s()
            baseline_s, baseline_lag = await write_normal(cfg.seconds)
            cpu["baseline"] = cpu_s() - c0
            phase = "between"
            set_phase(work, "readers")
            await wait_phase(work, "go")

            phase = "loaded"
            c0 = cpu_s()
            start = time.monotonic()
            hostiles = [asyncio.create_task(write_hostile(i, pod, start, cfg.seconds))
                        for i, pod in enumerate(hostile)]
            loaded_s, loaded_lag = await write_normal(cfg.seconds)
            await asyncio.gather(*hostiles)  # each stops by itself after its last due line
            cpu["loaded"] = cpu_s() - c0
            hostile_s = time.monotonic() - start
            phase = "drain"
            write_json(work / "server.json", {
                "baseline_s": baseline_s, "loaded_s": loaded_s,
                "baseline_lag_s": baseline_lag, "loaded_lag_s": loaded_lag,
                "hostile_s": hostile_s,
                "cpu_s": cpu,
                "targets": {p.facts.pod: p.lines for p in normal + hostile},
                "hostile_lines": sum(p.lines for p in hostile),
                "hostile_bytes": hostile_bytes[0],
                "hostile_lag_max_s": max(hostile_lag, default=0.0),
                "tail_bytes_max": max(t.held for p in hostile for t in p.facts.tail.values()),
                "stalls": stalls,
            })
            set_phase(work, "done")
            await wait_phase(work, "stop", within_s=cfg.drain + PHASE_TIMEOUT_S)
            watching.set()
            for stack, n in stacks.most_common(8):
                print(f"--- the loop thread in {n} samples (every 20 ms) while stalled over 100 ms:\n"
                      f"{stack}", file=sys.stderr)
            probe.cancel()
            ticker.cancel()
        finally:
            await runner.cleanup()


# --- the readers process ---------------------------------------------------------------------------

async def readers_main(cfg: Config, work: Path) -> None:
    import aiohttp

    port = json.loads((work / "port.json").read_text())["port"]
    url = f"http://127.0.0.1:{port}"
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    stop = asyncio.Event()
    # Per checked reader: [records or lines received, in order / well formed, pod].
    got: dict[str, list[Any]] = {}
    pages: list[dict[str, Any]] = []
    errors: list[str] = []

    async def follow_text(k: int, session: aiohttp.ClientSession) -> None:
        pod = f"normal-{k % cfg.pods}"
        mine = got[f"text-{k}"] = [0, True, pod]
        async with session.get(f"{url}/logs/{NS}/{pod}", params={"follow": "true"}) as r:
            assert r.status == 200, r.status
            # Count lines per chunk in C; check only the last complete line's number (0, 1, 2, ...).
            tail = b""
            async for chunk in r.content.iter_any():
                data = tail + chunk
                cut = data.rfind(b"\n")
                if cut < 0:
                    tail = data
                    continue
                mine[0] += data.count(b"\n", 0, cut + 1)
                last = data[data.rfind(b"\n", 0, cut) + 1:cut]
                tail = data[cut + 1:]
                mine[1] &= last.startswith(b"step ") and int(last[5:14]) == mine[0] - 1

    async def follow_jsonl(k: int, session: aiohttp.ClientSession) -> None:
        pod = f"hostile-{k % cfg.hostile}"
        mine = got[f"jsonl-{k}"] = [0, True, pod]
        head = b'{"type": "line"'
        async with session.get(f"{url}/logs/{NS}/{pod}", params={"follow": "true", "format": "jsonl"}) as r:
            assert r.status == 200, r.status
            # Records are counted by their newlines; each must start as a line record and end as one.
            record_start = b""  # the first bytes of the record being received
            prev = b""
            async for chunk in r.content.iter_any():
                at = 0
                while True:
                    if len(record_start) < len(head):
                        record_start += chunk[at:at + len(head) - len(record_start)]
                    nl = chunk.find(b"\n", at)
                    if nl < 0:
                        prev = (prev + chunk[max(at, len(chunk) - 2):])[-2:]
                        break
                    end = (prev + chunk[at:nl])[-2:]
                    mine[0] += 1
                    mine[1] &= record_start.startswith(head) and end == b'"}'
                    record_start, prev, at = b"", b"", nl + 1
                    if at == len(chunk):
                        break

    async def slow_reader(k: int, session: aiohttp.ClientSession) -> None:
        pod = f"hostile-{k % cfg.hostile}" if k % 2 else f"normal-{k % cfg.pods}"
        async with session.get(f"{url}/logs/{NS}/{pod}", params={"follow": "true"}) as r:
            while not stop.is_set():
                await r.content.read(4096)
                await asyncio.sleep(1.0)

    async def stalled_reader(k: int) -> None:
        path = (f"hostile-{k % cfg.hostile}?follow=true&format=jsonl" if k % 2
                else f"normal-{k % cfg.pods}?follow=true")
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /logs/{NS}/{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        await stop.wait()
        writer.close()

    async def page_client(session: aiohttp.ClientSession) -> None:
        while not stop.is_set() and get_phase(work) == "go":
            t0 = time.monotonic()
            async with session.get(f"{url}/reports/{NS}/{REPORT_JOB}") as r:
                body = await r.read()
            pages.append({"s": time.monotonic() - t0, "status": r.status, "bytes": len(body),
                          "clipped": b" more bytes]</td>" in body})
            await asyncio.sleep(cfg.page_pause)

    async def guarded(coro: Any, what: str) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one reader's failure is reported, not the end of the run
            errors.append(f"{what}: {type(exc).__name__}: {exc}"[:300])

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        checked = [asyncio.create_task(guarded(follow_text(k, session), "following"))
                   for k in range(cfg.readers_following)]
        checked += [asyncio.create_task(guarded(follow_jsonl(k, session), "jsonl"))
                    for k in range(cfg.readers_jsonl)]
        others = [asyncio.create_task(guarded(slow_reader(k, session), "slow"))
                  for k in range(cfg.readers_slow)]
        others += [asyncio.create_task(guarded(stalled_reader(k), "stalled"))
                   for k in range(cfg.readers_stalled)]
        await asyncio.sleep(2.0)
        set_phase(work, "go")
        cpu0 = cpu_s()
        others += [asyncio.create_task(guarded(page_client(session), "page")) for _ in range(cfg.pages)]
        await wait_phase(work, "done", within_s=cfg.seconds + PHASE_TIMEOUT_S)
        targets = json.loads((work / "server.json").read_text())["targets"]
        loaded_cpu = cpu_s() - cpu0
        stop.set()
        # The checked readers keep reading until each has every line of its pod, for --drain at most.
        drain_started = time.monotonic()
        deadline = drain_started + cfg.drain
        while time.monotonic() < deadline and any(n < targets[pod] for n, _, pod in got.values()):
            await asyncio.sleep(0.1)
        drain_s = time.monotonic() - drain_started
        for t in checked + others:
            t.cancel()
        await asyncio.gather(*checked, *others, return_exceptions=True)
    write_json(work / "readers.json", {"got": got, "targets": targets, "pages": pages, "errors": errors,
                                        "drain_s": drain_s, "loaded_cpu_s": loaded_cpu})


# --- the probe process: a small request of a quiet pod, repeated -----------------------------------

async def probe_main(cfg: Config, work: Path) -> None:
    import aiohttp

    port = json.loads((work / "port.json").read_text())["port"]
    url = f"http://127.0.0.1:{port}/logs/{NS}/quiet?tail=10"
    samples: dict[str, list[float]] = {"baseline": [], "go": []}
    bad: list[str] = []
    # A fresh connection per request: the accept is part of what a new client waits for.
    connector = aiohttp.TCPConnector(force_close=True)
    session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30))
    async with session:
        async with session.get(url) as r:  # the first answer (imports, first connection) is not counted
            await r.read()
        set_phase(work, "baseline")
        deadline = time.monotonic() + 2 * cfg.seconds + PHASE_TIMEOUT_S
        nxt = time.monotonic()
        while (phase := get_phase(work)) not in ("done", "stop") and time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                async with session.get(url) as r:
                    body = await r.read()
                # At least 10: a line the quiet pod prints while the answer is read comes with it.
                if r.status != 200 or body.count(b"\n") < 10:
                    bad.append(f"{r.status}: {body[:100]!r}")
            except (aiohttp.ClientError, TimeoutError) as exc:
                bad.append(f"{type(exc).__name__}: {exc}")
            # A request sent while the readers connect ("readers") counts with the load it met.
            if (key := "go" if phase == "readers" else phase) in samples:
                samples[key].append(time.monotonic() - t0)
            nxt += cfg.probe_every
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))
            nxt = max(nxt, time.monotonic() - cfg.probe_every)  # late: the next one at once, no burst
    write_json(work / "probe.json", {"samples": samples, "bad": bad})


# --- the driver ------------------------------------------------------------------------------------

def run(cfg: Config, work: Path) -> dict[str, Any]:
    """Run the three processes; what they measured, and the server's memory."""
    set_phase(work, "setup")
    write_json(work / "config.json", asdict(cfg))
    me = [sys.executable, __file__, "--dir", str(work)]
    server = subprocess.Popen([*me, "--role", "server"])
    children = [server]
    try:
        def wait_for(phases: tuple[str, ...], what: str) -> None:
            deadline = time.monotonic() + PHASE_TIMEOUT_S
            while get_phase(work) not in phases:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server process failed before {what}")
                time.sleep(0.05)

        wait_for(("ready",), "it served")
        setup_rss = proc_status(server.pid, "VmRSS")
        probe = subprocess.Popen([*me, "--role", "probe"])
        children.append(probe)
        wait_for(("readers",), "the baseline ended")
        before_rss = proc_status(server.pid, "VmRSS")
        readers = subprocess.Popen([*me, "--role", "readers"])
        children.append(readers)
        peak = before_rss
        deadline = time.monotonic() + 2 * cfg.seconds + cfg.drain + PHASE_TIMEOUT_S
        busy: dict[str, tuple[float, float]] = {}
        while (readers.poll() is None or probe.poll() is None) and time.monotonic() < deadline:
            if server.poll() is not None:
                raise SystemExit("the server process died under the load")
            peak = max(peak, proc_status(server.pid, "VmRSS"))
            phase = get_phase(work)
            if phase in ("go", "done") and phase not in busy:
                busy[phase] = machine_busy()
            time.sleep(0.05)
        hwm = proc_status(server.pid, "VmHWM")
        if readers.returncode != 0 or probe.returncode != 0:
            raise SystemExit(f"readers exited {readers.returncode}, probe {probe.returncode}")
        set_phase(work, "stop")
        server.wait(60)
        return {
            "server": json.loads((work / "server.json").read_text()),
            "readers": json.loads((work / "readers.json").read_text()),
            "probe": json.loads((work / "probe.json").read_text()),
            "rss": {"setup": setup_rss, "before": before_rss, "peak": peak, "hwm": hwm},
            "machine_busy": ((busy["done"][0] - busy["go"][0]) / (busy["done"][1] - busy["go"][1])
                             if "go" in busy and "done" in busy else None),
        }
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def report(cfg: Config, r: dict[str, Any]) -> None:
    s, rd, pr, mem = r["server"], r["readers"], r["probe"], r["rss"]
    ms = 1000.0
    mib = 1 << 20
    yes = {True: "yes", False: "no"}
    n_readers = cfg.readers_jsonl + cfg.readers_following + cfg.readers_slow + cfg.readers_stalled
    print(f"hostile: {cfg.hostile} containers, one {cfg.line_bytes / mib:g} MiB line each every "
          f"{cfg.line_every:g} s (staggered, 5 short lines before each); {cfg.seconds:g} s per phase")
    print(f"normal writer: {cfg.rate:,} lines/s over {cfg.pods} pods, {cfg.batches} batches/s each; "
          f"readers: {n_readers} ({cfg.readers_jsonl} jsonl of hostile logs, {cfg.readers_following} "
          f"following, {cfg.readers_slow} slow, {cfg.readers_stalled} stalled); {cfg.pages} report page "
          f"clients ({cfg.page_pause:g} s between pages); /logs?tail=10 of a quiet pod every "
          f"{cfg.probe_every * ms:.0f} ms")
    print(f"hostile lines stored: {s['hostile_bytes'] / 2**30:.2f} GiB in {s['hostile_s']:.1f} s "
          f"({s['hostile_lines']:,} lines with the short ones), the latest written "
          f"{s['hostile_lag_max_s'] * ms:.0f} ms after its time")
    busy = r["machine_busy"]
    print(f"CPU under the load: server {s['cpu_s']['loaded'] / s['hostile_s']:.0%} of a core (alone "
          f"{s['cpu_s']['baseline'] / s['baseline_s']:.0%}), readers process "
          f"{rd['loaded_cpu_s'] / s['hostile_s']:.0%}, whole machine "
          f"{'?' if busy is None else f'{busy:.0%}'} busy of {os.cpu_count()} cores")
    print(f"operator tail held per hostile container: at most {s['tail_bytes_max'] / 1024:.1f} KiB "
          "(LineTail bound 64 KiB)")
    print()

    ratio = s["loaded_s"] / s["baseline_s"]
    print(f"write slowdown: {s['loaded_s']:.2f} s with the hostile load / {s['baseline_s']:.2f} s alone "
          f"= {ratio:.3f}x (goal <= 1.10; latest batch {s['loaded_lag_s'] * ms:.0f} ms behind its time, "
          f"alone {s['baseline_lag_s'] * ms:.0f} ms)  goal met: {yes[ratio <= 1.10]}")

    base, loaded = pr["samples"]["baseline"], pr["samples"]["go"]
    p99 = pct(loaded, 99)
    print(f"/logs?tail=10 latency: p50 {pct(loaded, 50) * ms:.1f} ms, p99 {p99 * ms:.1f} ms, "
          f"max {max(loaded, default=0) * ms:.1f} ms over {len(loaded)} requests (alone: p50 "
          f"{pct(base, 50) * ms:.1f} ms, p99 {pct(base, 99) * ms:.1f} ms; {len(pr['bad'])} failed) "
          f"(goal p99 < 200 ms)  goal met: {yes[bool(loaded) and p99 < 0.2 and not pr['bad']]}")
    for bad in pr["bad"][:3]:
        print(f"  failed: {bad}")

    st_b, st_l = s["stalls"]["baseline"], s["stalls"]["loaded"]
    over = sum(1 for x in st_l if x > 0.1)
    print(f"event-loop stall (10 ms sleeps): max {max(st_l, default=0) * ms:.1f} ms, p99 "
          f"{pct(st_l, 99) * ms:.1f} ms, {over} of {len(st_l)} wake-ups over 100 ms, "
          f"{sum(x for x in st_l if x > 0.1):.1f} s stalled in all (alone: max "
          f"{max(st_b, default=0) * ms:.1f} ms of {len(st_b)}) (goal: none over 100 ms)  "
          f"goal met: {yes[over == 0]}")

    top = max(mem["hwm"], mem["peak"])
    print(f"server RSS: {mem['before'] / mib:.0f} MiB before the hostile load, peak {top / mib:.0f} MiB "
          f"(VmHWM {mem['hwm'] / mib:.0f}, polled VmRSS {mem['peak'] / mib:.0f}) = {top / 2**30:.2f} GiB "
          f"of the chart's 1 GiB limit (goal < 0.70 GiB)  goal met: {yes[top < RSS_GOAL]}")
    print()

    pages = rd["pages"]
    ok = [p for p in pages if p["status"] == 200]
    times = [p["s"] for p in ok]
    print(f"report pages: {len(ok)}/{len(pages)} answered 200, p50 {pct(times, 50) * ms:.0f} ms, "
          f"max {max(times, default=0) * ms:.0f} ms, largest "
          f"{max((p['bytes'] for p in ok), default=0) / 1024:.0f} KiB, "
          f"long lines clipped on {sum(p['clipped'] for p in ok)}/{len(ok)}")
    targets = rd["targets"]
    for kind, what in (("text", "following readers that got every line, in order"),
                       ("jsonl", "jsonl readers that got every record, well formed")):
        mine = [v for k, v in rd["got"].items() if k.startswith(kind + "-")]
        complete = sum(1 for n, good, pod in mine if good and n >= targets[pod])
        print(f"{what}: {complete}/{len(mine)}")
    print(f"readers caught up {rd['drain_s']:.1f} s after the writers stopped (bound {cfg.drain:g} s); "
          f"reader errors: {len(rd['errors'])}")
    for e in rd["errors"][:5]:
        print(f"  {e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds per phase (alone, loaded)")
    parser.add_argument("--rate", type=int, default=4000, help="the normal writer's lines per second")
    parser.add_argument("--batches", type=int, default=10, help="the normal writer's batches/s per pod")
    parser.add_argument("--pods", type=int, default=4, help="the normal writer's pods")
    parser.add_argument("--hostile", type=int, default=50, help="containers printing long lines")
    parser.add_argument("--line-every", type=float, default=30.0,
                        help="seconds between two long lines of a container")
    parser.add_argument("--line-mib", type=float, default=16.0, help="MiB per long line, timestamp included")
    parser.add_argument("--readers-jsonl", type=int, default=32)
    parser.add_argument("--readers-following", type=int, default=168)
    parser.add_argument("--readers-slow", type=int, default=100)
    parser.add_argument("--readers-stalled", type=int, default=200)
    parser.add_argument("--pages", type=int, default=8, help="concurrent report page clients")
    parser.add_argument("--page-pause", type=float, default=1.0,
                        help="seconds a page client waits after a page before asking again")
    parser.add_argument("--probe-every", type=float, default=0.05, help="seconds between tail=10 requests")
    parser.add_argument("--drain", type=float, default=60.0, help="seconds the readers may take to catch up")
    parser.add_argument("--watchdog", action="store_true",
                        help="print where the server's loop thread was while it stalled (diagnosis)")
    parser.add_argument("--dir", type=Path, help="where the store goes (a temporary directory by default)")
    parser.add_argument("--role", choices=["driver", "server", "readers", "probe"], default="driver")
    ns = parser.parse_args()
    if ns.role != "driver":
        cfg = Config(**json.loads((ns.dir / "config.json").read_text()))
        main_of = {"server": server_main, "readers": readers_main, "probe": probe_main}[ns.role]
        asyncio.run(main_of(cfg, ns.dir))
        return
    if not 0 < ns.line_mib <= 16:
        parser.error("--line-mib: the follower keeps lines up to 16 MiB")
    if ns.hostile < 1 or ns.pods < 1 or ns.batches < 1 or ns.seconds <= 0:
        parser.error("--hostile, --pods, --batches and --seconds must be positive")
    cfg = Config(
        seconds=ns.seconds, rate=ns.rate, batches=ns.batches, pods=ns.pods, hostile=ns.hostile,
        line_every=ns.line_every, line_bytes=int(ns.line_mib * (1 << 20)), readers_jsonl=ns.readers_jsonl,
        readers_following=ns.readers_following, readers_slow=ns.readers_slow,
        readers_stalled=ns.readers_stalled, pages=ns.pages, page_pause=ns.page_pause,
        probe_every=ns.probe_every, drain=ns.drain, watchdog=ns.watchdog,
    )
    with tempfile.TemporaryDirectory(dir=ns.dir) as d:
        result = run(cfg, Path(d))
    report(cfg, result)


if __name__ == "__main__":
    main()
