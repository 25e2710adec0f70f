"""``podmortem agent``: the node agent a DaemonSet runs (kernel OOM records, pod memory samples, evidence).

Every option also reads an environment variable (the Helm chart's contract,
``PODMORTEM_*``); the command line wins, then the variable (empty counts as
unset), then the default. Values are checked in `run` (see
:mod:`podmortem.cli.options`), so a bad variable gives one line naming the
flag and the variable, exit 2, and never breaks other subcommands. Heavy
imports (aiohttp, kubernetes_asyncio) happen in `run` too, so registering the
subcommand costs nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podmortem.cli import options as o
from podmortem.cli.server_limit_options import server_limit_options
from podmortem.connection_limits import ServerLimits

if TYPE_CHECKING:
    from podmortem.agent.settings import AgentSettings
    from podmortem.kube.owners import ForeignKind

EXIT_OK = 0
EXIT_USAGE = 2

logger = logging.getLogger("podmortem.agent")


def _foreign_kinds(text: str) -> tuple[ForeignKind, ...]:
    from podmortem.kube.owners import parse_foreign_kinds

    return parse_foreign_kinds(text)


def _static_pods(text: str) -> dict[str, str]:
    pods: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        uid, sep, path = item.partition("=")
        if not sep or not uid.strip() or not path.strip():
            raise ValueError(f"expected UID=CGROUP_PATH, got {item!r}")
        if not path.startswith("/") or path == "/":
            raise ValueError(f"{item!r}: the cgroup path must be absolute and not '/' (UID=CGROUP_PATH)")
        pods[uid.strip()] = path
    return pods


NODE_NAME = o.Option(
    ("--node-name",), "PODMORTEM_NODE_NAME", o.dns_subdomain("node name"), None,
    "this node's name (the downward API's spec.nodeName); its pods are listed with "
    "fieldSelector spec.nodeName=NAME; required unless --static-pod is given", "NAME",
)
NAMESPACES = o.Option(
    ("--namespaces",), "PODMORTEM_NAMESPACES", o.dns_labels(), "",
    "comma-separated namespaces whose pods are listed, one list call each (the chart's RBAC then "
    "exists only there); empty = all namespaces", "NS,...", shown_default="all",
)
FOLLOW_SELECTOR = o.Option(
    ("--follow-selector",), "PODMORTEM_FOLLOW_SELECTOR", o.label_selector, None,
    "also sample every pod whose labels match this Kubernetes label selector, annotated or not: the "
    "operator's --follow-selector (the chart's followSelector), so the pods it reports by label "
    "have samples and kernel records", "SELECTOR", shown_default="none",
)
FOLLOW_NAMESPACES = o.Option(
    ("--follow-namespaces",), "PODMORTEM_FOLLOW_NAMESPACES", o.dns_labels(), "",
    "comma-separated namespaces --follow-selector picks from (every pod of them without a "
    "selector); empty = all", "NS,...", shown_default="all",
)

FOREIGN_KINDS = o.Option(
    ("--foreign-kinds",), "PODMORTEM_FOREIGN_KINDS", o.foreign_kinds(_foreign_kinds), None,
    'kinds whose annotated objects (podmortem.io/watch: "true") get their pods sampled: JSON '
    '[{"group":"batch","resource":"jobs","version":"v1"}] ("version": "" = preferred; [] = none) or '
    "jobs.batch,kubeflow.org/v1/pytorchjobs", "KINDS",
    shown_default="batch/v1 jobs, kubeflow.org/v1 pytorchjobs and jobset.x-k8s.io/v1alpha2 jobsets",
)
INTERVAL = o.Option(
    ("--interval",), "PODMORTEM_SAMPLE_INTERVAL_SECONDS", o.seconds(above=0, high=3600), "10",
    "seconds between memory samples of each pod; above 0, at most 3600", "SECONDS",
)
RING_SIZE = o.Option(
    ("--ring-size",), "PODMORTEM_SAMPLE_RING_SIZE", o.whole("a whole number of samples", low=1, high=100_000),
    "360", "samples kept per pod; 360 x 10 s = one hour; 1..100000", "N",
)
STATE_DIR = o.Option(
    ("--state-dir",), "PODMORTEM_STATE_DIR", o.path, "/var/lib/podmortem/agent",
    "where the kernel log position (/dev/kmsg sequence number or syslog(2) cursor) is kept across "
    "restarts", "DIR",
)
TOKEN_FILE = o.Option(
    ("--token-file",), "PODMORTEM_AGENT_TOKEN_FILE", o.optional_path, None,
    "file with the bearer token the evidence endpoint requires (a mounted Secret; re-read on "
    "change; missing or empty = every request refused)", "FILE", shown_default="none, no authentication",
)
PROC_ROOT = o.Option(
    ("--proc-root",), "PODMORTEM_PROC_ROOT", o.optional_path, None,
    "the host's /proc (a given path that does not exist falls back to /proc with a warning)", "DIR",
    shown_default="/host/proc if it exists, else /proc",
)
CGROUP_ROOT = o.Option(
    ("--cgroup-root",), "PODMORTEM_CGROUP_ROOT", o.optional_path, None,
    "the host's cgroup mount, v1 or v2 (a given path that does not exist falls back likewise)", "DIR",
    shown_default="/host/sys/fs/cgroup if it exists, else /sys/fs/cgroup",
)
KERNEL_LOG_SOURCE = o.Option(
    ("--kernel-log-source",), "PODMORTEM_KERNEL_LOG_SOURCE", o.choice("auto", "kmsg", "syslog", "off"),
    "auto",
    "where OOM records come from: kmsg (/dev/kmsg), syslog (the syslog(2) call: needs only "
    "CAP_SYSLOG, works where the runtime blocks the device), auto (kmsg if it opens, else syslog; "
    "the log says which, with the words 'kernel log'), off (sample only)", "{auto,kmsg,syslog,off}",
)
KMSG_PATH = o.Option(
    ("--kmsg-path",), "PODMORTEM_KMSG_PATH", o.path, "/dev/kmsg",
    "the kernel log device; the chart sets /host/dev/kmsg when it mounts the host's", "FILE",
)
SYSLOG_POLL = o.Option(
    ("--syslog-poll",), "PODMORTEM_SYSLOG_POLL_SECONDS", o.seconds(above=0, high=60), "0.5",
    "seconds between two reads of the kernel ring buffer through syslog(2); above 0, at most 60", "SECONDS",
)
POD_REFRESH = o.Option(
    ("--pod-refresh",), "PODMORTEM_POD_REFRESH_SECONDS", o.seconds(above=0, high=3600), "15",
    "seconds between two listings of this node's pods; above 0, at most 3600", "SECONDS",
)
OWNER_CACHE = o.Option(
    ("--owner-cache",), "PODMORTEM_OWNER_CACHE_SECONDS", o.seconds(above=0, high=86400), "60",
    "seconds a foreign-kind owner's annotation is trusted before it is read again; above 0, at most 86400",
    "SECONDS",
)
KUBECONFIG = o.Option(
    ("--kubeconfig",), "KUBECONFIG", o.optional_path, None,
    "kubeconfig to reach the API server", "FILE",
    shown_default="the pod's service account, else ~/.kube/config",
)
HOST = o.Option(
    ("--host",), "PODMORTEM_LISTEN_HOST", o.text("an address"), "0.0.0.0", "address to listen on", "ADDR",
)
PORT = o.Option(
    ("--port",), "PODMORTEM_HTTP_PORT", o.port(), "8090",
    "port of GET /v1/pods/{uid}/evidence, /healthz and /metrics; 0..65535, 0 picks a free one", "PORT",
)
METRICS_PORT = o.Option(
    ("--metrics-port",), "PODMORTEM_METRICS_PORT", o.port(), "9090",
    "extra port serving /metrics only; 0 or --port = none; 0..65535", "PORT",
)
STATIC_PODS = o.Option(
    ("--static-pod",), "PODMORTEM_STATIC_PODS", _static_pods, None,
    "UID=CGROUP_PATH: sample this pod, whose memory cgroup is CGROUP_PATH (absolute, relative to the "
    "memory hierarchy root, as the kernel prints it); repeatable, or comma-separated in the variable; "
    "replaces the Kubernetes API (tests, API-less nodes)", "UID=PATH",
    action="append", dest_name="static_pod",
)
POD_NAME = o.Option(
    ("--pod-name",), "PODMORTEM_POD_NAME", o.any_text, "", "this agent's own pod, for its log and /healthz",
    "NAME",
)
POD_NAMESPACE = o.Option(
    ("--pod-namespace",), "PODMORTEM_POD_NAMESPACE", o.any_text, "", "this agent's own namespace, likewise",
    "NS",
)
LOG_LEVEL = o.Option(
    ("--log-level",), "PODMORTEM_LOG_LEVEL", o.choice(*o.LOG_LEVELS), "info", "log verbosity",
    "{" + ",".join(o.LOG_LEVELS) + "}",
)

OOM_EVENTS = o.Option(
    ("--oom-events",), "PODMORTEM_OOM_EVENTS", o.boolean, "false",
    "every pod's OOM kill on this node, marked or not, becomes an Event on the pod (reason OOMKilling) "
    "and a count in podmortem_agent_oom_kills_total; needs create on events (the chart's "
    "agent.oomEvents.enabled); the variable: true or false", shown_default="off",
    action="store_const", const="true",
)
OOM_EVENT_INTERVAL = o.Option(
    ("--oom-event-interval",), "PODMORTEM_OOM_EVENT_INTERVAL_SECONDS", o.seconds(low=0, high=86400), "60",
    "seconds between two OOM-kill Events on one pod (kills in between are folded into the next); "
    "0..86400", "SECONDS",
)
OOM_EVENTS_PER_MINUTE = o.Option(
    ("--oom-events-per-minute",), "PODMORTEM_OOM_EVENTS_PER_MINUTE", o.whole("a number of Events", low=1,
                                                                             high=6000),
    "30", "OOM-kill Events this node posts per minute at most, all pods together; 1..6000", "N",
)
OOM_METRIC_POD_LABELS = o.Option(
    ("--oom-metric-pod-labels",), "PODMORTEM_OOM_METRIC_POD_LABELS", o.any_text, "",
    "comma-separated pod label keys copied onto podmortem_agent_oom_kills_total as label_<key> "
    "(as kube-state-metrics names them); at most 10", "KEY,...", shown_default="none",
)

#: Deadlines and connection caps of both ports (the chart's ``serverLimits.agent``).
HTTP_LIMITS = server_limit_options("http", "HTTP", "the agent", ServerLimits())

OPTIONS: tuple[o.Option[Any], ...] = (
    NODE_NAME, NAMESPACES, FOREIGN_KINDS, INTERVAL, RING_SIZE, STATE_DIR, TOKEN_FILE, PROC_ROOT, CGROUP_ROOT,
    KERNEL_LOG_SOURCE, KMSG_PATH, SYSLOG_POLL, POD_REFRESH, OWNER_CACHE, KUBECONFIG, HOST, PORT, METRICS_PORT,
    STATIC_PODS, POD_NAME, POD_NAMESPACE, LOG_LEVEL, *HTTP_LIMITS.all, OOM_EVENTS, OOM_EVENT_INTERVAL,
    OOM_EVENTS_PER_MINUTE, OOM_METRIC_POD_LABELS, FOLLOW_SELECTOR, FOLLOW_NAMESPACES,
)

DESCRIPTION = """\
Run the node agent. It reads kernel OOM-kill records (from /dev/kmsg, or through syslog(2)
where a container may not open the device) and maps them to pods by cgroup path; every
--interval seconds it samples each watched pod's memory cgroup (memory.stat, usage, peak,
limit; cgroup v1 and v2) and every process's PSS and private memory (smaps_rollup); it serves
GET /v1/pods/{uid}/evidence (bearer token), GET /healthz and GET /metrics.

Watched pods are those on --node-name that a TrainingJob owns, that are annotated
podmortem.io/watch="true", or whose direct owner is an object of a --foreign-kinds kind
(a batch Job, a Kubeflow PyTorchJob) annotated podmortem.io/watch="true".

Every option reads the environment variable shown in [brackets] (the Helm chart's contract);
the command line wins over the variable, and an empty variable counts as unset."""

EPILOG = """\
permissions: CAP_SYSLOG (kernel log), CAP_SYS_PTRACE (other users' smaps_rollup), hostPID,
and the host's /proc and /sys/fs/cgroup mounted read-only. Never privileged. With --oom-events,
create on events in the namespaces it lists.

examples:
  podmortem agent --node-name "$(hostname)"
  PODMORTEM_KERNEL_LOG_SOURCE=syslog podmortem agent --node-name "$(hostname)" --metrics-port 0
  podmortem agent --static-pod 1788d98a-0700-426a-8701-2312e4cc2163=/kubepods/burstable/\\
pod1788d98a-0700-426a-8701-2312e4cc2163 --state-dir /tmp/agent --metrics-port 0
  curl -H "Authorization: Bearer $(cat token)" localhost:8090/v1/pods/<uid>/evidence

exit codes: 0 stopped by SIGTERM/SIGINT; 2 a bad option or environment variable, or a port in use
(one line on stderr naming the flag and the variable, before anything starts)"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="run the node agent (DaemonSet): kernel OOM records, pod memory samples, evidence API",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    o.add_all(parser, OPTIONS)
    parser.set_defaults(func=run)


def _label_keys(v: o.Values) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in v.value(OOM_METRIC_POD_LABELS).split(",") if k.strip())
    if len(keys) > 10:
        raise v.error(OOM_METRIC_POD_LABELS, f"at most 10 label keys, got {len(keys)}")
    return keys


def _host_root(given: Path | None, host: str, plain: str, what: str) -> Path:
    if given is None:
        return Path(host) if Path(host).exists() else Path(plain)
    if not given.exists():
        logger.warning("%s %s does not exist; using %s", what, given, plain)
        return Path(plain)
    return given


def settings_from(args: argparse.Namespace) -> AgentSettings:
    """`AgentSettings` from the command line and environment.

    Raises :class:`~podmortem.cli.options.SettingError` (a ValueError), one line naming the flag
    and the variable, for a value that cannot be used.
    """
    v = o.Values(args)

    def get(dest: str, convert: Callable[[str], Any]) -> Any:
        option = next(opt for opt in OPTIONS if opt.dest == dest)
        return v.optional(dataclasses.replace(option, parse=convert))

    static = v.optional(STATIC_PODS) or {}
    node_name = v.optional(NODE_NAME) or ""
    if not static and not node_name:
        raise v.error(NODE_NAME, "required unless --static-pod / PODMORTEM_STATIC_PODS is given")
    kubeconfig = get("kubeconfig", Path)  # a $KUBECONFIG list is merged by podmortem.kube.config.load
    values: dict[str, Any] = dict(
        node_name=node_name,
        pod_name=v.value(POD_NAME),
        pod_namespace=v.value(POD_NAMESPACE),
        namespaces=v.value(NAMESPACES),
        poll_interval_s=v.value(INTERVAL),
        ring_size=v.value(RING_SIZE),
        state_dir=v.value(STATE_DIR),
        token_path=v.optional(TOKEN_FILE),
        kmsg_path=v.value(KMSG_PATH),
        kernel_log_source=v.value(KERNEL_LOG_SOURCE),
        syslog_poll_s=v.value(SYSLOG_POLL),
        pod_refresh_s=v.value(POD_REFRESH),
        owner_cache_s=v.value(OWNER_CACHE),
        kubeconfig=kubeconfig,
        listen_host=v.value(HOST),
        listen_port=v.value(PORT),
        metrics_port=v.value(METRICS_PORT),
        connections=HTTP_LIMITS.read(v),
        oom_events=v.value(OOM_EVENTS),
        oom_event_interval_s=v.value(OOM_EVENT_INTERVAL),
        oom_events_per_minute=v.value(OOM_EVENTS_PER_MINUTE),
        oom_metric_pod_labels=_label_keys(v),
        static_pods=static,
    )
    follow, follow_namespaces = v.optional(FOLLOW_SELECTOR), v.value(FOLLOW_NAMESPACES)
    unseen = [ns for ns in follow_namespaces if values["namespaces"] and ns not in values["namespaces"]]
    if unseen:
        raise v.conflict(f"{', '.join(unseen)} not listed: their pods are never seen; list them too",
                         FOLLOW_NAMESPACES, NAMESPACES)
    if follow is not None or follow_namespaces:
        from podmortem.kube.label_selector import LabelSelector, PodSelector

        values["follow_selector"] = PodSelector(selector=follow if follow is not None else LabelSelector(),
                                                namespaces=follow_namespaces)
    kinds = v.optional(FOREIGN_KINDS)  # last: reading kinds imports the Kubernetes client
    values["foreign_kinds"] = _foreign_kinds("") if kinds is None else kinds
    proc_root, cgroup_root = v.optional(PROC_ROOT), v.optional(CGROUP_ROOT)
    values["proc_root"] = _host_root(proc_root, "/host/proc", "/proc", "--proc-root")
    values["cgroup_root"] = _host_root(cgroup_root, "/host/sys/fs/cgroup", "/sys/fs/cgroup", "--cgroup-root")
    from podmortem.agent.settings import AgentSettings

    try:
        return AgentSettings(**values)
    except ValueError as exc:  # a range the settings themselves check
        raise o.SettingError(" ".join(str(exc).split())) from None


def check_startup(args: argparse.Namespace, settings: AgentSettings) -> None:
    """The ports the agent listens on are free (the metrics port only when it is a port of its own)."""
    ports = [(PORT, settings.listen_port)]
    if settings.metrics_port != settings.listen_port:
        ports.append((METRICS_PORT, settings.metrics_port))
    o.check_listen(o.Values(args), settings.listen_host, ports, host_option=HOST)


def run(args: argparse.Namespace) -> int:
    import asyncio

    try:
        level = o.Values(args).value(LOG_LEVEL)
    except o.SettingError as exc:
        print(f"podmortem agent: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = settings_from(args)
        check_startup(args, settings)
    except o.SettingError as exc:
        print(f"podmortem agent: {exc}", file=sys.stderr)
        return EXIT_USAGE

    from podmortem import open_files
    from podmortem.agent.main import run_agent

    open_files.raise_and_log()
    asyncio.run(run_agent(settings))
    return EXIT_OK
