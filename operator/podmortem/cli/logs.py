"""``podmortem logs``: a ``kubectl logs -f`` that reconnects, never repeats a line, never loses one.

Lines go to stdout exactly once, in order, as raw bytes; reconnects, gaps and
the end of the log go to stderr. Exit 0 when the containers terminated and
their tails were read, 0 with a note when the pod was deleted, 1 with a
one-line reason otherwise; 2 with one line naming the option when a value
cannot be used (checked before the kubeconfig is read). Heavy imports happen
inside :func:`run`.

The flags are ``kubectl logs``'s (``-l``, ``--tail``, ``--since``, ``--since-time``, ``--previous``,
``--all-containers``, ``--timestamps``, ``-f``), with stern's ``pod container`` prefix when several
logs share stdout (`logs_output`). A pod that is gone, or an earlier instance the kubelet no longer
has, is read from the operator's stored copy (`logs_stored`).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from podmortem.cli import options as o

if TYPE_CHECKING:
    from collections.abc import Callable

    from podmortem.kube.config import ClusterAccess
    from podmortem.logs.following.sinks import StdoutSink
    from podmortem.logs.settings import FollowSettings

NAMESPACE = o.Option(("-n", "--namespace"), None, o.dns_label("namespace name"), None, "namespace", "NS",
                     shown_default="the kubeconfig's, else 'default'")
CONTAINERS = o.Option(("-c", "--container"), None, o.dns_labels("container name"), None,
                      "container to print (repeatable)", "CONTAINER",
                      shown_default="the pod's default container, as kubectl", action="append",
                      dest_name="containers")
READ_TIMEOUT = o.Option(("--read-timeout",), None, o.seconds(above=0, high=86400), "120",
                        "seconds of silence before a stream is reopened; above 0, at most 86400", "S")
BACKOFF_MIN = o.Option(("--backoff-min",), None, o.seconds(above=0, high=3600), "2",
                       "first pause after an API error, doubling; above 0, at most --backoff-max", "S")
BACKOFF_MAX = o.Option(("--backoff-max",), None, o.seconds(above=0, high=3600), "30",
                       "longest pause after API errors; above 0, at most 3600", "S")
SELECTOR = o.Option(("-l", "--selector"), None, o.text("a label selector"), None,
                    "the pods to print, by label (key=value, key!=value, key in (a,b), ...), as kubectl's",
                    "SELECTOR")
TAIL = o.Option(("--tail",), None, o.whole("a number of lines", low=-1), None,
                "only the last N lines of each log; -1 all", "N",
                shown_default="-1, or 10 with -l, as kubectl")
SINCE = o.Option(("--since",), None, lambda text: _duration_s(text), None,
                 "only lines newer than this long ago (5s, 2m, 3h, 1h30m)", "DURATION", shown_default="all")
SINCE_TIME = o.Option(("--since-time",), None, lambda text: _rfc3339_ns(text), None,
                      "only lines at or after this time (RFC3339, 2024-05-01T12:00:00Z)", "TIME",
                      shown_default="all")
COLOR = o.Option(("--color",), None, o.choice("auto", "always", "never"), "auto",
                 "colour the pod and container names: auto (on a terminal), always, never", "WHEN")
OPERATOR_NAMESPACE = o.Option(("--operator-namespace",), None, o.dns_label("namespace name"), None,
                              "where podmortem's operator runs, for the stored copy of a deleted pod", "NS",
                              shown_default="found by the chart's labels, else 'podmortem'")
STORE = o.Option(("--store",), None, o.path, None,
                 "also keep lines in a durable log store here (created if missing); a rerun resumes after "
                 "the last stored line instead of printing the log again", "DIR")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "logs",
        help="print a pod's logs like `kubectl logs`, surviving stream cuts and restarts",
        description="Print a pod's container logs. With --follow, keep following across stream "
                    "ends, read timeouts, API errors and container restarts, printing every line "
                    "exactly once. Reconnects and possible gaps are reported on stderr. A pod that is "
                    "gone (or an earlier instance the kubelet no longer has) is read from the operator's "
                    "stored copy, through the API server with your kubeconfig.",
        epilog="exit status: 0 when the containers terminated and their logs were read to the end "
               "(or, without --follow, when the log was printed); 0 with a note when the pod was "
               "deleted while followed; 1 with a one-line reason otherwise (pod not found, no or bad "
               "kubeconfig, API unreachable at the start, access denied); 2 with one line naming the "
               "option for a value that cannot be used, before anything is read.",
    )
    parser.add_argument("pod", metavar="POD", nargs="?", help="pod name (or -l SELECTOR)")
    o.add_all(parser, (NAMESPACE, CONTAINERS, SELECTOR))
    parser.add_argument("--all-containers", action="store_true",
                        help="every container of the pod(s) (default: the one -c names, else the pod's "
                             "kubectl.kubernetes.io/default-container, else its first, as kubectl)")
    parser.add_argument("-f", "--follow", action="store_true", help="keep following until the pod ends")
    parser.add_argument("-p", "--previous", action="store_true",
                        help="the previous instance of the container (before its last restart); from the "
                             "operator's stored copy when the kubelet no longer has it")
    o.add_all(parser, (TAIL, SINCE, SINCE_TIME))
    parser.add_argument("--timestamps", action="store_true", help="keep each line's RFC3339 timestamp")
    parser.add_argument("--prefix", action="store_true",
                        help="prefix each line with its pod and container even when only one log is printed "
                             "(several always are)")
    o.add_all(parser, (COLOR, OPERATOR_NAMESPACE))
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


#: Go's duration units (``time.ParseDuration``, what kubectl reads ``--since`` with), in seconds.
_UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def _duration_s(text: str) -> float:
    """A positive Go duration (``90s``, ``1h30m``, ``1.5h``), in seconds."""
    value = text.strip()
    parts = _DURATION_PART.findall(value)
    if not value or "".join(n + u for n, u in parts) != value:
        raise ValueError("expected a duration such as 5s, 2m, 3h or 1h30m")
    seconds = sum(float(n) * _UNITS_S[u] for n, u in parts)
    if not seconds > 0:
        raise ValueError("must be greater than 0")
    return seconds


def _rfc3339_ns(text: str) -> int:
    from podmortem.logs import timestamps

    try:
        return timestamps.parse_ns(text.strip().encode())
    except (ValueError, OverflowError, UnicodeEncodeError):
        raise ValueError("expected an RFC3339 time such as 2024-05-01T12:00:00Z") from None


def check_args(args: argparse.Namespace) -> None:
    """Every option (and the pod's name) can be used, and the --store directory can be written."""
    v = o.Values(args)
    selector = v.optional(SELECTOR)
    if args.pod is None and selector is None:
        raise o.SettingError("give a POD name, or -l SELECTOR")
    if args.pod is not None and selector is not None:
        raise o.SettingError(f"POD={args.pod!r} and {v.where(SELECTOR)}: give one of them, not both")
    if args.pod is not None:
        try:
            o.dns_subdomain("pod name")(args.pod)
        except ValueError as exc:
            raise o.SettingError(f"POD={args.pod!r}: {exc}") from None
    v.optional(NAMESPACE)
    if v.optional(CONTAINERS) and args.all_containers:
        raise o.SettingError(f"{v.where(CONTAINERS)} and --all-containers: give one of them, not both")
    v.optional(TAIL)
    since, since_time = v.optional(SINCE), v.optional(SINCE_TIME)
    if since is not None and since_time is not None:
        raise v.conflict("give one of them, not both (as kubectl)", SINCE, SINCE_TIME)
    v.value(COLOR)
    v.optional(OPERATOR_NAMESPACE)
    follow_settings(args)
    store = v.optional(STORE)
    if store is not None:
        o.check_directory(v, STORE, store)
        if selector is not None:
            raise o.SettingError(f"{v.where(STORE)} keeps one pod's log: give a POD, not -l")


@dataclass(frozen=True)
class Request:
    """What the command line asks of each log: where it starts, which instance, how it ends."""

    namespace: str
    #: Lines from each log's end (``--tail``); None: all.
    tail: int | None
    #: ``--since``/``--since-time`` as an RFC3339 time; None: from the start.
    since: str | None
    previous: bool
    follow: bool

    @classmethod
    def of(cls, args: argparse.Namespace, access: ClusterAccess) -> Request:
        import time

        from podmortem.logs import timestamps

        v = o.Values(args)
        tail = v.optional(TAIL)
        if tail is None:
            tail = 10 if v.optional(SELECTOR) is not None else -1  # kubectl's defaults
        since_ns = v.optional(SINCE_TIME)
        ago = v.optional(SINCE)
        if ago is not None:
            since_ns = max(0, time.time_ns() - int(ago * 1e9))
        return cls(namespace=v.optional(NAMESPACE) or access.namespace or "default",
                   tail=None if tail < 0 else tail,
                   since=None if since_ns is None else timestamps.format_ns(since_ns),
                   previous=bool(args.previous), follow=bool(args.follow) and not args.previous)


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
    from podmortem.cli.logs_stored import StoredCopyError
    from podmortem.kube.config import KubeconfigError
    from podmortem.kube.portforward import PortForwardError
    from podmortem.logs.errors import ApiFatal

    text = str(exc).strip().splitlines()
    said = (LookupError, KubeconfigError, StoredCopyError, PortForwardError, ApiFatal)  # say what they are
    if text and isinstance(exc, said):
        return text[0]
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


#: The annotation naming the container ``kubectl logs`` prints when none is chosen.
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"


def choose_containers(pod: dict[str, Any], args: argparse.Namespace, note: Callable[[str], None]
                      ) -> list[str]:
    """The containers to print, as kubectl chooses them; LookupError naming those that exist for a
    ``-c`` the pod does not have."""
    from podmortem.logs.following import podstate

    names = podstate.container_names(pod)
    meta = pod.get("metadata") or {}
    where = f"pod {meta.get('namespace')}/{meta.get('name')}"
    chosen_names = o.Values(args).optional(CONTAINERS)
    given = list(chosen_names) if chosen_names else []
    if given:
        unknown = [c for c in given if c not in names]
        if unknown:
            raise LookupError(f"container {unknown[0]!r} is not in {where}; its containers: "
                              f"{', '.join(names) or 'none'}")
        return given
    if args.all_containers or len(names) <= 1:
        return names
    default = (meta.get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
    chosen = default if default in names else names[0]
    note(f'Defaulted container "{chosen}" out of: {", ".join(names)} (--all-containers prints them all)')
    return [chosen]


async def _list_pods(transport: Any, namespace: str, selector: str, settings: FollowSettings
                     ) -> list[dict[str, Any]]:
    """The pods ``selector`` matches now, by name (``kubectl logs -l`` reads those; it does not wait
    for more)."""
    import json

    import aiohttp

    from podmortem.logs.following import pod_log_api

    path = f"/api/v1/namespaces/{namespace}/pods"
    try:
        response = await transport.get(path, query=[("labelSelector", selector)],
                                       client_timeout=aiohttp.ClientTimeout(total=settings.pod_read_timeout_s))
        try:
            body = await response.read()
        finally:
            response.release()
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise LookupError(f"listing pods in {namespace}: {type(exc).__name__}: {exc}") from exc
    if response.status != 200:
        raise LookupError(str(pod_log_api.error_for(response.status, response.headers, body,
                                                    what=f"listing pods in {namespace} by {selector!r}")))
    items: list[dict[str, Any]] = json.loads(body).get("items") or []
    return sorted(items, key=lambda p: str(p["metadata"]["name"]))


async def _run(args: argparse.Namespace, access: ClusterAccess) -> int:
    from podmortem.background import Background
    from podmortem.cli import logs_output
    from podmortem.logs import errors
    from podmortem.logs.events import EndReason, LogEnd
    from podmortem.logs.following import follower, pod_log_api
    from podmortem.logs.following.sinks import StdoutSink, TeeSink

    settings = follow_settings(args)
    request = Request.of(args, access)
    namespace = request.namespace
    v = o.Values(args)
    colour = logs_output.use_colour(v.value(COLOR), sys.stdout)
    notes = StdoutSink(sys.stdout.buffer, timestamps=args.timestamps, prefix=False)

    def printer_for(pod: str, prefixed: bool) -> StdoutSink:
        tag = logs_output.prefixer(pod, colour=colour) if prefixed else False
        return StdoutSink(sys.stdout.buffer, timestamps=args.timestamps, prefix=tag)

    def on_reconnect(event: follower.Reconnect) -> None:
        # A quiet stream reopened after the read timeout is routine; say so only when asked.
        if not args.quiet and (event.reason != "read-timeout" or args.verbose):
            notes.reconnect(event)

    transport = pod_log_api.SessionTransport(access, limit=pod_log_api.follow_limit(settings))
    async with transport, contextlib.AsyncExitStack() as stack:
        api = pod_log_api.PodLogApi(transport, settings=settings)
        selector = v.optional(SELECTOR)
        live: list[tuple[str, list[str]]] = []
        gone: str | None = None
        if selector is not None:
            pods = await _list_pods(transport, namespace, selector, settings)
            if not pods:
                notes.note(f"No resources found in {namespace} namespace.")
                return 0
            live = [(p["metadata"]["name"], choose_containers(p, args, notes.note)) for p in pods]
        else:
            try:
                # Retried quietly a few times: if the API cannot be read at all, one line says why.
                pod = await follower.read_pod(api=api, namespace=namespace, pod=args.pod, settings=settings)
            except errors.PodGone:
                gone = args.pod
            else:
                live = [(args.pod, choose_containers(pod, args, notes.note))]
        if gone is not None:
            chosen_names = v.optional(CONTAINERS)
            given = list(chosen_names) if chosen_names else []
            printer = printer_for(gone, args.prefix or len(given) > 1)
            try:
                await _read_stored(args, access, request, pod=gone, containers=given, printer=printer,
                                   why=f"pod {namespace}/{gone} is gone",
                                   failed=f"pod {namespace}/{gone} not found")
            finally:
                printer.flush()
            return 0
        prefixed = args.prefix or sum(len(containers) for _, containers in live) > 1
        if request.previous:
            for name, containers in live:
                printer = printer_for(name, prefixed)
                try:
                    for container in containers:
                        await _read_previous(args, access, api, request, pod=name, container=container,
                                             printer=printer)
                finally:
                    printer.flush()
            return 0
        store_sink: Any = None
        if args.store:
            from podmortem.logs.storage import store as store_module

            log_store = await stack.enter_async_context(store_module.LogStore(args.store))
            store_sink = log_store.sink(namespace=namespace, pod=args.pod)
        printers = {name: printer_for(name, prefixed) for name, _ in live}

        async def follow_one(name: str, containers: list[str]) -> dict[str, LogEnd]:
            sink: Any = printers[name] if store_sink is None else TeeSink(store_sink, printers[name])
            try:
                return await follower.follow_pod(
                    api=api, namespace=namespace, pod=name, sink=sink, containers=containers,
                    settings=settings, follow=request.follow, on_reconnect=on_reconnect,
                    start_tail_lines=request.tail, start_since_time=request.since)
            except errors.PodGone as exc:  # gone between the read (or the list) and the first stream
                raise LookupError(f"pod {namespace}/{name} not found") from exc

        # Every pod at once (kubectl -l stops at --max-log-requests, 5); the first failure stops the rest.
        group = Background("logs")
        started = {name: group.start(follow_one(name, containers), name=name) for name, containers in live}
        try:
            await group.join()
        finally:
            await group.close()
            for printer in printers.values():
                printer.flush()
    for name, task in started.items():
        if any(end.reason is EndReason.POD_DELETED for end in task.result().values()):
            notes.note(f"pod {namespace}/{name} was deleted; its log ends here")
    return 0


async def _read_previous(args: argparse.Namespace, access: ClusterAccess, api: Any, request: Request, *,
                         pod: str, container: str, printer: StdoutSink) -> None:
    """``--previous`` of one container: from the kubelet, else (it no longer has that instance, or the
    pod went meanwhile) from the operator's stored copy."""
    from podmortem.logs import errors, lines
    from podmortem.logs.cursor import LogCursor

    try:
        async with api.open_log(namespace=request.namespace, name=pod, container=container, follow=False,
                                previous=True, since_time=request.since, tail_lines=request.tail) as body:
            parser = lines.StreamParser(container=container, cursor=LogCursor(),
                                        split_lines=printer.splits_lines)
            while data := await body.readany():
                batch = parser.feed(data)
                if batch is not None:
                    await printer.write(container, batch, parser.cursor)
            batch = parser.finish()
            if batch is not None:
                await printer.write(container, batch, parser.cursor)
        return
    except (errors.LogNotReady, errors.PodGone) as exc:
        why = (f"the kubelet has no previous instance of {request.namespace}/{pod}/{container} "
               f"({str(exc).split(': ', 1)[-1]})")
    await _read_stored(args, access, request, pod=pod, containers=[container], printer=printer, why=why,
                       failed=why)


async def _read_stored(args: argparse.Namespace, access: ClusterAccess, request: Request, *, pod: str,
                       containers: list[str], printer: StdoutSink, why: str, failed: str) -> None:
    """The operator's stored copy of ``pod``'s log (``containers``: the chosen; empty: what
    ``--all-containers`` or the store's only container says). ``why``: the note before it is read;
    ``failed``: what a one-line error starts with when it cannot be."""
    from podmortem.cli import logs_stored

    try:
        await _read_stored_copy(args, access, request, pod=pod, containers=containers, printer=printer,
                                why=why)
    except logs_stored.StoredCopyError as exc:
        raise logs_stored.StoredCopyError(f"{failed}; the operator's stored copy cannot be read: "
                                          f"{exc}") from None


async def _read_stored_copy(args: argparse.Namespace, access: ClusterAccess, request: Request, *, pod: str,
                            containers: list[str], printer: StdoutSink, why: str) -> None:
    from podmortem.cli import logs_stored
    from podmortem.kube import clients
    from podmortem.kube.session import ApiSession

    plain = await clients.resolve_plugin(access)  # the stored copy is asked with the user's bearer token
    async with ApiSession(plain) as api:
        target = await logs_stored.find_operator(logs_stored.ApiReader(api),
                                                 namespace=o.Values(args).optional(OPERATOR_NAMESPACE))
        noted: list[bool] = []

        def opened() -> None:  # said once the store answers, so that a refusal is one line alone
            if not noted:
                noted.append(True)
                printer.note(f"{why}: reading the operator's stored copy ({target})")

        async with logs_stored.connected(plain, target) as client:
            async def read(container: str | None) -> None:
                await client.read(namespace=request.namespace, pod=pod, container=container, sink=printer,
                                  previous=request.previous, tail=request.tail, since=request.since,
                                  follow=request.follow, note=printer.note, opened=opened)

            if containers:
                for container in containers:
                    await read(container)
                return
            try:
                await read(None)
            except logs_stored.ContainerRequired as exc:
                if not args.all_containers:
                    raise LookupError(f"pod {request.namespace}/{pod} had several containers: choose one "
                                      f"with -c ({', '.join(exc.containers)}) or --all-containers") from None
                if len(exc.containers) > 1 and not printer.prefix:
                    printer.prefix = _stored_prefix(pod, args)
                for container in exc.containers:
                    await read(container)


def _stored_prefix(pod: str, args: argparse.Namespace) -> Any:
    from podmortem.cli import logs_output

    return logs_output.prefixer(pod, colour=logs_output.use_colour(o.Values(args).value(COLOR), sys.stdout))
