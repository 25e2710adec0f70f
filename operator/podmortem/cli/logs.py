"""``podmortem logs``: a ``kubectl logs -f`` that reconnects, never repeats a line, never loses one.

Lines go to stdout exactly once, in order, as raw bytes; reconnects, gaps and
the end of the log go to stderr. Exit 0 when the containers terminated and
their tails were read, 0 with a note when the pod was deleted, 1 with a
one-line reason otherwise; 2 with one line naming the option when a value
cannot be used (checked before the kubeconfig is read). Heavy imports happen
inside :func:`run`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Any

from podmortem.cli import options as o

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from podmortem.kube.config import ClusterAccess
    from podmortem.logs.settings import FollowSettings

NAMESPACE = o.Option(("-n", "--namespace"), None, o.dns_label("namespace name"), None, "namespace", "NS",
                     shown_default="the kubeconfig's, else 'default'")
CONTAINERS = o.Option(("-c", "--container"), None, o.dns_labels("container name"), None,
                      "container to print (repeatable)", "CONTAINER",
                      shown_default="all, prefixed when several", action="append", dest_name="containers")
READ_TIMEOUT = o.Option(("--read-timeout",), None, o.seconds(above=0, high=86400), "120",
                        "seconds of silence before a stream is reopened; above 0, at most 86400", "S")
BACKOFF_MIN = o.Option(("--backoff-min",), None, o.seconds(above=0, high=3600), "2",
                       "first pause after an API error, doubling; above 0, at most --backoff-max", "S")
BACKOFF_MAX = o.Option(("--backoff-max",), None, o.seconds(above=0, high=3600), "30",
                       "longest pause after API errors; above 0, at most 3600", "S")
STORE = o.Option(("--store",), None, o.path, None,
                 "also keep lines in a durable log store here (created if missing); a rerun resumes after "
                 "the last stored line instead of printing the log again", "DIR")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "logs",
        help="print a pod's logs like `kubectl logs`, surviving stream cuts and restarts",
        description="Print a pod's container logs. With --follow, keep following across stream "
                    "ends, read timeouts, API errors and container restarts, printing every line "
                    "exactly once. Reconnects and possible gaps are reported on stderr.",
        epilog="exit status: 0 when the containers terminated and their logs were read to the end "
               "(or, without --follow, when the log was printed); 0 with a note when the pod was "
               "deleted while followed; 1 with a one-line reason otherwise (pod not found, no or bad "
               "kubeconfig, API unreachable at the start, access denied); 2 with one line naming the "
               "option for a value that cannot be used, before anything is read.",
    )
    parser.add_argument("pod", metavar="POD", help="pod name")
    o.add_all(parser, (NAMESPACE, CONTAINERS))
    parser.add_argument("-f", "--follow", action="store_true", help="keep following until the pod ends")
    parser.add_argument("--timestamps", action="store_true", help="keep each line's RFC3339 timestamp")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then the pod's "
                                             "service account, then ~/.kube/config)")
    o.add_all(parser, (READ_TIMEOUT, BACKOFF_MIN, BACKOFF_MAX, STORE))
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also report streams reopened after --read-timeout seconds of silence")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="do not report reconnects (possible gaps are always reported)")
    parser.set_defaults(func=run)


def _import_aiohttp() -> None:
    """Import aiohttp without the system CA bundle it loads twice at import and we never use.

    aiohttp builds two default TLS contexts when ``aiohttp.connector`` is imported,
    each loading the system CA bundle: a tenth of a second or more on a busy node,
    as long as ``kubectl logs`` takes for 100k lines. Every request here passes its
    own context (or none, for http), so those defaults stay unused: they are built
    with an empty CA location, restored right after (OpenSSL reads these variables
    whenever a context loads its default paths, so contexts made later, ours
    included, see the real system bundle).
    """
    import os

    saved = {name: os.environ.get(name) for name in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    os.environ.update(SSL_CERT_FILE=os.devnull, SSL_CERT_DIR=os.devnull)
    try:
        import aiohttp.connector  # noqa: F401
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def follow_settings(args: argparse.Namespace) -> FollowSettings:
    """The follower's settings from the command line; raises a one-line SettingError for a bad value."""
    from podmortem.logs.settings import FollowSettings

    v = o.Values(args)
    backoff_min, backoff_max = v.value(BACKOFF_MIN), v.value(BACKOFF_MAX)
    if backoff_min > backoff_max:
        raise v.conflict("the first pause must not be longer than the longest", BACKOFF_MIN, BACKOFF_MAX)
    return FollowSettings(read_timeout_s=v.value(READ_TIMEOUT), backoff_min_s=backoff_min,
                          backoff_max_s=backoff_max, start_attempts=4)


def check_args(args: argparse.Namespace) -> None:
    """Every option (and the pod's name) can be used, and the --store directory can be written."""
    v = o.Values(args)
    try:
        o.dns_subdomain("pod name")(args.pod)
    except ValueError as exc:
        raise o.SettingError(f"POD={args.pod!r}: {exc}") from None
    v.optional(NAMESPACE)
    v.optional(CONTAINERS)
    follow_settings(args)
    store = v.optional(STORE)
    if store is not None:
        o.check_directory(v, STORE, store)


def run(args: argparse.Namespace) -> int:
    import asyncio

    try:
        check_args(args)
    except o.SettingError as exc:
        print(f"podmortem logs: {exc}", file=sys.stderr)
        return 2

    from podmortem.kube import config as kubeconfig

    try:
        _import_aiohttp()
        # Read before the event loop starts: file reads and TLS set-up block.
        access = kubeconfig.load(args.kubeconfig)
        return asyncio.run(_run(args, access))
    except BrokenPipeError:
        _silence_stdout()  # `podmortem logs ... | head`: the reader left; not an error
        return 0
    except Exception as exc:  # the one-line reason; a traceback helps no user here
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _silence_stdout()
        print(f"podmortem logs: error: {_one_line(exc)}", file=sys.stderr)
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _one_line(exc: BaseException) -> str:
    """The error's first line; the class name only where the message alone would not say enough."""
    from podmortem.kube.config import KubeconfigError

    text = str(exc).strip().splitlines()
    if text and isinstance(exc, LookupError | KubeconfigError):
        return text[0]
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


@contextlib.asynccontextmanager
async def _transport(access: ClusterAccess) -> AsyncIterator[Any]:
    """Plain aiohttp for the usual kubeconfigs; kubernetes_asyncio's client for auth plugins."""
    from podmortem.logs.following import pod_log_api

    if not access.plugin:
        async with pod_log_api.SessionTransport(access) as transport:
            yield transport
        return
    from podmortem.kube import clients

    configuration = await clients.api_configuration(access)  # runs the plugin, refreshes its token
    configuration.connection_pool_maxsize = 0  # one connection per followed container
    async with clients.api_client(configuration) as api_client:
        yield api_client


async def _run(args: argparse.Namespace, access: ClusterAccess) -> int:
    from podmortem.logs import errors
    from podmortem.logs.events import EndReason
    from podmortem.logs.following import follower, pod_log_api, podstate
    from podmortem.logs.following.sinks import StdoutSink, TeeSink

    settings = follow_settings(args)
    namespace = o.Values(args).optional(NAMESPACE) or access.namespace or "default"
    printer = StdoutSink(sys.stdout.buffer, timestamps=args.timestamps, prefix=False)

    def on_reconnect(event: follower.Reconnect) -> None:
        # A quiet stream reopened after the read timeout is routine; say so only when asked.
        if not args.quiet and (event.reason != "read-timeout" or args.verbose):
            printer.reconnect(event)

    async with _transport(access) as transport, contextlib.AsyncExitStack() as stack:
        api = pod_log_api.PodLogApi(transport, settings=settings)
        given = o.Values(args).optional(CONTAINERS)
        containers = list(given) if given else []
        if not containers:
            try:
                # Retried quietly a few times: if the API cannot be read at all, one line says why.
                pod = await follower.read_pod(api=api, namespace=namespace, pod=args.pod, settings=settings)
            except errors.PodGone as exc:
                raise LookupError(f"pod {namespace}/{args.pod} not found") from exc
            containers = podstate.container_names(pod)
        printer.prefix = len(containers) > 1
        sink: Any = printer
        if args.store:
            from podmortem.logs.storage import store as store_module

            log_store = await stack.enter_async_context(store_module.LogStore(args.store))
            sink = TeeSink(log_store.sink(namespace=namespace, pod=args.pod), printer)
        try:
            ends = await follower.follow_pod(api=api, namespace=namespace, pod=args.pod, sink=sink,
                                             containers=containers, settings=settings, follow=args.follow,
                                             on_reconnect=on_reconnect)
        except errors.PodGone as exc:
            raise LookupError(f"pod {namespace}/{args.pod} not found") from exc
        finally:
            printer.flush()
    if any(end.reason is EndReason.POD_DELETED for end in ends.values()):
        printer.note(f"pod {namespace}/{args.pod} was deleted; its log ends here")
    return 0
