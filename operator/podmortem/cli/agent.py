"""``podmortem agent``: the node agent a DaemonSet runs (kernel OOM records, pod memory samples, evidence).

Every option also reads an environment variable (the Helm chart's contract,
``PODMORTEM_*``); the command line wins, then the variable, then the default.
Values are checked in `run`, so a bad variable gives a message naming it and
never breaks other subcommands. Heavy imports (aiohttp, kubernetes_asyncio)
happen in `run` too, so registering the subcommand costs nothing.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_USAGE = 2

logger = logging.getLogger("podmortem.agent")


@dataclass(frozen=True)
class Option:
    """One setting: its flag, its environment variable, its default (as text) and its help."""

    flag: str
    env: str
    default: str | None
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option(
        "--node-name",
        "PODMORTEM_NODE_NAME",
        None,
        "this node's name (the downward API's spec.nodeName); its pods are listed with "
        "fieldSelector spec.nodeName=NAME",
        "NAME",
    ),
    Option(
        "--namespaces",
        "PODMORTEM_NAMESPACES",
        "",
        "comma-separated namespaces whose pods are listed, one list call each (the chart's RBAC then "
        "exists only there); empty = all namespaces (default: all)",
        "NS,...",
    ),
    Option(
        "--foreign-kinds",
        "PODMORTEM_FOREIGN_KINDS",
        None,
        'kinds whose annotated objects (podmortem.io/watch: "true") get their pods sampled: JSON '
        '[{"group":"batch","resource":"jobs","version":"v1"}] ("version": "" = preferred; [] = none) or '
        "jobs.batch,kubeflow.org/v1/pytorchjobs (default: batch/v1 jobs and kubeflow.org/v1 pytorchjobs)",
        "KINDS",
    ),
    Option(
        "--interval",
        "PODMORTEM_SAMPLE_INTERVAL_SECONDS",
        "10",
        "seconds between memory samples of each pod (default 10)",
        "SECONDS",
    ),
    Option(
        "--ring-size",
        "PODMORTEM_SAMPLE_RING_SIZE",
        "360",
        "samples kept per pod; 360 x 10 s = one hour (default 360)",
        "N",
    ),
    Option(
        "--state-dir",
        "PODMORTEM_STATE_DIR",
        "/var/lib/podmortem/agent",
        "where the kernel log position (/dev/kmsg sequence number or syslog(2) cursor) is kept across "
        "restarts (default /var/lib/podmortem/agent)",
        "DIR",
    ),
    Option(
        "--token-file",
        "PODMORTEM_AGENT_TOKEN_FILE",
        None,
        "file with the bearer token the evidence endpoint requires (a mounted Secret; re-read on "
        "change; missing or empty = every request refused); unset = no authentication",
        "FILE",
    ),
    Option(
        "--proc-root",
        "PODMORTEM_PROC_ROOT",
        None,
        "the host's /proc (default /host/proc if it exists, else /proc; a given path that does not "
        "exist falls back to /proc with a warning)",
        "DIR",
    ),
    Option(
        "--cgroup-root",
        "PODMORTEM_CGROUP_ROOT",
        None,
        "the host's cgroup mount, v1 or v2 (default /host/sys/fs/cgroup if it exists, else "
        "/sys/fs/cgroup; a given path that does not exist falls back likewise)",
        "DIR",
    ),
    Option(
        "--kernel-log-source",
        "PODMORTEM_KERNEL_LOG_SOURCE",
        "auto",
        "where OOM records come from: kmsg (/dev/kmsg), syslog (the syslog(2) call: needs only "
        "CAP_SYSLOG, works where the runtime blocks the device), auto (kmsg if it opens, else syslog; "
        "the log says which, with the words 'kernel log'), off (sample only) (default auto)",
        choices=("auto", "kmsg", "syslog", "off"),
    ),
    Option(
        "--kmsg-path",
        "PODMORTEM_KMSG_PATH",
        "/dev/kmsg",
        "the kernel log device; the chart sets /host/dev/kmsg when it mounts the host's (default /dev/kmsg)",
        "FILE",
    ),
    Option(
        "--syslog-poll",
        "PODMORTEM_SYSLOG_POLL_SECONDS",
        "0.5",
        "seconds between two reads of the kernel ring buffer through syslog(2) (default 0.5)",
        "SECONDS",
    ),
    Option(
        "--pod-refresh",
        "PODMORTEM_POD_REFRESH_SECONDS",
        "15",
        "seconds between two listings of this node's pods (default 15)",
        "SECONDS",
    ),
    Option(
        "--owner-cache",
        "PODMORTEM_OWNER_CACHE_SECONDS",
        "60",
        "seconds a foreign-kind owner's annotation is trusted before it is read again (default 60)",
        "SECONDS",
    ),
    Option(
        "--kubeconfig",
        "KUBECONFIG",
        None,
        "kubeconfig to reach the API server; default: the pod's service account, else ~/.kube/config",
        "FILE",
    ),
    Option("--host", "PODMORTEM_LISTEN_HOST", "0.0.0.0", "address to listen on (default 0.0.0.0)", "ADDR"),
    Option(
        "--port",
        "PODMORTEM_HTTP_PORT",
        "8090",
        "port of GET /v1/pods/{uid}/evidence, /healthz and /metrics (default 8090)",
        "PORT",
    ),
    Option(
        "--metrics-port",
        "PODMORTEM_METRICS_PORT",
        "9090",
        "extra port serving /metrics only; 0 = none (default 9090)",
        "PORT",
    ),
    Option(
        "--static-pod",
        "PODMORTEM_STATIC_PODS",
        None,
        "UID=CGROUP_PATH: sample this pod, whose memory cgroup is CGROUP_PATH (relative to the memory "
        "hierarchy root, as the kernel prints it); repeatable, or comma-separated in the variable; "
        "replaces the Kubernetes API (tests, API-less nodes)",
        "UID=PATH",
    ),
    Option("--pod-name", "PODMORTEM_POD_NAME", "", "this agent's own pod, for its log and /healthz", "NAME"),
    Option("--pod-namespace", "PODMORTEM_POD_NAMESPACE", "", "this agent's own namespace, likewise", "NS"),
    Option(
        "--log-level",
        "PODMORTEM_LOG_LEVEL",
        "info",
        "log verbosity (default info)",
        choices=("debug", "info", "warning", "error"),
    ),
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
the command line wins over the variable."""

EPILOG = """\
permissions: CAP_SYSLOG (kernel log), CAP_SYS_PTRACE (other users' smaps_rollup), hostPID,
and the host's /proc and /sys/fs/cgroup mounted read-only. Never privileged.

examples:
  podmortem agent --node-name "$(hostname)"
  PODMORTEM_KERNEL_LOG_SOURCE=syslog podmortem agent --node-name "$(hostname)" --metrics-port 0
  podmortem agent --static-pod 1788d98a-0700-426a-8701-2312e4cc2163=/kubepods/burstable/\\
pod1788d98a-0700-426a-8701-2312e4cc2163 --state-dir /tmp/agent --metrics-port 0
  curl -H "Authorization: Bearer $(cat token)" localhost:8090/v1/pods/<uid>/evidence

exit codes: 0 stopped by SIGTERM/SIGINT, 2 bad options or environment variables"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="run the node agent (DaemonSet): kernel OOM records, pod memory samples, evidence API",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for option in OPTIONS:
        kwargs: dict[str, Any] = {"default": None, "help": f"{option.help} [env {option.env}]"}
        if option.choices:
            kwargs["choices"] = option.choices
        else:
            kwargs["metavar"] = option.metavar
        if option.flag == "--static-pod":
            kwargs["action"] = "append"
        parser.add_argument(option.flag, **kwargs)
    parser.set_defaults(func=run)


class BadSetting(ValueError):
    """An option or environment variable with a value that cannot be used; the message names it."""


def _raw(args: argparse.Namespace, option: Option) -> tuple[str | None, str]:
    """The value (command line, else environment, else default) and where it came from."""
    given = getattr(args, option.dest, None)
    if given is not None and not isinstance(given, list):
        return str(given), option.flag
    value = os.environ.get(option.env)
    if value not in (None, ""):
        return value, option.env
    return option.default, f"the default of {option.flag}"


def _convert(args: argparse.Namespace, dest: str, convert: Callable[[str], Any], what: str) -> Any:
    option = next(o for o in OPTIONS if o.dest == dest)
    value, source = _raw(args, option)
    if value is None:
        return None
    if option.choices and value not in option.choices:
        raise BadSetting(f"{source}={value!r}: must be one of {', '.join(option.choices)}")
    try:
        return convert(value)
    except ValueError as exc:
        detail = f" ({exc})" if str(exc) and "invalid literal" not in str(exc) else ""
        raise BadSetting(f"{source}={value!r}: expected {what}{detail}") from exc


def _positive(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise ValueError("must be positive")
    return number


def _port(value: str) -> int:
    number = int(value)
    if not 0 <= number <= 65535:
        raise ValueError("must be 0..65535")
    return number


def _host_root(given: Path | None, host: str, plain: str, what: str) -> Path:
    if given is None:
        return Path(host) if Path(host).exists() else Path(plain)
    if not given.exists():
        logger.warning("%s %s does not exist; using %s", what, given, plain)
        return Path(plain)
    return given


def _static_pods(args: argparse.Namespace) -> dict[str, str]:
    items = list(args.static_pod or [])
    source = "--static-pod"
    if not items:
        env = os.environ.get("PODMORTEM_STATIC_PODS", "")
        items, source = [v for v in env.split(",") if v.strip()], "PODMORTEM_STATIC_PODS"
    pods: dict[str, str] = {}
    for item in items:
        uid, sep, path = item.strip().partition("=")
        if not sep or not uid or not path:
            raise BadSetting(f"{source} {item!r}: expected UID=CGROUP_PATH")
        pods[uid] = path
    return pods


def settings_from(args: argparse.Namespace) -> Any:
    """`AgentSettings` from the command line and environment; raises `BadSetting` naming the culprit."""
    from podmortem.agent.owners import parse_foreign_kinds
    from podmortem.agent.settings import AgentSettings

    def get(dest: str, convert: Callable[[str], Any] = str, what: str = "a value") -> Any:
        return _convert(args, dest, convert, what)

    static = _static_pods(args)
    node_name = get("node_name") or ""
    if not static and not node_name:
        raise BadSetting("--node-name (or PODMORTEM_NODE_NAME) is required unless --static-pod is given")
    namespaces = tuple(n.strip() for n in (get("namespaces") or "").split(",") if n.strip())
    kubeconfig = get("kubeconfig", Path)  # a $KUBECONFIG list is merged by podmortem.kube.config.load
    token = get("token_file", Path)
    kinds = get("foreign_kinds", parse_foreign_kinds, "a JSON list of {group, resource, version}")
    try:
        return AgentSettings(
            node_name=node_name,
            pod_name=get("pod_name"),
            pod_namespace=get("pod_namespace"),
            namespaces=namespaces,
            foreign_kinds=parse_foreign_kinds(None) if kinds is None else kinds,
            poll_interval_s=get("interval", _positive, "a positive number of seconds"),
            ring_size=get("ring_size", int, "a whole number"),
            state_dir=get("state_dir", Path),
            token_path=token,
            proc_root=_host_root(get("proc_root", Path), "/host/proc", "/proc", "--proc-root"),
            cgroup_root=_host_root(
                get("cgroup_root", Path), "/host/sys/fs/cgroup", "/sys/fs/cgroup", "--cgroup-root"
            ),
            kmsg_path=get("kmsg_path", Path),
            kernel_log_source=get("kernel_log_source"),
            syslog_poll_s=get("syslog_poll", _positive, "a positive number of seconds"),
            pod_refresh_s=get("pod_refresh", _positive, "a positive number of seconds"),
            owner_cache_s=get("owner_cache", _positive, "a positive number of seconds"),
            kubeconfig=kubeconfig,
            listen_host=get("host"),
            listen_port=get("port", _port, "a port number"),
            metrics_port=get("metrics_port", _port, "a port number"),
            static_pods=static,
        )
    except ValueError as exc:
        if isinstance(exc, BadSetting):
            raise
        raise BadSetting(str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    import asyncio

    try:
        level = _convert(args, "log_level", str, "a log level")
    except BadSetting as exc:
        print(f"podmortem agent: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = settings_from(args)
    except BadSetting as exc:
        print(f"podmortem agent: {exc}", file=sys.stderr)
        return EXIT_USAGE

    from podmortem.agent.main import run_agent

    asyncio.run(run_agent(settings))
    return EXIT_OK
