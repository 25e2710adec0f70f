"""500 concurrent log readers against a live store: memory, write pace, and nothing lost.

One process is the operator's half that matters here: a ``LogStore`` written at a fixed pace
(default 100,000 lines/s over 4 pods) and the log HTTP server on the same event loop, with the
operator's default reader bounds (only the caps are raised to let all 500 readers in, as
``--http-max-readers``/``--http-max-readers-per-caller`` would). Another process holds the
readers: 200 following from the start, 100 slow (a few KB/s), 200 stalled (they never read
after the headers).

Printed, each against a baseline measured in the same run:

* the writer's time to write its lines at the set pace, with readers / without (goal <= 1.10);
* the server's peak RSS with readers, and that over the chart's 1 GiB operator limit;
* lines each following reader received / lines written (goal: every one, in order).

Run: ``python bench/logs_readers.py`` (about a minute; ``--seconds`` and ``--readers-*`` scale it).
"""

# The three processes signal phases through a small file, polled: blocking file calls are fine here.
# ruff: noqa: ASYNC240, ASYNC110

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIMIT = 1 << 30  # the chart's operator memory limit


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


# --- the server process --------------------------------------------------------------------------

async def server_main(store_dir: Path, port_file: Path, *, rate: int, seconds: float, pods: int,
                      phase_file: Path, caps: int) -> None:
    from podmortem.logs.cursor import LogCursor
    from podmortem.logs.events import LogLine
    from podmortem.logs.serving import auth, http
    from podmortem.logs.settings import HttpSettings
    from podmortem.logs.storage.store import LogStore, StoreSettings

    reviewer = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))
    settings = HttpSettings(host="127.0.0.1", port=0, max_readers=caps, max_readers_per_caller=caps)
    async with LogStore(store_dir, settings=StoreSettings()) as st, \
            http.serve(log_store=st, reviewer=reviewer, settings=settings) as runner:
        port_file.write_text(str(runner.addresses[0][1]))
        sinks = [st.sink(namespace="bench", pod=f"p-{i}", job="bench") for i in range(pods)]
        cursors = [LogCursor(container_id=f"c-{i}") for i in range(pods)]
        counters = [0] * pods
        base = time.time_ns()

        async def write(n_seconds: float) -> float:
            """Write at ``rate`` lines/s for ``n_seconds``, 100 batches a second; the wall time it took."""
            per_batch = rate // 100 // pods
            start = time.monotonic()
            for tick in range(int(n_seconds * 100)):
                for i, sink in enumerate(sinks):
                    lines = []
                    for _ in range(per_batch):
                        n = counters[i]
                        ts = base + n * 1000
                        cursors[i].accept(ts)
                        text = b"step %09d loss 0.1234 lr 0.001 padding-padding" % n
                        lines.append(LogLine("main", ts, text))
                        counters[i] = n + 1
                    await sink.write("main", lines, cursors[i])
                delay = start + (tick + 1) / 100 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            return time.monotonic() - start

        baseline = await write(seconds)
        phase_file.write_text("readers")
        while phase_file.read_text() != "go":
            await asyncio.sleep(0.05)
        loaded = await write(seconds)
        phase_file.write_text(json.dumps({"baseline_s": baseline, "loaded_s": loaded,
                                          "written_per_pod": counters}))
        while phase_file.read_text() != "stop":
            await asyncio.sleep(0.05)


# --- the readers process -------------------------------------------------------------------------

async def readers_main(port: int, phase_file: Path, *, following: int, slow: int, stalled: int,
                       pods: int, out: Path) -> None:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    results: list[tuple[int, int, bool]] = []
    stop = asyncio.Event()

    async def follow(k: int, session: aiohttp.ClientSession) -> None:
        pod = f"p-{k % pods}"
        async with session.get(f"http://127.0.0.1:{port}/logs/bench/{pod}", params={"follow": "true"}) as r:
            assert r.status == 200, r.status
            # Cheap enough for 200 readers in one process: count lines per chunk in C, and check
            # only the last complete line's number (lines of a pod are numbered 0, 1, 2, ...).
            expected = 0
            in_order = True
            tail = b""
            async for chunk in r.content.iter_any():
                data = tail + chunk
                cut = data.rfind(b"\n")
                if cut < 0:
                    tail = data
                    continue
                expected += data.count(b"\n", 0, cut + 1)
                last = data[data.rfind(b"\n", 0, cut) + 1:cut]
                tail = data[cut + 1:]
                in_order &= last.startswith(b"step ") and int(last[5:14]) == expected - 1
                if stop.is_set() and expected >= target[pod]:
                    break
            results.append((k, expected, in_order))

    async def slow_reader(k: int, session: aiohttp.ClientSession) -> None:
        async with session.get(f"http://127.0.0.1:{port}/logs/bench/p-{k % pods}",
                               params={"follow": "true"}) as r:
            while not stop.is_set():
                await r.content.read(4096)
                await asyncio.sleep(1.0)

    async def stalled_reader(k: int) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /logs/bench/p-{k % pods}?follow=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        await stop.wait()
        writer.close()

    target: dict[str, int] = {}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(follow(k, session)) for k in range(following)]
        tasks += [asyncio.create_task(slow_reader(k, session)) for k in range(slow)]
        tasks += [asyncio.create_task(stalled_reader(k)) for k in range(stalled)]
        await asyncio.sleep(2.0)
        phase_file.write_text("go")
        while not phase_file.read_text().startswith("{"):
            await asyncio.sleep(0.1)
        written = json.loads(phase_file.read_text())["written_per_pod"]
        target.update({f"p-{i}": n for i, n in enumerate(written)})
        stop.set()
        _, pending = await asyncio.wait(tasks[:following], timeout=120)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    out.write_text(json.dumps({"results": results, "timed_out": len(pending), "target": target}))


# --- the driver ----------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=100_000, help="lines written per second (all pods)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of writing per phase")
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--readers-following", type=int, default=200)
    parser.add_argument("--readers-slow", type=int, default=100)
    parser.add_argument("--readers-stalled", type=int, default=200)
    parser.add_argument("--role", choices=["driver", "server", "readers"], default="driver")
    parser.add_argument("--dir", type=Path)
    ns = parser.parse_args()
    if ns.role == "server":
        asyncio.run(server_main(ns.dir / "store", ns.dir / "port", rate=ns.rate, seconds=ns.seconds,
                                pods=ns.pods, phase_file=ns.dir / "phase",
                                caps=ns.readers_following + ns.readers_slow + ns.readers_stalled + 10))
        return
    if ns.role == "readers":
        asyncio.run(readers_main(int((ns.dir / "port").read_text()), ns.dir / "phase",
                                 following=ns.readers_following, slow=ns.readers_slow,
                                 stalled=ns.readers_stalled, pods=ns.pods, out=ns.dir / "readers.json"))
        return

    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        (work / "phase").write_text("baseline")
        common = ["--rate", str(ns.rate), "--seconds", str(ns.seconds), "--pods", str(ns.pods),
                  "--readers-following", str(ns.readers_following), "--readers-slow", str(ns.readers_slow),
                  "--readers-stalled", str(ns.readers_stalled), "--dir", str(work)]
        server = subprocess.Popen([sys.executable, __file__, "--role", "server", *common])
        while not (work / "port").exists() or (work / "phase").read_text() != "readers":
            if server.poll() is not None:
                sys.exit("the server process failed")
            time.sleep(0.05)
        idle_rss = rss(server.pid)
        readers = subprocess.Popen([sys.executable, __file__, "--role", "readers", *common])
        peak = idle_rss
        while readers.poll() is None:
            peak = max(peak, rss(server.pid))
            time.sleep(0.05)
        timing = json.loads((work / "phase").read_text())
        (work / "phase").write_text("stop")
        server.wait(30)
        phases = json.loads((work / "readers.json").read_text())
    written = phases["target"]
    complete = sum(1 for k, got, in_order in phases["results"]
                   if in_order and got >= written[f"p-{k % ns.pods}"])
    print(f"writer: {ns.rate:,} lines/s over {ns.pods} pods, {ns.seconds:.0f} s per phase; "
          f"readers: {ns.readers_following} following, {ns.readers_slow} slow, {ns.readers_stalled} stalled")
    print(f"write time with readers / without: {timing['loaded_s']:.2f} s / {timing['baseline_s']:.2f} s "
          f"= {timing['loaded_s'] / timing['baseline_s']:.3f}x (goal <= 1.10)")
    print(f"server RSS: {idle_rss / 2**20:.0f} MiB before readers, peak {peak / 2**20:.0f} MiB with them "
          f"= {peak / LIMIT:.2f}x the chart's 1 GiB limit")
    print(f"following readers that got every line, in order: {complete}/{ns.readers_following}"
          f" (still behind after 120 s: {phases['timed_out']})")


if __name__ == "__main__":
    main()
