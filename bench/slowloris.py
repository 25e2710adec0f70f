"""Slowloris against every podmortem server: RSS and descriptors before, during and after.

Each server runs in a process of its own, started as the product starts it:

* ``webhook``: ``admission.serve`` (TLS, a generated CA), as ``run_operator`` serves it;
* ``logs``: ``logs.serving.http.serve`` over a fresh log store, with the report page's routes;
* ``probes``: ``run.probe_servers`` (``/metrics`` and ``/healthz``, the health port attacked);
* ``agent``: the ``podmortem agent`` command itself (a static pod, the kernel log off).

This process then opens ``--connections`` (default 1,000) slow connections to loopback only
(TLS where the server is TLS), spread over 32 loopback source addresses (127.0.0.1 to
127.0.0.32, so both the per-peer and the total cap are met), each sending one byte of a request
header every ``--drip-s`` (default 5 s), and opening again whenever the server closes it, as a
slowloris does; for ``--hold-s`` (default 30 s). It samples the server's RSS (``VmRSS``) and open
descriptors (``/proc/PID/fd``) before (the baseline, after a warm-up request), at their highest
during, and ``--settle-s`` after the clients close. Flat: the highest RSS during is at most
``--max-rss-ratio`` (1.5) of the baseline, and the descriptors at most the baseline plus the
server's total connection cap (512; the webhook's 64) plus the listen backlog (128: asyncio accepts
up to that many in one turn, and a refused one is closed on the next): bounded by the cap, not by
the attack; and after, the descriptors back within 4 of the baseline (RSS is printed after too, but
not judged: the allocator keeps freed memory for reuse rather than giving it back). Exit 1 when a
server is not flat.

Run: ``.venv/bin/python bench/slowloris.py [--servers webhook,logs,probes,agent]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCES = 32
#: aiohttp's listen backlog, and so the most connections asyncio accepts in one turn of the loop.
BACKLOG = 128


# --- the server side: one per process ---------------------------------------------------------------


async def _serve(kind: str, workdir: Path) -> None:
    """Run one server until stdin closes; print ``{"port": N, "tls": bool}`` once it listens."""
    ready: dict[str, Any] = {}
    stack = contextlib.AsyncExitStack()
    async with stack:
        if kind == "webhook":
            from podmortem.operator.settings import SidecarInjectionSettings, WebhookSettings
            from podmortem.operator.watching import admission
            from podmortem_demo.emulated.tls import make_pki

            pki = make_pki(server_names=("127.0.0.1",))
            (workdir / "tls.crt").write_bytes(pki.server_pem)
            (workdir / "tls.key").write_bytes(pki.server_key)
            conf = WebhookSettings(tls_cert_file=workdir / "tls.crt", tls_key_file=workdir / "tls.key",
                                   port=0)
            serving = await stack.enter_async_context(admission.serve(
                webhook=conf, sidecar=SidecarInjectionSettings(image="podmortem:bench"), host="127.0.0.1"))
            ready = {"port": int(serving.url.rsplit(":", 1)[1]), "tls": True, "path": admission.PATH}
        elif kind == "logs":
            from podmortem.logs.serving import auth
            from podmortem.logs.serving import http as log_http
            from podmortem.logs.settings import HttpSettings
            from podmortem.logs.storage.store import LogStore, StoreSettings
            from podmortem.operator.reporting import report_page

            store = await stack.enter_async_context(
                LogStore(workdir / "store", settings=StoreSettings(fsync_interval_s=None)))
            off = auth.AuthSettings(authenticate=False, authorize=False)
            reviewer = auth.Reviewer(api=None, settings=off)
            conf = HttpSettings(host="127.0.0.1", port=0)
            app = log_http.make_app(log_store=store, reviewer=reviewer, settings=conf)
            report_page.add_routes(app, report_page.ReportFinder(kube=None, foreign=None))
            from podmortem import serving_limits

            run = log_http.runner(app, conf)
            await run.setup()
            stack.push_async_callback(run.cleanup)
            await serving_limits.start(run, host="127.0.0.1", port=0)
            ready = {"port": run.addresses[0][1], "tls": False, "path": "/logs/ns/p"}
        elif kind == "probes":
            from podmortem.operator.settings import OperatorSettings
            from podmortem.operator.watching import run as operator_run

            settings = OperatorSettings(listen_host="127.0.0.1", metrics_port=0, health_port=0)
            servers = await stack.enter_async_context(operator_run.probe_servers(
                settings, is_ready=lambda: (True, "ready"), is_alive=lambda: (True, "alive")))
            ready = {"port": int(servers.health_url.rsplit(":", 1)[1]), "tls": False, "path": "/healthz"}
        else:
            raise SystemExit(f"unknown server {kind}")
        print(json.dumps(ready), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    kind: str
    process: subprocess.Popen[str]
    port: int
    tls: bool
    path: str

    def sample(self) -> tuple[int, int]:
        """(RSS bytes, open descriptors) of the server process."""
        pid = self.process.pid
        rss = 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        return rss, len(os.listdir(f"/proc/{pid}/fd"))

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start(kind: str, workdir: Path) -> Server:
    path = os.pathsep.join([str(ROOT / "operator"), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    if kind == "agent":
        port = _free_port()
        cgroup = workdir / "cgroup"
        cgroup.mkdir()
        command = [sys.executable, "-m", "podmortem.cli.main", "agent", "--static-pod", f"bench-uid={cgroup}",
                   "--kernel-log-source", "off", "--state-dir", str(workdir / "state"), "--host", "127.0.0.1",
                   "--port", str(port), "--metrics-port", str(port), "--proc-root", "/proc",
                   "--cgroup-root", str(cgroup), "--log-level", "warning"]
        process = subprocess.Popen(command, stdin=subprocess.PIPE, text=True, env=env)
        server = Server(kind, process, port, False, "/healthz")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # up when it answers
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                return server
            if process.poll() is not None:
                raise SystemExit(f"podmortem agent exited with {process.returncode}")
            time.sleep(0.2)
        raise SystemExit("podmortem agent did not listen within 60 s")
    process = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--workdir", str(workdir)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    ready = json.loads(process.stdout.readline())
    return Server(kind, process, ready["port"], ready["tls"], ready["path"])


# --- the attacking side ------------------------------------------------------------------------------


@dataclass
class Attack:
    opened: int = 0
    cut: int = 0
    refused: int = 0
    failed: int = 0


async def _warm_up(server: Server, tls: ssl.SSLContext | None) -> None:
    """One complete request, so that the baseline includes what serving costs once."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=tls)
    writer.write(f"GET {server.path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    async with asyncio.timeout(30):
        await reader.read()
    writer.close()


async def _slow_client(i: int, server: Server, tls: ssl.SSLContext | None, until: float, drip_s: float,
                       attack: Attack) -> None:
    source = f"127.0.0.{1 + i % SOURCES}"
    header = f"GET {server.path} HTTP/1.1\r\nHost: x\r\nX-Slow: ".encode() + b"a" * 100_000
    loop = asyncio.get_running_loop()
    while loop.time() < until:
        try:
            async with asyncio.timeout(max(0.1, until - loop.time())):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", server.port, ssl=tls, local_addr=(source, 0),
                    ssl_handshake_timeout=30 if tls else None)
        except (OSError, TimeoutError, ssl.SSLError):
            attack.failed += 1
            await asyncio.sleep(1)
            continue
        attack.opened += 1
        try:
            for byte in header:
                writer.write(bytes([byte]))
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(drip_s, max(0.0, until - loop.time()))):
                        got = await reader.read(1024)
                        if got.startswith(b"HTTP/1.1 503"):
                            attack.refused += 1
                        else:
                            attack.cut += 1
                        break  # the server answered or closed: open again
                if loop.time() >= until:
                    break
        except (OSError, ssl.SSLError):
            attack.cut += 1
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        await asyncio.sleep(0.5)


async def attack(server: Server, *, connections: int, hold_s: float, drip_s: float, settle_s: float,
                 max_rss_ratio: float, cap: int) -> dict[str, Any]:
    tls: ssl.SSLContext | None = None
    if server.tls:
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE  # the bench's own server on loopback
    await _warm_up(server, tls)
    await asyncio.sleep(1)
    rss0, fds0 = server.sample()
    stats = Attack()
    loop = asyncio.get_running_loop()
    until = loop.time() + hold_s
    clients = [asyncio.create_task(_slow_client(i, server, tls, until, drip_s, stats))
               for i in range(connections)]
    rss_max, fds_max = rss0, fds0
    while loop.time() < until:
        await asyncio.sleep(1)
        rss, fds = server.sample()
        rss_max, fds_max = max(rss_max, rss), max(fds_max, fds)
    await asyncio.gather(*clients, return_exceptions=True)
    await asyncio.sleep(settle_s)
    rss1, fds1 = server.sample()
    flat = rss_max <= rss0 * max_rss_ratio and fds_max <= fds0 + cap + BACKLOG and fds1 <= fds0 + 4
    return {
        "server": server.kind, "connections": connections, "hold_s": hold_s,
        "rss_mib": [round(rss0 / 2**20, 1), round(rss_max / 2**20, 1), round(rss1 / 2**20, 1)],
        "fds": [fds0, fds_max, fds1],
        "rss_ratio": [round(rss_max / rss0, 2), round(rss1 / rss0, 2)],
        "fds_ratio": [round(fds_max / fds0, 2), round(fds1 / fds0, 2)],
        "opened": stats.opened, "refused_503": stats.refused, "cut": stats.cut, "failed": stats.failed,
        "flat": flat,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--servers", default="webhook,logs,probes,agent")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--hold-s", type=float, default=30.0)
    parser.add_argument("--drip-s", type=float, default=5.0)
    parser.add_argument("--settle-s", type=float, default=3.0)
    parser.add_argument("--max-rss-ratio", type=float, default=1.5)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, Path(args.workdir)))
        return 0
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.connections + 256)), hard))
    from podmortem.operator.settings import WebhookSettings
    from podmortem.serving_limits import ServerLimits

    caps = {"webhook": WebhookSettings(tls_cert_file=Path("-"), tls_key_file=Path("-")).connections}
    results = []
    for kind in args.servers.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            server = start(kind, Path(tmp))
            try:
                result = asyncio.run(attack(server, connections=args.connections, hold_s=args.hold_s,
                                            drip_s=args.drip_s, settle_s=args.settle_s,
                                            max_rss_ratio=args.max_rss_ratio,
                                            cap=caps.get(kind, ServerLimits()).max_connections))
            finally:
                server.stop()
        results.append(result)
        print(f"{kind:8} RSS MiB before/during/after {result['rss_mib']} (x{result['rss_ratio'][0]} during, "
              f"x{result['rss_ratio'][1]} after); fds {result['fds']} (x{result['fds_ratio'][0]}, "
              f"x{result['fds_ratio'][1]}); {result['opened']} opened, {result['refused_503']} refused 503, "
              f"{result['cut']} cut, {result['failed']} failed; {'flat' if result['flat'] else 'NOT FLAT'}",
              flush=True)
    print(json.dumps(results))
    return 0 if all(r["flat"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
