"""``podmortem logs``: a ``kubectl logs -f`` that reconnects, never repeats a line, never loses one.

Lines go to stdout exactly once, in order, as raw bytes; reconnects, gaps and
the end of the log go to stderr. Exit 0 when the containers terminated and
their tails were read, 0 with a note when the pod was deleted, 1 with a
one-line reason otherwise. Heavy imports happen inside :func:`run`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from collections.abc import Sequence

    from podmortem.logs.cursor import LogCursor
    from podmortem.logs.events import GapMarker, LogEnd, LogLine


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "logs",
        help="print a pod's logs like `kubectl logs`, surviving stream cuts and restarts",
        description="Print a pod's container logs. With --follow, keep following across stream "
                    "ends, read timeouts, API errors and container restarts, printing every line "
                    "exactly once. Reconnects and possible gaps are reported on stderr.",
    )
    parser.add_argument("pod", metavar="POD", help="pod name")
    parser.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig's, else 'default')")
    parser.add_argument("-c", "--container", action="append", dest="containers", metavar="CONTAINER",
                        help="container to print (repeatable; default: all, prefixed when several)")
    parser.add_argument("-f", "--follow", action="store_true", help="keep following until the pod ends")
    parser.add_argument("--timestamps", action="store_true", help="keep each line's RFC3339 timestamp")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then in-cluster)")
    parser.add_argument("--read-timeout", type=float, default=120.0, metavar="S",
                        help="seconds of silence before a stream is reopened (default: 120)")
    parser.add_argument("--backoff-min", type=float, default=2.0, metavar="S",
                        help="first pause after an API error (default: 2, doubling)")
    parser.add_argument("--backoff-max", type=float, default=30.0, metavar="S",
                        help="longest pause after API errors (default: 30)")
    parser.add_argument("--store", metavar="DIR",
                        help="also keep lines in a durable log store here; a rerun resumes after the "
                             "last stored line instead of printing the log again")
    parser.set_defaults(func=run)


class StdoutSink:
    """Writes lines to stdout as raw bytes, one write per batch; notes go to stderr."""

    def __init__(self, out: BinaryIO, *, timestamps: bool, prefix: bool, err: Any = None) -> None:
        self._out = out
        self._timestamps = timestamps
        self._prefix = prefix
        self._err = err if err is not None else sys.stderr
        self.ends: list[LogEnd] = []

    async def load_cursor(self, container: str) -> LogCursor | None:
        return None

    async def write(self, container: str, lines: Sequence[LogLine], cursor: LogCursor) -> None:
        from podmortem.logs.lines import LineBatch

        if isinstance(lines, LineBatch):
            block = lines.text_block(timestamps=self._timestamps)
        else:
            block = b"".join(_render(line, self._timestamps) for line in lines)
        if self._prefix:
            tag = f"[{container}] ".encode()
            block = b"".join(tag + line for line in block.splitlines(keepends=True))
        self._out.write(block)

    async def gap(self, marker: GapMarker) -> None:
        from podmortem.logs import timestamps

        def when(ts: int | None) -> str:
            return timestamps.format_ns(ts) if ts is not None else "?"
        self._out.flush()
        print(f"podmortem: [{marker.container}] possible gap ({marker.reason}) between "
              f"{when(marker.after_ts_ns)} and {when(marker.before_ts_ns)}: {marker.detail}",
              file=self._err, flush=True)

    async def end(self, end: LogEnd) -> None:
        self.ends.append(end)
        self._out.flush()


def _render(line: LogLine, timestamps_on: bool) -> bytes:
    if not timestamps_on:
        return line.text + b"\n"
    from podmortem.logs import timestamps

    return timestamps.format_ns(line.ts_ns).encode() + b" " + line.text + b"\n"


class TeeSink:
    """Stores lines durably first, then prints them; the store's cursor is the resume point."""

    def __init__(self, store_sink: Any, printer: StdoutSink) -> None:
        self._store = store_sink
        self._printer = printer

    async def load_cursor(self, container: str) -> LogCursor | None:
        cursor: LogCursor | None = await self._store.load_cursor(container)
        return cursor

    async def write(self, container: str, lines: Sequence[LogLine], cursor: LogCursor) -> None:
        await self._store.write(container, lines, cursor)
        await self._printer.write(container, lines, cursor)

    async def gap(self, marker: GapMarker) -> None:
        await self._store.gap(marker)
        await self._printer.gap(marker)

    async def end(self, end: LogEnd) -> None:
        await self._store.end(end)
        await self._printer.end(end)


def run(args: argparse.Namespace) -> int:
    import asyncio

    try:
        return asyncio.run(_run(args))
    except Exception as exc:  # the one-line reason; a traceback helps no user here
        sys.stdout.flush()
        print(f"podmortem logs: error: {_one_line(exc)}", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


async def _api_client(kubeconfig: str | None) -> tuple[Any, str | None]:
    """An ApiClient from --kubeconfig, then $KUBECONFIG, then in-cluster; and its namespace."""
    import os

    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    configuration.connection_pool_maxsize = 0
    path = kubeconfig or os.environ.get("KUBECONFIG")
    namespace: str | None = None
    if path:
        path = path.split(os.pathsep)[0]
        await config.load_kube_config(config_file=path, client_configuration=configuration,
                                      persist_config=False)
        _contexts, active = config.list_kube_config_contexts(config_file=path)
        namespace = (active or {}).get("context", {}).get("namespace")
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException as exc:
            raise RuntimeError("no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a pod") from exc
        ns_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
        if os.path.exists(ns_file):
            with open(ns_file) as f:
                namespace = f.read().strip() or None
    return client.ApiClient(configuration), namespace


async def _run(args: argparse.Namespace) -> int:
    import contextlib

    from podmortem.logs import errors, follower, kube
    from podmortem.logs.events import EndReason
    from podmortem.logs.settings import FollowSettings

    settings = FollowSettings(read_timeout_s=args.read_timeout, backoff_min_s=args.backoff_min,
                              backoff_max_s=max(args.backoff_max, args.backoff_min))
    api_client, kube_namespace = await _api_client(args.kubeconfig)
    namespace = args.namespace or kube_namespace or "default"
    out = sys.stdout.buffer
    async with api_client, contextlib.AsyncExitStack() as stack:
        api = kube.PodLogApi(api_client, settings=settings)
        containers = args.containers
        if not containers:
            from podmortem.logs import podstate

            try:
                pod = await api.read_pod(namespace=namespace, name=args.pod)
            except errors.PodGone as exc:
                raise LookupError(f"pod {namespace}/{args.pod} not found") from exc
            containers = podstate.container_names(pod)
        printer = StdoutSink(out, timestamps=args.timestamps, prefix=len(containers) > 1)
        sink: Any = printer
        if args.store:
            from podmortem.logs import store as store_module

            log_store = await stack.enter_async_context(store_module.LogStore(args.store))
            sink = TeeSink(log_store.sink(namespace=namespace, pod=args.pod), printer)
        try:
            ends = await follower.follow_pod(api=api, namespace=namespace, pod=args.pod, sink=sink,
                                             containers=containers, settings=settings, follow=args.follow)
        except errors.PodGone as exc:
            raise LookupError(f"pod {namespace}/{args.pod} not found") from exc
        finally:
            with contextlib.suppress(BrokenPipeError):
                out.flush()
    if any(end.reason is EndReason.POD_DELETED for end in ends.values()):
        print(f"podmortem logs: note: pod {namespace}/{args.pod} was deleted; its log ends here",
              file=sys.stderr)
    return 0
