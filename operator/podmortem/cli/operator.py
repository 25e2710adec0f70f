"""``podmortem operator``: run the operator (kopf handlers, log store, metrics and health endpoints).

Every flag can also come from the environment variable the Helm chart sets
(``PODMORTEM_*``); a flag wins over its variable. Heavy imports happen in
:func:`run`, so ``podmortem --help`` works with pydantic alone.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path

from podmortem.control import settings as s

ENV = os.environ.get


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "operator",
        help="run the operator: TrainingJobs, annotated jobs and pods, failure reports on exit 137",
        description=(
            "Run the podmortem operator. It creates and follows TrainingJob pods, follows pods and jobs "
            'annotated podmortem.io/watch: "true", keeps their logs in a durable store, and on exit 137, '
            "OOMKilled or eviction writes a failure report (TrainingJob status, or the "
            "podmortem.io/failure-report annotation plus an Event). Flags default to the PODMORTEM_* "
            "environment variables the Helm chart sets."
        ),
    )
    d = s.OperatorSettings()
    p.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, then the pod's service account, then ~/.kube/config; "
        "exec and auth-provider plugins are run as kubectl runs them)",
    )
    p.add_argument(
        "-n",
        "--namespace",
        action="append",
        dest="namespaces",
        help="watch only this namespace (repeatable; default: $PODMORTEM_NAMESPACES or all)",
    )
    p.add_argument(
        "--store-dir",
        type=Path,
        default=Path(ENV("PODMORTEM_LOG_STORE_DIR", str(d.store_dir))),
        help="directory of the durable log store (default: %(default)s)",
    )
    p.add_argument(
        "--prometheus-url",
        default=ENV("PODMORTEM_PROMETHEUS_URL") or None,
        help="Prometheus base URL for the pod's working set (default: none, agent samples)",
    )
    p.add_argument(
        "--agent-port",
        type=int,
        default=int(ENV("PODMORTEM_AGENT_PORT", str(d.agent.port))),
        help="port of the node agents' evidence endpoint (default: %(default)s)",
    )
    p.add_argument("--agent-namespace", default=ENV("PODMORTEM_AGENT_NAMESPACE", d.agent.namespace))
    p.add_argument(
        "--agent-selector",
        default=ENV("PODMORTEM_AGENT_SELECTOR", d.agent.label_selector),
        help="label selector of the agent pods (default: %(default)s)",
    )
    p.add_argument(
        "--agent-token-file",
        type=Path,
        default=ENV("PODMORTEM_AGENT_TOKEN_FILE"),
        help="file with the bearer token the agents expect",
    )
    p.add_argument(
        "--log-retention",
        default=ENV("PODMORTEM_LOG_RETENTION", "7d"),
        metavar="AGE[,SIZE]",
        help="how long and how much of each job's log the store keeps: an age (30m, 12h, 7d), a size "
        "(500Mi, 2Gi) or both, e.g. 7d,2Gi; a job's own spec.logRetention or podmortem.io/log-retention "
        "wins (default: $PODMORTEM_LOG_RETENTION, else %(default)s; size default 1Gi)",
    )
    p.add_argument(
        "--no-patch-pods",
        action="store_true",
        default=ENV("PODMORTEM_PATCH_PODS", "true") == "false",
        help="never patch bare pods: their failure report is then only an Event "
        "(default: $PODMORTEM_PATCH_PODS=false)",
    )
    p.add_argument(
        "--agent-record-wait",
        type=float,
        metavar="SECONDS",
        default=float(ENV("PODMORTEM_AGENT_RECORD_WAIT_SECONDS", str(d.agent.record_wait_s))),
        help="after a report of an OOM kill whose kernel record the agent did not have yet, ask again "
        "for this long (with backoff) and update the report when it comes; 0 turns that off "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--no-agent",
        action="store_true",
        default=ENV("PODMORTEM_AGENT_ENABLED", "true") == "false",
        help="there is no node agent: reports use the pod status and logs only",
    )
    p.add_argument("--http-port", type=int, default=int(ENV("PODMORTEM_HTTP_PORT", str(d.log_http_port))))
    p.add_argument(
        "--http-auth",
        choices=("kubernetes", "none"),
        default=ENV("PODMORTEM_HTTP_AUTH", "kubernetes"),
        help="who may GET /logs: kubernetes = bearer tokens checked with TokenReview and a "
        "SubjectAccessReview for get pods/log in the namespace; none = anyone who reaches the port "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--log-base-url",
        default=ENV("PODMORTEM_LOG_BASE_URL") or _service_url(),
        help="base URL users reach the log API at, written into reports and status.log.url "
        "(default: $PODMORTEM_LOG_BASE_URL, else http://$PODMORTEM_SERVICE_NAME.$PODMORTEM_POD_NAMESPACE"
        ".svc:$PODMORTEM_HTTP_PORT when the service name is set, else just the /logs/... path)",
    )
    p.add_argument(
        "--status-refresh-seconds",
        type=float,
        default=float(ENV("PODMORTEM_STATUS_REFRESH_SECONDS", str(d.last_log_line_interval_s))),
        help="how often a running TrainingJob's status.lastLogLineAt and status.log are refreshed "
        "(0 = only on pod events; default: %(default)s)",
    )
    p.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=ENV("PODMORTEM_LEADER_ELECTION", "false") == "true",
        help="hold a coordination.k8s.io Lease; only its holder runs the handlers (default: %(default)s)",
    )
    p.add_argument(
        "--leader-election-lease",
        default=ENV("PODMORTEM_LEADER_ELECTION_LEASE", "podmortem-operator"),
        help="name of the Lease (default: %(default)s)",
    )
    p.add_argument(
        "--leader-election-namespace",
        default=ENV("PODMORTEM_POD_NAMESPACE", "podmortem"),
        help="namespace of the Lease (default: $PODMORTEM_POD_NAMESPACE, else %(default)s)",
    )
    p.add_argument(
        "--leader-election-identity",
        default=ENV("PODMORTEM_POD_NAME") or socket.gethostname(),
        help="this replica's name in the Lease (default: $PODMORTEM_POD_NAME, else the host name)",
    )
    for flag, env, default, what in (
        ("--leader-election-lease-duration", "LEASE_DURATION_SECONDS", 15.0, "a Lease lives without renewal"),
        ("--leader-election-renew-deadline", "RENEW_DEADLINE_SECONDS", 10.0, "the leader tries to renew"),
        ("--leader-election-retry-period", "RETRY_PERIOD_SECONDS", 2.0, "between Lease attempts"),
    ):
        p.add_argument(
            flag,
            type=float,
            default=float(ENV(f"PODMORTEM_LEADER_ELECTION_{env}", str(default))),
            help=f"seconds {what} (default: %(default)s)",
        )
    p.add_argument(
        "--metrics-port", type=int, default=int(ENV("PODMORTEM_METRICS_PORT", str(d.metrics_port)))
    )
    p.add_argument("--health-port", type=int, default=int(ENV("PODMORTEM_HEALTH_PORT", str(d.health_port))))
    p.add_argument(
        "--early-warning-epochs",
        type=int,
        default=int(ENV("PODMORTEM_EARLY_WARNING_EPOCHS", str(d.early_warning_epochs))),
        help="warn when the peak is projected to cross the limit within K epochs (default: %(default)s)",
    )
    p.add_argument(
        "--memory-warning-ratio",
        type=float,
        default=float(ENV("PODMORTEM_MEMORY_WARNING_RATIO", str(d.memory_warning_ratio))),
    )
    p.add_argument(
        "--status-max-bytes",
        type=int,
        default=int(ENV("PODMORTEM_REPORT_STATUS_MAX_BYTES", str(d.status_report_max_bytes))),
    )
    p.add_argument(
        "--annotation-max-bytes",
        type=int,
        default=int(ENV("PODMORTEM_REPORT_ANNOTATION_MAX_BYTES", str(d.annotation_report_max_bytes))),
    )
    p.add_argument(
        "--foreign-kinds",
        default=ENV("PODMORTEM_FOREIGN_KINDS", ""),
        help='annotated job kinds: JSON from the chart, or "jobs.batch,pytorchjobs.kubeflow.org"',
    )
    p.set_defaults(func=run)


def _service_url() -> str:
    """The in-cluster URL of the chart's Service, when the chart says its name; else empty."""
    service = ENV("PODMORTEM_SERVICE_NAME")
    if not service:
        return ""
    namespace = ENV("PODMORTEM_POD_NAMESPACE", "default")
    return f"http://{service}.{namespace}.svc:{ENV('PODMORTEM_HTTP_PORT', '8080')}"


def _foreign_kinds(text: str) -> tuple[s.ForeignKind, ...]:
    if not text.strip():
        return s.DEFAULT_FOREIGN_KINDS
    if text.lstrip().startswith("["):
        return tuple(s.ForeignKind.from_json(item) for item in json.loads(text))
    return tuple(s.ForeignKind.parse(part) for part in text.split(",") if part.strip())


def settings_from(args: argparse.Namespace) -> s.OperatorSettings:
    """Raises ValueError naming the option when a value can't be used."""
    from podmortem.control.annotations import parse_retention

    namespaces = args.namespaces or [n for n in ENV("PODMORTEM_NAMESPACES", "").split(",") if n]
    try:
        retention = parse_retention(args.log_retention)
    except ValueError as exc:
        raise ValueError(f"--log-retention / PODMORTEM_LOG_RETENTION {args.log_retention!r}: {exc}") from exc
    defaults = s.OperatorSettings()
    return s.OperatorSettings(
        log_retention_s=retention.max_age_s if retention.max_age_s is not None else defaults.log_retention_s,
        log_retention_bytes=(
            retention.max_bytes if retention.max_bytes is not None else defaults.log_retention_bytes
        ),
        patch_pods=not args.no_patch_pods,
        agent=s.AgentSettings(
            enabled=not args.no_agent,
            namespace=args.agent_namespace,
            label_selector=args.agent_selector,
            port=args.agent_port,
            token_path=args.agent_token_file,
            record_wait_s=args.agent_record_wait,
        ),
        prometheus=s.PrometheusSettings(url=args.prometheus_url),
        store_dir=args.store_dir,
        foreign_kinds=_foreign_kinds(args.foreign_kinds),
        early_warning_epochs=args.early_warning_epochs,
        memory_warning_ratio=args.memory_warning_ratio,
        status_report_max_bytes=args.status_max_bytes,
        annotation_report_max_bytes=args.annotation_max_bytes,
        log_http_port=args.http_port,
        log_http_auth=args.http_auth == "kubernetes",
        log_base_url=args.log_base_url,
        last_log_line_interval_s=args.status_refresh_seconds,
        leader_election=(
            s.LeaderElectionSettings(
                lease_name=args.leader_election_lease,
                lease_namespace=args.leader_election_namespace,
                identity=args.leader_election_identity,
                lease_duration_s=args.leader_election_lease_duration,
                renew_deadline_s=args.leader_election_renew_deadline,
                retry_period_s=args.leader_election_retry_period,
            )
            if args.leader_election
            else None
        ),
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        namespaces=tuple(namespaces),
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import sys

    from podmortem.handlers import runtime
    from podmortem.kube import config as kube_config

    logging.basicConfig(
        level=ENV("PODMORTEM_LOG_LEVEL", "info").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = settings_from(args)
    except (ValueError, json.JSONDecodeError) as exc:
        print(f"podmortem operator: {exc}", file=sys.stderr)
        return 2

    try:
        access = kube_config.load(args.kubeconfig)
    except kube_config.KubeconfigError as exc:
        print(f"podmortem operator: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(runtime.run_operator(settings=settings, access=access))
    except runtime.LeadershipLost as exc:
        print(f"podmortem operator: {exc}", file=sys.stderr)
        return 1
    return 0
