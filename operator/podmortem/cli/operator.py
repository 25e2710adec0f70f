"""``podmortem operator``: run the operator (kopf handlers, log store, metrics and health endpoints).

Every flag can also come from the environment variable the Helm chart sets
(``PODMORTEM_*``, shown in ``--help`` as ``[env ...]``); a flag wins over its
variable, and an empty variable counts as unset. Every value is checked first
thing in :func:`run` (see :mod:`podmortem.cli.options`): a bad one is one line
on stderr naming the flag and the variable, exit 2, before the kubeconfig is
read. Heavy imports happen in :func:`run` too, so ``podmortem --help`` works
with pydantic alone.
"""

from __future__ import annotations

import argparse
import socket
import ssl
from dataclasses import replace
from pathlib import Path
from typing import Any

from podmortem.cli import options as o
from podmortem.cli.server_limit_options import server_limit_options
from podmortem.kube.label_selector import LabelSelector, PodSelector
from podmortem.kube.owners import ForeignKind
from podmortem.logs.settings import HttpSettings
from podmortem.logs.tls import ServerCertificate
from podmortem.operator import settings as s

_D = s.OperatorSettings()


def _g(number: float) -> str:
    return f"{number:g}"


def _retention(text: str) -> tuple[float | None, int | None]:
    from podmortem.operator.watch_options import parse_retention

    try:
        retention = parse_retention(text)
    except ValueError as exc:
        raise ValueError(f"expected AGE[,SIZE] ({exc})") from None
    return retention.max_age_s, retention.max_bytes


def _store_budget(text: str) -> int | None:
    """A Kubernetes quantity (``9Gi``, ``10G``, plain bytes), as a sizeLimit is written; empty: none."""
    if not text.strip():
        return None
    from podmortem import quantity

    try:
        size = quantity.parse_bytes(text.strip())
    except quantity.BadQuantity:
        raise ValueError("expected a size like 9Gi, 500Mi or 10G") from None
    if size <= 0:
        raise ValueError("expected a size above 0")
    return size


def _foreign_kinds(text: str) -> tuple[ForeignKind, ...]:
    from podmortem.kube.owners import parse_foreign_kinds

    return parse_foreign_kinds(text)


NAMESPACES = o.Option(
    ("-n", "--namespace"), "PODMORTEM_NAMESPACES", o.dns_labels(), "",
    "watch only this namespace (repeatable; the variable is comma-separated)", "NS",
    shown_default="all namespaces", action="append", dest_name="namespaces",
)
STORE_DIR = o.Option(
    ("--store-dir",), "PODMORTEM_LOG_STORE_DIR", o.path, str(_D.store_dir),
    "directory of the durable log store; created if missing, must be writable", "DIR",
)
PROMETHEUS_URL = o.Option(
    ("--prometheus-url",), "PODMORTEM_PROMETHEUS_URL", o.http_url(), None,
    "Prometheus base URL (http:// or https://) for the pod's working set", "URL",
    shown_default="none, the agent's samples",
)
AGENT_PORT = o.Option(
    ("--agent-port",), "PODMORTEM_AGENT_PORT", o.port(low=1), str(_D.agent.port),
    "port of the node agents' evidence endpoint, 1..65535", "PORT",
)
AGENT_NAMESPACE = o.Option(
    ("--agent-namespace",), "PODMORTEM_AGENT_NAMESPACE", o.dns_label("namespace name"), _D.agent.namespace,
    "namespace of the agent pods", "NS",
)
AGENT_SELECTOR = o.Option(
    ("--agent-selector",), "PODMORTEM_AGENT_SELECTOR", o.text("a label selector"), _D.agent.label_selector,
    "label selector of the agent pods", "SELECTOR",
)
AGENT_TOKEN_FILE = o.Option(
    ("--agent-token-file",), "PODMORTEM_AGENT_TOKEN_FILE", o.optional_path, None,
    "file with the bearer token the agents expect", "FILE", shown_default="none, no token sent",
)
LOG_RETENTION = o.Option(
    ("--log-retention",), "PODMORTEM_LOG_RETENTION", _retention, "7d",
    "how long and how much of each job's log the store keeps: an age (30m, 12h, 7d), a size "
    "(500Mi, 2Gi) or both, e.g. 7d,2Gi; a job's own spec.logRetention or podmortem.io/log-retention "
    "wins (size default 1Gi)", "AGE[,SIZE]",
)
LOG_STORE_MAX = o.Option(
    ("--log-store-max-bytes",), "PODMORTEM_LOG_STORE_MAX_BYTES", _store_budget, "",
    "bytes the whole log store may take (9Gi, 500Mi): past 95% of it the oldest finished logs are "
    "deleted early, down to 90%; for an emptyDir with a sizeLimit, which evicts the pod rather than "
    "fill (the chart passes the emptyDir's sizeLimit)", "SIZE",
    shown_default="none, only the volume's free space (below 5% free, old logs go early)",
)


def _switch_off(flag: str, env: str, what: str) -> o.Option[bool]:
    """A boolean on by default, turned off by ``flag`` or by ``env=false``."""
    return o.Option(
        (flag,), env, o.boolean, "true",
        f"{what}; the flag is {env}=false (the variable: true, the default, or false; also 1/0, yes/no)",
        shown_default="", action="store_const", const="false",
    )


PATCH_PODS = _switch_off(
    "--no-patch-pods", "PODMORTEM_PATCH_PODS",
    "never patch bare pods: their failure report is then only an Event",
)
AGENT_RECORD_WAIT = o.Option(
    ("--agent-record-wait",), "PODMORTEM_AGENT_RECORD_WAIT_SECONDS", o.seconds(low=0, high=3600),
    _g(_D.agent.record_wait_s),
    "after a report of an OOM kill whose kernel record the agent did not have yet, ask again "
    "for this long (with backoff) and update the report when it comes; 0 turns that off; 0..3600",
    "SECONDS",
)
AGENT_ENABLED = _switch_off(
    "--no-agent", "PODMORTEM_AGENT_ENABLED",
    "there is no node agent: reports use the pod status and logs only",
)
HTTP_PORT = o.Option(
    ("--http-port",), "PODMORTEM_HTTP_PORT", o.port(), str(_D.log_http_port),
    "port of the log HTTP API (GET /logs/...); 0 picks a free one", "PORT",
)
HTTP_AUTH = o.Option(
    ("--http-auth",), "PODMORTEM_HTTP_AUTH", o.choice("kubernetes", "none"), "kubernetes",
    "who may GET /logs: kubernetes = bearer tokens checked with TokenReview and a "
    "SubjectAccessReview for get pods/log in the namespace; none = anyone who reaches the port",
    "{kubernetes,none}",
)
HTTP_TLS_CERT = o.Option(
    ("--http-tls-cert-file",), "PODMORTEM_HTTP_TLS_CERT_FILE", o.optional_path, None,
    "PEM certificate (chain) of the log API: serve HTTPS; needs --http-tls-key-file (the chart mounts "
    "a Secret or a cert-manager Certificate)", "FILE", shown_default="none, plain HTTP",
)
HTTP_TLS_KEY = o.Option(
    ("--http-tls-key-file",), "PODMORTEM_HTTP_TLS_KEY_FILE", o.optional_path, None,
    "PEM private key of --http-tls-cert-file", "FILE", shown_default="none",
)
HTTP_TOKEN_AUDIENCE = o.Option(
    ("--http-token-audience",), "PODMORTEM_HTTP_TOKEN_AUDIENCE", o.any_text, "",
    "audience a reader's token must be meant for (TokenReview spec.audiences; comma-separated for "
    "several), e.g. podmortem: readers use `kubectl create token SA --audience podmortem`, a token the "
    "operator could not replay against the apiserver", "AUDIENCE", shown_default="the apiserver's own",
)
HTTP_MAX_READERS = o.Option(
    ("--http-max-readers",), "PODMORTEM_HTTP_MAX_READERS",
    o.whole("a number of readers", low=1, high=100_000),
    str(_D.log_server.max_readers),
    "log readers streaming at once (each holds up to ~1 MiB); beyond it 429 with Retry-After", "N",
)
HTTP_MAX_READERS_PER_CALLER = o.Option(
    ("--http-max-readers-per-caller",), "PODMORTEM_HTTP_MAX_READERS_PER_CALLER",
    o.whole("a number of readers", low=1, high=100_000), str(_D.log_server.max_readers_per_caller),
    "log readers one user (or one client address without auth) may stream at once", "N",
)
LOG_BASE_URL = o.Option(
    ("--log-base-url",), "PODMORTEM_LOG_BASE_URL", o.http_url(paths=True), None,
    "base URL users reach the log API at, written into reports and status.log.url", "URL",
    shown_default="http://SERVICE.NAMESPACE.svc:PORT from PODMORTEM_SERVICE_NAME (the chart's Service), "
    "PODMORTEM_POD_NAMESPACE and --http-port when the Service name is set, else just the /logs/... path",
)
STATUS_REFRESH = o.Option(
    ("--status-refresh-seconds",), "PODMORTEM_STATUS_REFRESH_SECONDS", o.seconds(low=0, high=86400),
    _g(_D.last_log_line_interval_s),
    "how often a running TrainingJob's status.lastLogLineAt and status.log are refreshed "
    "(0 = only on pod events); 0..86400", "SECONDS",
)
LEADER_ELECTION = o.Option(
    ("--leader-election",), "PODMORTEM_LEADER_ELECTION", o.boolean, "false",
    "hold a coordination.k8s.io Lease; only its holder runs the handlers (the variable takes "
    "true/false, 1/0, yes/no)",
    action=argparse.BooleanOptionalAction,
)
LEASE = o.Option(
    ("--leader-election-lease",), "PODMORTEM_LEADER_ELECTION_LEASE", o.dns_subdomain("Lease name"),
    "podmortem-operator", "name of the Lease", "NAME",
)
LEASE_NAMESPACE = o.Option(
    ("--leader-election-namespace",), "PODMORTEM_POD_NAMESPACE", o.dns_label("namespace name"), "podmortem",
    "namespace of the Lease (the operator's own)", "NS",
)
IDENTITY = o.Option(
    ("--leader-election-identity",), "PODMORTEM_POD_NAME", o.text("a name"), None,
    "this replica's name in the Lease", "NAME", shown_default="the host name",
)
LEASE_DURATION = o.Option(
    ("--leader-election-lease-duration",), "PODMORTEM_LEADER_ELECTION_LEASE_DURATION_SECONDS",
    o.seconds(above=0, high=3600), "15", "seconds a Lease lives without renewal", "SECONDS",
)
RENEW_DEADLINE = o.Option(
    ("--leader-election-renew-deadline",), "PODMORTEM_LEADER_ELECTION_RENEW_DEADLINE_SECONDS",
    o.seconds(above=0, high=3600), "10",
    "seconds the leader tries to renew; must be less than the lease duration", "SECONDS",
)
RETRY_PERIOD = o.Option(
    ("--leader-election-retry-period",), "PODMORTEM_LEADER_ELECTION_RETRY_PERIOD_SECONDS",
    o.seconds(above=0, high=3600), "2",
    "seconds between Lease attempts; must be less than the renew deadline", "SECONDS",
)
METRICS_PORT = o.Option(
    ("--metrics-port",), "PODMORTEM_METRICS_PORT", o.port(), str(_D.metrics_port),
    "port of /metrics; 0 picks a free one", "PORT",
)
HEALTH_PORT = o.Option(
    ("--health-port",), "PODMORTEM_HEALTH_PORT", o.port(), str(_D.health_port),
    "port of /healthz and /readyz; 0 picks a free one", "PORT",
)
EARLY_WARNING_EPOCHS = o.Option(
    ("--early-warning-epochs",), "PODMORTEM_EARLY_WARNING_EPOCHS",
    o.whole("a whole number of epochs", low=1, high=1000), str(_D.early_warning_epochs),
    "warn when the peak is projected to cross the limit within K epochs; 1..1000", "K",
)
MEMORY_WARNING_RATIO = o.Option(
    ("--memory-warning-ratio",), "PODMORTEM_MEMORY_WARNING_RATIO", o.number("a ratio", above=0, high=1),
    _g(_D.memory_warning_ratio),
    "fraction of the memory limit at which the pod peak alone raises MemoryPressure; above 0, at most 1",
    "RATIO",
)
STATUS_MAX_BYTES = o.Option(
    ("--status-max-bytes",), "PODMORTEM_REPORT_STATUS_MAX_BYTES",
    o.whole("a number of bytes", low=1024, high=1 << 20), str(_D.status_report_max_bytes),
    "bytes of JSON a report may take in a TrainingJob's status; 1024..1048576", "BYTES",
)
ANNOTATION_MAX_BYTES = o.Option(
    ("--annotation-max-bytes",), "PODMORTEM_REPORT_ANNOTATION_MAX_BYTES",
    o.whole("a number of bytes", low=256, high=256 * 1024), str(_D.annotation_report_max_bytes),
    "bytes of JSON in the podmortem.io/failure-report annotation; 256..262144", "BYTES",
)
FOREIGN_KINDS = o.Option(
    ("--foreign-kinds",), "PODMORTEM_FOREIGN_KINDS", o.foreign_kinds(_foreign_kinds), None,
    'annotated job kinds: the chart\'s JSON [{"group":"batch","version":"v1","resource":"jobs"}] '
    '("version": "" = preferred; [] = none) or jobs.batch,kubeflow.org/v1/pytorchjobs', "KINDS",
    shown_default="batch/v1 jobs, kubeflow.org/v1 pytorchjobs and jobset.x-k8s.io/v1alpha2 jobsets",
)



FOLLOW_SELECTOR = o.Option(
    ("--follow-selector",), "PODMORTEM_FOLLOW_SELECTOR", o.label_selector, None,
    "follow and report every pod whose labels match this Kubernetes label selector (app=trainer,"
    "tier in (gpu,tpu),!canary), opted in or not, as if annotated podmortem.io/watch: \"true\"; "
    "with --follow-namespace, only in those namespaces", "SELECTOR", shown_default="none",
)
FOLLOW_NAMESPACES = o.Option(
    ("--follow-namespace",), "PODMORTEM_FOLLOW_NAMESPACES", o.dns_labels(), "",
    "follow and report the pods of this namespace that --follow-selector matches (every pod of it "
    "without a selector; repeatable; the variable is comma-separated)", "NS",
    shown_default="every watched namespace", action="append", dest_name="follow_namespaces",
)

def _resources(text: str) -> dict[str, Any]:
    """A core/v1 ResourceRequirements as JSON (the chart's ``toJson .Values.sidecar.resources``)."""
    import json

    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        raise ValueError('expected JSON such as {"requests":{"memory":"48Mi"},"limits":{"memory":"64Mi"}}'
                         ) from None
    def quantities(part: Any) -> bool:
        return isinstance(part, dict) and all(isinstance(q, str | int) for q in part.values())

    if not isinstance(value, dict) or set(value) - {"requests", "limits"} or not all(
        quantities(part) for part in value.values()
    ):
        raise ValueError("expected a JSON object with requests and/or limits, each a map of quantities")
    return value


def _regex(text: str) -> str | None:
    """The expression as written (the sidecar compiles it again), once it compiles."""
    pattern = o.regex(text)
    return pattern.pattern if pattern is not None else None


SIDECAR = o.Option(
    ("--sidecar",), "PODMORTEM_INJECT_SIDECAR", o.boolean, "false",
    "add the podmortem sidecar (docs/sidecar.md) to every TrainingJob's pod unless its spec.sidecar is "
    "false; a TrainingJob with spec.sidecar: true gets it either way (the variable takes true/false, "
    "1/0, yes/no)",
    action=argparse.BooleanOptionalAction,
)
SIDECAR_IMAGE = o.Option(
    ("--sidecar-image",), "PODMORTEM_INJECT_SIDECAR_IMAGE", o.any_text, "",
    "image of the sidecar container (one with the podmortem command; the chart passes its own image); "
    "needed by --sidecar, spec.sidecar and --webhook-port", "IMAGE", shown_default="none",
)
SIDECAR_PULL_POLICY = o.Option(
    ("--sidecar-pull-policy",), "PODMORTEM_INJECT_SIDECAR_PULL_POLICY",
    o.choice("Always", "IfNotPresent", "Never"), _D.sidecar.pull_policy,
    "imagePullPolicy of the sidecar container", "{Always,IfNotPresent,Never}",
)
SIDECAR_RESOURCES = o.Option(
    ("--sidecar-resources",), "PODMORTEM_INJECT_SIDECAR_RESOURCES", _resources, None,
    "resources of the sidecar container as JSON, e.g. "
    '{"requests":{"cpu":"10m","memory":"48Mi"},"limits":{"memory":"64Mi"}}', "JSON",
    shown_default="requests cpu 10m, memory 48Mi; limit memory 64Mi",
)
SIDECAR_COMM = o.Option(
    ("--sidecar-comm",), "PODMORTEM_INJECT_SIDECAR_COMM", _regex, None,
    "passed to the sidecar as --comm: a regular expression the trainer's process name matches "
    "(e.g. 'python.*|torchrun'), for pods whose other containers start processes first", "REGEX",
    shown_default="none, the sidecar's own rule",
)
WEBHOOK_PORT = o.Option(
    ("--webhook-port",), "PODMORTEM_WEBHOOK_PORT", o.port(), None,
    "serve the mutating admission webhook (POST /mutate/pods, HTTPS) that adds the sidecar to the pods "
    "the chart's MutatingWebhookConfiguration selects; needs --webhook-tls-cert-file, "
    "--webhook-tls-key-file and --sidecar-image; 0 picks a free one", "PORT",
    shown_default="none, no webhook",
)
WEBHOOK_TLS_CERT = o.Option(
    ("--webhook-tls-cert-file",), "PODMORTEM_WEBHOOK_TLS_CERT_FILE", o.optional_path, None,
    "PEM certificate (chain) of the webhook, for its Service's DNS name (the chart mounts a generated "
    "Secret or cert-manager's); reloaded within 30 s when renewed", "FILE", shown_default="none",
)
WEBHOOK_TLS_KEY = o.Option(
    ("--webhook-tls-key-file",), "PODMORTEM_WEBHOOK_TLS_KEY_FILE", o.optional_path, None,
    "PEM private key of --webhook-tls-cert-file", "FILE", shown_default="none",
)
WEBHOOK_EXCLUDE = o.Option(
    ("--webhook-exclude-namespaces",), "PODMORTEM_WEBHOOK_EXCLUDE_NAMESPACES", o.dns_labels(), "kube-system",
    "namespaces whose pods the webhook admits unchanged whatever the MutatingWebhookConfiguration "
    "selects, besides the operator's own (--leader-election-namespace, PODMORTEM_POD_NAMESPACE), "
    "which is always left out", "NS,...",
)
API_QPS = o.Option(
    ("--api-qps",), "PODMORTEM_API_QPS", o.number("requests per second", above=0), str(_D.api_qps),
    "the log followers' API requests per second on average (pod reads, log streams), as client-go's "
    "QPS: a restart over many pods opens their streams at this pace", "QPS",
)
API_BURST = o.Option(
    ("--api-burst",), "PODMORTEM_API_BURST", o.whole("a number of requests", low=1), str(_D.api_burst),
    "how many of those requests may go at once before the pace applies (client-go's burst)", "N",
)
#: Deadlines and connection caps of each server (the chart's ``serverLimits``).
HTTP_LIMITS = server_limit_options("http", "HTTP", "the log API", _D.log_server.connections)
WEBHOOK_LIMITS = server_limit_options("webhook", "WEBHOOK", "the webhook", s.WebhookSettings(
    tls_cert_file=Path(), tls_key_file=Path()).connections)
PROBE_LIMITS = server_limit_options("probe", "PROBE", "the metrics and health servers", _D.probe_connections)
#: Variables with no flag of their own.
LOG_LEVEL = o.Option((), "PODMORTEM_LOG_LEVEL", o.choice(*o.LOG_LEVELS), "info")
SERVICE_NAME = o.Option((), "PODMORTEM_SERVICE_NAME", o.dns_label("Service name"), None)

#: Every option, in the order ``--help`` lists them (``--kubeconfig`` comes first, on its own).
OPTIONS: tuple[o.Option[Any], ...] = (
    NAMESPACES, STORE_DIR, PROMETHEUS_URL, AGENT_PORT, AGENT_NAMESPACE, AGENT_SELECTOR, AGENT_TOKEN_FILE,
    LOG_RETENTION, LOG_STORE_MAX, PATCH_PODS, AGENT_RECORD_WAIT, AGENT_ENABLED, HTTP_PORT, HTTP_AUTH,
    HTTP_TLS_CERT, HTTP_TLS_KEY, HTTP_TOKEN_AUDIENCE, HTTP_MAX_READERS, HTTP_MAX_READERS_PER_CALLER,
    LOG_BASE_URL,
    STATUS_REFRESH, LEADER_ELECTION, LEASE, LEASE_NAMESPACE, IDENTITY, LEASE_DURATION, RENEW_DEADLINE,
    RETRY_PERIOD, METRICS_PORT, HEALTH_PORT, EARLY_WARNING_EPOCHS, MEMORY_WARNING_RATIO, STATUS_MAX_BYTES,
    ANNOTATION_MAX_BYTES, FOREIGN_KINDS, FOLLOW_SELECTOR, FOLLOW_NAMESPACES,
    SIDECAR, SIDECAR_IMAGE, SIDECAR_PULL_POLICY, SIDECAR_RESOURCES,
    SIDECAR_COMM, WEBHOOK_PORT, WEBHOOK_TLS_CERT, WEBHOOK_TLS_KEY, WEBHOOK_EXCLUDE, API_QPS, API_BURST,
    *HTTP_LIMITS.all, *WEBHOOK_LIMITS.all, *PROBE_LIMITS.all,
    LOG_LEVEL,
    SERVICE_NAME,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "operator",
        help="run the operator: TrainingJobs, annotated jobs and pods, a report for each failed container",
        description=(
            "Run the podmortem operator. It creates and follows TrainingJob pods, follows pods and jobs "
            'annotated podmortem.io/watch: "true", keeps their logs in a durable store, and when a container '
            "exits non-zero, is OOMKilled or evicted writes a failure report (TrainingJob status, or the "
            "podmortem.io/failure-report annotation plus an Event). With --sidecar (or a TrainingJob's "
            "spec.sidecar) its pods get the podmortem sidecar; with --webhook-port it also serves the "
            "admission webhook that adds the sidecar to other labelled pods. Flags default to the "
            "PODMORTEM_* "
            "environment variables the Helm chart sets, shown as [env ...]; an empty variable counts as "
            "unset. PODMORTEM_LOG_LEVEL (debug, info, warning, error, critical) sets the log level. A bad "
            "value stops the operator at once with one line naming the flag and the variable (exit 2)."
        ),
    )
    p.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, then the pod's service account, then ~/.kube/config; "
        "exec and auth-provider plugins are run as kubectl runs them)",
    )
    o.add_all(p, OPTIONS)
    p.set_defaults(func=run)


def _service_url(values: o.Values, http_port: int, scheme: str) -> str:
    """The in-cluster URL of the chart's Service, when the chart says its name; else empty."""
    service = values.optional(SERVICE_NAME)
    if not service:
        return ""
    namespace = values.env(LEASE_NAMESPACE) or "default"
    return f"{scheme}://{service}.{namespace}.svc:{http_port}"


def _log_server(v: o.Values) -> HttpSettings:
    cert, key = v.optional(HTTP_TLS_CERT), v.optional(HTTP_TLS_KEY)
    if (cert is None) != (key is None):
        raise v.conflict("TLS for the log API needs both a certificate and a key",
                         HTTP_TLS_CERT, HTTP_TLS_KEY)
    return replace(
        _D.log_server, tls_cert_file=cert, tls_key_file=key,
        max_readers=v.value(HTTP_MAX_READERS), max_readers_per_caller=v.value(HTTP_MAX_READERS_PER_CALLER),
        connections=HTTP_LIMITS.read(v),
    )


def _sidecar(v: o.Values) -> s.SidecarInjectionSettings:
    resources = v.optional(SIDECAR_RESOURCES)
    return s.SidecarInjectionSettings(
        trainingjobs=v.value(SIDECAR),
        image=v.value(SIDECAR_IMAGE).strip(),
        pull_policy=v.value(SIDECAR_PULL_POLICY),
        resources=resources if resources is not None else s.DEFAULT_SIDECAR_RESOURCES,
        comm=v.optional(SIDECAR_COMM),
    )


def _webhook(v: o.Values, sidecar: s.SidecarInjectionSettings) -> s.WebhookSettings | None:
    port = v.optional(WEBHOOK_PORT)
    cert, key = v.optional(WEBHOOK_TLS_CERT), v.optional(WEBHOOK_TLS_KEY)
    if port is None:
        if cert is not None or key is not None:
            raise v.conflict("a webhook certificate without --webhook-port: set the port too (or neither)",
                             WEBHOOK_PORT, WEBHOOK_TLS_CERT if cert is not None else WEBHOOK_TLS_KEY)
        return None
    if cert is None or key is None:
        raise v.conflict("the webhook is served over HTTPS only (the API server calls nothing else): "
                         "it needs a certificate and a key", WEBHOOK_PORT, WEBHOOK_TLS_CERT, WEBHOOK_TLS_KEY)
    if not sidecar.image:
        raise v.conflict("the webhook adds the sidecar: it needs the sidecar's image", WEBHOOK_PORT,
                         SIDECAR_IMAGE)
    own = v.value(LEASE_NAMESPACE)
    excluded = (own, *(ns for ns in v.value(WEBHOOK_EXCLUDE) if ns != own))
    return s.WebhookSettings(port=port, tls_cert_file=cert, tls_key_file=key, excluded_namespaces=excluded,
                             connections=WEBHOOK_LIMITS.read(v))


def _follow_selector(v: o.Values) -> PodSelector | None:
    selector, namespaces = v.optional(FOLLOW_SELECTOR), v.value(FOLLOW_NAMESPACES)
    if selector is None and not namespaces:
        return None
    watched = v.value(NAMESPACES)
    unseen = [ns for ns in namespaces if watched and ns not in watched]
    if unseen:
        raise v.conflict(f"{', '.join(unseen)} not watched: their pods are never seen; watch them too",
                         FOLLOW_NAMESPACES, NAMESPACES)
    return PodSelector(selector=selector if selector is not None else LabelSelector(), namespaces=namespaces)


def settings_from(args: argparse.Namespace) -> s.OperatorSettings:
    """The settings from the command line and the environment.

    Raises :class:`~podmortem.cli.options.SettingError` (a ValueError), one line naming the flag
    and the variable, for a value that cannot be used.
    """
    v = o.Values(args)
    age, size = v.value(LOG_RETENTION)
    leader = v.value(LEADER_ELECTION)
    lease_duration, renew_deadline, retry_period = (
        v.value(LEASE_DURATION), v.value(RENEW_DEADLINE), v.value(RETRY_PERIOD)
    )
    if leader and not retry_period < renew_deadline < lease_duration:
        raise v.conflict(
            "leader election needs retry period < renew deadline < lease duration",
            RETRY_PERIOD, RENEW_DEADLINE, LEASE_DURATION,
        )
    http_port = v.value(HTTP_PORT)
    log_server = _log_server(v)
    audiences = tuple(a.strip() for a in v.value(HTTP_TOKEN_AUDIENCE).split(",") if a.strip())
    kinds = v.optional(FOREIGN_KINDS)
    base_url = v.optional(LOG_BASE_URL)
    sidecar = _sidecar(v)
    if sidecar.trainingjobs and not sidecar.image:
        raise v.conflict("the sidecar needs its image", SIDECAR, SIDECAR_IMAGE)
    webhook = _webhook(v, sidecar)
    follow = _follow_selector(v)
    try:
        return s.OperatorSettings(
            log_retention_s=age if age is not None else _D.log_retention_s,
            log_retention_bytes=size if size is not None else _D.log_retention_bytes,
            log_store_max_bytes=v.optional(LOG_STORE_MAX),
            patch_pods=v.value(PATCH_PODS),
            agent=s.AgentAccessSettings(
                enabled=v.value(AGENT_ENABLED),
                namespace=v.value(AGENT_NAMESPACE),
                label_selector=v.value(AGENT_SELECTOR),
                port=v.value(AGENT_PORT),
                token_path=v.optional(AGENT_TOKEN_FILE),
                record_wait_s=v.value(AGENT_RECORD_WAIT),
            ),
            prometheus=s.PrometheusSettings(url=v.optional(PROMETHEUS_URL)),
            store_dir=v.value(STORE_DIR),
            foreign_kinds=_foreign_kinds("") if kinds is None else kinds,
            early_warning_epochs=v.value(EARLY_WARNING_EPOCHS),
            memory_warning_ratio=v.value(MEMORY_WARNING_RATIO),
            status_report_max_bytes=v.value(STATUS_MAX_BYTES),
            annotation_report_max_bytes=v.value(ANNOTATION_MAX_BYTES),
            api_qps=v.value(API_QPS),
            api_burst=v.value(API_BURST),
            log_http_port=http_port,
            log_http_auth=v.value(HTTP_AUTH) == "kubernetes",
            log_http_token_audiences=audiences,
            log_server=log_server,
            log_base_url=base_url or _service_url(v, http_port, log_server.scheme),
            last_log_line_interval_s=v.value(STATUS_REFRESH),
            leader_election=(
                s.LeaderElectionSettings(
                    lease_name=v.value(LEASE),
                    lease_namespace=v.value(LEASE_NAMESPACE),
                    identity=v.optional(IDENTITY) or socket.gethostname(),
                    lease_duration_s=lease_duration,
                    renew_deadline_s=renew_deadline,
                    retry_period_s=retry_period,
                )
                if leader
                else None
            ),
            metrics_port=v.value(METRICS_PORT),
            health_port=v.value(HEALTH_PORT),
            probe_connections=PROBE_LIMITS.read(v),
            namespaces=v.value(NAMESPACES),
            sidecar=sidecar,
            webhook=webhook,
            follow_selector=follow,
        )
    except o.SettingError:
        raise
    except ValueError as exc:  # a range the settings themselves check
        raise o.SettingError(" ".join(str(exc).split())) from None


def check_startup(args: argparse.Namespace, settings: s.OperatorSettings) -> None:
    """What needs the file system or the network: the store can be written, the ports are free."""
    v = o.Values(args)
    o.check_directory(v, STORE_DIR, settings.store_dir)
    try:
        settings.log_server.certificate()
    except (OSError, ssl.SSLError) as exc:
        reason = (exc.strerror or str(exc)) if not isinstance(exc, ssl.SSLError) else (exc.reason or str(exc))
        raise v.conflict(f"cannot load the log API's TLS certificate and key: {reason}",
                         HTTP_TLS_CERT, HTTP_TLS_KEY) from None
    ports = [
        (HTTP_PORT, settings.log_http_port),
        (METRICS_PORT, settings.metrics_port),
        (HEALTH_PORT, settings.health_port),
    ]
    if settings.webhook is not None:
        try:
            ServerCertificate(settings.webhook.tls_cert_file, settings.webhook.tls_key_file)
        except (OSError, ssl.SSLError) as exc:
            reason = (exc.reason or str(exc)) if isinstance(exc, ssl.SSLError) else (exc.strerror or str(exc))
            raise v.conflict(f"cannot load the webhook's TLS certificate and key: {reason}",
                             WEBHOOK_TLS_CERT, WEBHOOK_TLS_KEY) from None
        ports.append((WEBHOOK_PORT, settings.webhook.port))
    o.check_listen(v, settings.listen_host, ports)


def run(args: argparse.Namespace) -> int:
    import logging
    import sys

    try:
        level = o.Values(args).value(LOG_LEVEL)
        settings = settings_from(args)
        check_startup(args, settings)
    except o.SettingError as exc:
        print(f"podmortem operator: {exc}", file=sys.stderr)
        return 2

    from podmortem import open_files, startup_gc, tls_buffers
    from podmortem.kube import config as kube_config
    from podmortem.operator.watching import run as runtime

    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if logging.getLogger().isEnabledFor(logging.INFO) and not logging.getLogger().isEnabledFor(logging.DEBUG):
        # kopf says "Handler ... succeeded." at INFO for every object event: 10,000 lines when the
        # operator starts over 10,000 pods, and one per pod event after. Its warnings and errors stay;
        # PODMORTEM_LOG_LEVEL=debug shows everything.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)

    try:
        access = kube_config.load(args.kubeconfig)
    except kube_config.KubeconfigError as exc:
        print(f"podmortem operator: {exc}", file=sys.stderr)
        return 2
    open_files.raise_and_log()
    startup_gc.freeze()
    startup_gc.set_thresholds()
    tls_buffers.shrink()  # one log stream per pod, each a TLS connection: 16 KiB each, not 256
    try:
        runtime.run_to_end(runtime.run_operator(settings=settings, access=access))
    except (runtime.LeadershipLost, runtime.KopfStuck) as exc:
        print(f"podmortem operator: {exc}", file=sys.stderr)
        return 1
    return 0
