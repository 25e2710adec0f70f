"""``podmortem agent``: the node agent a DaemonSet runs (kernel OOM records, pod memory samples, evidence).

Every option also reads an environment variable (the Helm chart's contract), and
the command line wins. Heavy imports (aiohttp, kubernetes_asyncio) happen in
`run`, so registering the subcommand costs nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

EXIT_OK = 0
EXIT_USAGE = 2

#: Option → environment variable; a set variable is the default, the command line wins.
_ENV = {
    "node_name": "PODMORTEM_NODE_NAME",
    "interval": "PODMORTEM_SAMPLE_INTERVAL_SECONDS",
    "ring_size": "PODMORTEM_SAMPLE_RING_SIZE",
    "state_dir": "PODMORTEM_STATE_DIR",
    "token_file": "PODMORTEM_AGENT_TOKEN_FILE",
    "proc_root": "PODMORTEM_PROC_ROOT",
    "cgroup_root": "PODMORTEM_CGROUP_ROOT",
    "kmsg_path": "PODMORTEM_KMSG_PATH",
    "kernel_log_source": "PODMORTEM_KERNEL_LOG_SOURCE",
    "host": "PODMORTEM_LISTEN_HOST",
    "port": "PODMORTEM_HTTP_PORT",
    "metrics_port": "PODMORTEM_METRICS_PORT",
    "static_pod": "PODMORTEM_STATIC_PODS",
    "log_level": "PODMORTEM_LOG_LEVEL",
}


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(_ENV[name])
    return value if value not in (None, "") else default


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="run the node agent (DaemonSet): kernel OOM records, pod memory samples, evidence API",
        description=(
            "Run the node agent. It follows the kernel log (/dev/kmsg) for OOM kills and maps them to "
            "pods by cgroup path, samples the memory cgroup (memory.stat, usage, peak, limit) and every "
            "process's PSS and private memory of each watched pod every --interval seconds, and serves "
            "GET /v1/pods/{uid}/evidence (bearer token), GET /healthz and GET /metrics. Watched pods are "
            'those on --node-name owned by a TrainingJob or annotated podmortem.io/watch="true"; '
            "--static-pod replaces the Kubernetes API with a fixed set (tests, API-less nodes)."
        ),
        epilog=(
            "permissions: CAP_SYSLOG (/dev/kmsg), CAP_SYS_PTRACE (other users' smaps_rollup), hostPID, and\n"
            "the host's /proc and /sys/fs/cgroup mounted read-only. Never privileged.\n\n"
            "examples:\n"
            "  podmortem agent --node-name $(hostname)\n"
            "  podmortem agent --static-pod 1788d98a-0700-426a-8701-2312e4cc2163=/kubepods/burstable/"
            "pod1788d98a-0700-426a-8701-2312e4cc2163 \\\n"
            "      --state-dir /tmp/agent --port 8090 --metrics-port 0\n"
            '  curl -H "Authorization: Bearer $(cat token)" localhost:8090/v1/pods/<uid>/evidence\n\n'
            "exit codes: 0 stopped by SIGTERM/SIGINT, 2 bad options"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add(
        "--node-name",
        default=_env("node_name", ""),
        metavar="NAME",
        help="this node's name; pods are listed with spec.nodeName=NAME [env PODMORTEM_NODE_NAME]",
    )
    add(
        "--interval",
        type=float,
        default=float(_env("interval", "10") or 10),
        metavar="SECONDS",
        help="seconds between memory samples of each pod (default 10) "
        "[env PODMORTEM_SAMPLE_INTERVAL_SECONDS]",
    )
    add(
        "--ring-size",
        type=int,
        default=int(_env("ring_size", "360") or 360),
        metavar="N",
        help="samples kept per pod; 360 × 10 s = one hour (default 360) [env PODMORTEM_SAMPLE_RING_SIZE]",
    )
    add(
        "--state-dir",
        type=Path,
        default=Path(_env("state_dir", "/var/lib/podmortem/agent") or "."),
        metavar="DIR",
        help="where the last /dev/kmsg sequence number is kept across restarts "
        "(default /var/lib/podmortem/agent) [env PODMORTEM_STATE_DIR]",
    )
    add(
        "--token-file",
        type=Path,
        default=_env("token_file"),
        metavar="FILE",
        help="file with the bearer token the evidence endpoint requires (a mounted Secret; re-read on "
        "change); unset = no authentication [env PODMORTEM_AGENT_TOKEN_FILE]",
    )
    add(
        "--proc-root",
        type=Path,
        default=_env("proc_root"),
        metavar="DIR",
        help="the host's /proc (default /host/proc if it exists, else /proc) [env PODMORTEM_PROC_ROOT]",
    )
    add(
        "--cgroup-root",
        type=Path,
        default=_env("cgroup_root"),
        metavar="DIR",
        help="the host's cgroup mount, v1 or v2 (default /host/sys/fs/cgroup if it exists, else "
        "/sys/fs/cgroup) [env PODMORTEM_CGROUP_ROOT]",
    )
    add(
        "--kmsg-path",
        type=Path,
        default=Path(_env("kmsg_path", "/dev/kmsg") or "/dev/kmsg"),
        metavar="FILE",
        help="the kernel log device (default /dev/kmsg) [env PODMORTEM_KMSG_PATH]",
    )
    add(
        "--kernel-log-source",
        choices=("auto", "kmsg", "syslog", "off"),
        default=_env("kernel_log_source", "auto"),
        help="where OOM records come from: kmsg, auto (= kmsg for now), off (sample only); 'syslog' "
        "(syslog(2)) is not implemented yet and is refused (default auto) [env PODMORTEM_KERNEL_LOG_SOURCE]",
    )
    add(
        "--host",
        default=_env("host", "0.0.0.0"),
        metavar="ADDR",
        help="address to listen on (default 0.0.0.0) [env PODMORTEM_LISTEN_HOST]",
    )
    add(
        "--port",
        type=int,
        default=int(_env("port", "8090") or 8090),
        metavar="PORT",
        help="port of evidence, /healthz and /metrics (default 8090) [env PODMORTEM_HTTP_PORT]",
    )
    add(
        "--metrics-port",
        type=int,
        default=int(_env("metrics_port", "9090") or 9090),
        metavar="PORT",
        help="extra port serving /metrics only; 0 = none (default 9090) [env PODMORTEM_METRICS_PORT]",
    )
    add(
        "--static-pod",
        action="append",
        metavar="UID=CGROUP_PATH",
        help="sample this pod, whose memory cgroup is CGROUP_PATH (relative to the memory hierarchy root, "
        "as the kernel prints it); repeatable; replaces the Kubernetes API "
        "[env PODMORTEM_STATIC_PODS, comma-separated]",
    )
    add(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default=_env("log_level", "info"),
        help="log verbosity (default info) [env PODMORTEM_LOG_LEVEL]",
    )
    parser.set_defaults(func=run)


def _host_root(given: Path | None, host: str, plain: str) -> Path:
    if given is not None:
        return given
    return Path(host) if Path(host).exists() else Path(plain)


def _static_pods(values: list[str] | None) -> dict[str, str]:
    items = list(values or [])
    if not items:
        env = _env("static_pod")
        items = [v for v in (env or "").split(",") if v.strip()]
    pods: dict[str, str] = {}
    for item in items:
        uid, sep, path = item.strip().partition("=")
        if not sep or not uid or not path:
            raise ValueError(f"--static-pod {item!r}: expected UID=CGROUP_PATH")
        pods[uid] = path
    return pods


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from podmortem.agent.main import run_agent
    from podmortem.agent.settings import AgentSettings

    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.kernel_log_source == "syslog":
        print(
            "podmortem agent: --kernel-log-source syslog is not implemented yet; use kmsg or auto",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        static = _static_pods(args.static_pod)
        if not static and not args.node_name:
            raise ValueError("--node-name (or PODMORTEM_NODE_NAME) is required unless --static-pod is given")
        settings = AgentSettings(
            node_name=args.node_name,
            poll_interval_s=args.interval,
            ring_size=args.ring_size,
            state_dir=args.state_dir,
            token_path=args.token_file,
            proc_root=_host_root(args.proc_root, "/host/proc", "/proc"),
            cgroup_root=_host_root(args.cgroup_root, "/host/sys/fs/cgroup", "/sys/fs/cgroup"),
            kmsg_path=args.kmsg_path,
            kernel_log_source=args.kernel_log_source,
            listen_host=args.host,
            listen_port=args.port,
            metrics_port=args.metrics_port,
            static_pods=static,
        )
    except ValueError as exc:
        print(f"podmortem agent: {exc}", file=sys.stderr)
        return EXIT_USAGE
    asyncio.run(run_agent(settings))
    return EXIT_OK
