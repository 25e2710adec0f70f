"""Everything the operator can be tuned by, in one documented place.

The CLI fills these from flags; the tests build them directly. Each field
says its unit and why its default is what it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from podmortem.connection_limits import ServerLimits
from podmortem.kube.label_selector import PodSelector
from podmortem.kube.owners import DEFAULT_FOREIGN_KINDS, ForeignKind
from podmortem.logs.settings import FollowSettings, HttpSettings

#: The API coordinates of the TrainingJob custom resource.
TRAININGJOB_GROUP = "podmortem.io"
TRAININGJOB_VERSION = "v1alpha1"
TRAININGJOB_PLURAL = "trainingjobs"
TRAININGJOB_KIND = "TrainingJob"


@dataclass(frozen=True)
class AgentAccessSettings:
    """How the operator finds and talks to the node agent on a pod's node."""

    #: Namespace of the agent DaemonSet's pods (the chart installs it next to the operator).
    namespace: str = "podmortem"
    #: Whether there is an agent to ask at all; without one, reports rest on the pod status and logs.
    enabled: bool = True
    #: Label selector of the agent pods; the one on ``spec.nodeName`` is asked.
    label_selector: str = "app.kubernetes.io/name=podmortem,app.kubernetes.io/component=agent"
    #: TCP port the agent serves ``/v1/pods/{uid}/evidence`` on (the chart's ``agent.http.port``).
    port: int = 8090
    #: File holding the bearer token the agent expects; ``None`` sends no token (local use only).
    token_path: Path | None = None
    #: Seconds for the evidence request made inside the report's 2 s budget, connect included: the
    #: report must land within 2 s of seeing the kill, so the agent gets about half of that before
    #: the report is written without it (a missing record is then asked for again, see below).
    timeout_s: float = 1.0
    #: Seconds for each follow-up request for a kernel record that was not there yet. These run after
    #: the report is written, outside its budget, so a loaded agent or API server (the agent pod's
    #: address is looked up through it) gets time to answer rather than being called unavailable.
    followup_timeout_s: float = 5.0
    #: Seconds after the report during which an OOM kill (OOMKilled or exit 137) whose kernel record
    #: was missing is asked for again, and the report patched when it comes. The agent hands a record
    #: over only after ~1 s of kernel-log quiet (later on a busy node), so the kubelet often reports
    #: the kill first; 15 s covers that with margin and still settles the report soon after the
    #: kill. 0 turns the follow-up off: the report then says the record was not found.
    record_wait_s: float = 15.0
    #: Seconds before the first follow-up request; the pause doubles after each, up to
    #: ``record_retry_max_s`` (0.5 s, 1 s, 2 s, 4 s, 4 s...: six requests in 15 s).
    record_retry_min_s: float = 0.5
    #: Longest pause between two follow-up requests, seconds.
    record_retry_max_s: float = 4.0
    #: URL scheme: the agent serves plain HTTP inside the cluster network by default.
    scheme: str = "http"

    def __post_init__(self) -> None:
        if self.record_wait_s < 0:
            raise ValueError(f"the kernel record wait must be 0 s or more, got {self.record_wait_s:g} s")
        if not 0 < self.record_retry_min_s <= self.record_retry_max_s:
            raise ValueError(
                "the kernel record retry pauses need 0 < min <= max, got "
                f"{self.record_retry_min_s:g} s and {self.record_retry_max_s:g} s"
            )
        if self.timeout_s <= 0 or self.followup_timeout_s <= 0:
            raise ValueError("agent request timeouts must be positive")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"the agent port must be 1..65535, got {self.port}")


@dataclass(frozen=True)
class PrometheusSettings:
    """Where the working set over the pod's whole life comes from, when there is a Prometheus."""

    #: Base URL, e.g. ``http://prometheus-server.monitoring``; ``None`` uses the agent's samples only.
    url: str | None = None
    #: Seconds for the query. Prometheus is outside the 2 s budget: a slow one is patched in afterwards.
    timeout_s: float = 10.0
    #: Seconds the report waits for Prometheus before it is written without it (then patched).
    inline_wait_s: float = 0.3
    #: Most points asked for; the step is the pod's life divided by this (Prometheus caps at 11,000).
    max_points: int = 500

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.inline_wait_s < 0:
            raise ValueError(
                f"Prometheus timeouts need timeout > 0 and inline wait >= 0, got {self.timeout_s} s "
                f"and {self.inline_wait_s} s"
            )
        if not 1 <= self.max_points <= 11_000:
            raise ValueError(f"Prometheus max_points must be 1..11000, got {self.max_points}")


@dataclass(frozen=True)
class LeaderElectionSettings:
    """Lease-based leader election: only the holder runs handlers and follows logs.

    Durations follow client-go's defaults. A leader that cannot renew within
    ``renew_deadline_s`` stops (and is restarted by its Deployment) rather than risk
    two replicas writing the same reports.
    """

    #: Name of the Lease object (``PODMORTEM_LEADER_ELECTION_LEASE``).
    lease_name: str = "podmortem-operator"
    #: Namespace of the Lease: the operator's own (``PODMORTEM_POD_NAMESPACE``).
    lease_namespace: str = "podmortem"
    #: This replica's identity in the Lease (the pod name in the cluster).
    identity: str = ""
    #: Seconds a Lease stays valid without renewal.
    lease_duration_s: float = 15.0
    #: Seconds the leader keeps trying to renew before it gives up leadership.
    renew_deadline_s: float = 10.0
    #: Seconds between attempts (a standby's acquisitions and the leader's renewals).
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election needs an identity (PODMORTEM_POD_NAME)")
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s} s, {self.renew_deadline_s} s, {self.lease_duration_s} s"
            )


#: The sidecar's resources: measured at 36 MiB RSS (docs/sidecar.md, bench/sidecar.py) and under 1% of
#: a core, so 48 MiB requested and a 64 MiB limit, with room for pydantic's first model at start-up.
DEFAULT_SIDECAR_RESOURCES: Mapping[str, Any] = MappingProxyType(
    {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "64Mi"}}
)


@dataclass(frozen=True)
class SidecarInjectionSettings:
    """How the operator adds ``podmortem sidecar`` to training pods (docs/sidecar.md).

    Used for the pods it creates from TrainingJobs and by the admission webhook for the pods of
    other kinds. (Not :class:`podmortem.sidecar.settings.SidecarSettings`: that is the sidecar's
    own, inside the pod.)
    """

    #: Add the sidecar to every TrainingJob's pod unless its ``spec.sidecar`` is false (the chart's
    #: ``sidecar.enabled``). Off by default: the node agent, where it runs, sees more (the kernel's
    #: own record), and a sidecar is one more container in every training pod.
    trainingjobs: bool = False
    #: Image of the sidecar container; the chart sets its own (the operator's) image. Empty: no
    #: sidecar can be added (a pod that asks for one is created without it, and says why in a log).
    image: str = ""
    #: ``imagePullPolicy`` of the sidecar container.
    pull_policy: str = "IfNotPresent"
    #: The container's ``resources`` (a core/v1 ResourceRequirements).
    resources: Mapping[str, Any] = field(default_factory=lambda: DEFAULT_SIDECAR_RESOURCES)
    #: ``--comm`` for the sidecar: a regular expression the trainer's process name matches (e.g.
    #: ``python.*|torchrun``), for pods where another container's processes start first (a service
    #: mesh proxy). None: the sidecar's own rule (the lowest pid outside its cgroup).
    comm: str | None = None

    def __post_init__(self) -> None:
        if self.pull_policy not in ("Always", "IfNotPresent", "Never"):
            raise ValueError(f"the sidecar's pull policy must be Always, IfNotPresent or Never, "
                             f"got {self.pull_policy!r}")
        if not isinstance(self.resources, Mapping) or set(self.resources) - {"requests", "limits"}:
            raise ValueError("the sidecar's resources must be a map with requests and/or limits")


@dataclass(frozen=True)
class WebhookSettings:
    """The mutating admission webhook that adds the sidecar to pods of other kinds (HTTPS only:
    the API server calls webhooks over TLS alone)."""

    #: PEM certificate chain and key (the chart's generated Secret or cert-manager's); a renewed
    #: pair is loaded within 30 s, without a restart.
    tls_cert_file: Path
    tls_key_file: Path
    #: Port it listens on (the chart's ``webhook.port``); 0 picks a free one (tests).
    port: int = 9443
    #: Bytes of one AdmissionReview request. The API server sends the whole pod (a few KiB; etcd
    #: caps an object at 1.5 MiB); 1 MiB refuses anything larger before it is parsed.
    max_request_bytes: int = 1 << 20
    #: Namespaces whose pods are admitted unchanged whatever they say: the operator's own (set by
    #: ``podmortem operator`` from ``PODMORTEM_POD_NAMESPACE``) and ``kube-system``. The chart's
    #: selector leaves them out too, but the port is open to every pod: a selector edited by hand,
    #: or a review posted by anyone, must not put the sidecar into the system's own pods.
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    #: Deadlines and connection caps (`podmortem.serving_limits`). The API server sends a review at
    #: once; any pod of the cluster can reach the port, and 1,000 slow connections held +196 MB
    #: before these limits. Each TLS connection costs ~256 KiB (asyncio's TLS read buffer), so the
    #: caps are lower than other servers': 64 in all (16 MiB), 32 from one address (the API server
    #: sends reviews of a few ms each, a handful at once).
    connections: ServerLimits = field(default_factory=lambda: ServerLimits(
        max_connections=64, max_connections_per_peer=32))

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"the webhook port must be 0..65535, got {self.port}")
        if self.max_request_bytes < 1024:
            raise ValueError(
                f"the webhook request cap must be at least 1024 bytes, got {self.max_request_bytes}"
            )


@dataclass(frozen=True)
class OperatorSettings:
    """The operator's settings; see ``podmortem operator --help`` for the flags that set them."""

    agent: AgentAccessSettings = field(default_factory=AgentAccessSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    #: Directory of the durable log store (a PVC in the cluster); cursors persist here too.
    store_dir: Path = Path("/var/lib/podmortem/logs")
    #: Job kinds followed when annotated ``podmortem.io/watch: "true"`` (pods always are).
    foreign_kinds: tuple[ForeignKind, ...] = DEFAULT_FOREIGN_KINDS
    #: Epochs ahead the early-warning projection looks: warn when the pod peak is projected to
    #: cross the limit within this many epochs. 3 leaves time to act on a multi-hour job.
    early_warning_epochs: int = 3
    #: Fraction of the limit at which the pod peak alone raises MemoryPressure, projection or not.
    memory_warning_ratio: float = 0.9
    #: Seconds between the last log line and the kill above which the log tail is called stale:
    #: a training loop that prints per step or per epoch is silent longer only when stuck.
    stale_log_threshold_s: float = 600.0
    #: Bytes of JSON the report may take in a TrainingJob's status (etcd objects are capped at 1.5 MiB
    #: and the status shares the object with the pod template).
    status_report_max_bytes: int = 16 * 1024
    #: Bytes of JSON in the ``podmortem.io/failure-report`` annotation (all annotations together
    #: must stay under 256 KiB, and they are sent with every watch event of that object).
    annotation_report_max_bytes: int = 4 * 1024
    #: Seconds between refreshes of a followed TrainingJob's ``status.lastLogLineAt`` and
    #: ``status.log`` (lines, bytes, reconnects, gaps) while its pod runs quietly. Each refresh that
    #: changed something is one API write per job; 30 s keeps 1,000 jobs at ~33 writes/s at most.
    last_log_line_interval_s: float = 30.0
    #: The followers' API requests (pod reads, log requests) per second on average, and how many may
    #: go at once (client-go's QPS and burst; `podmortem.kube.rate_limit`): a restart over
    #: 10,000 pods spreads its 20,000 requests over about 100 s instead of sending them at once.
    api_qps: float = FollowSettings.api_qps or 500.0
    api_burst: int = FollowSettings.api_burst
    #: Whether logs are followed unless a job says otherwise.
    follow_logs: bool = True
    #: Address the HTTP servers bind (logs, metrics, health).
    listen_host: str = "0.0.0.0"
    #: Port of the log HTTP API (``GET /logs/{namespace}/{pod}``); 0 picks a free one (tests).
    log_http_port: int = 8080
    #: Whether the log HTTP API checks bearer tokens with TokenReview/SubjectAccessReview
    #: (``PODMORTEM_HTTP_AUTH=kubernetes``); off (``none``) only behind a port-forward.
    log_http_auth: bool = True
    #: Audiences a reader's token must be meant for (TokenReview ``spec.audiences``), e.g.
    #: ``podmortem``: readers then use bound tokens the operator could not replay against the
    #: apiserver. Empty: the apiserver's own audience, as ``kubectl`` tokens have.
    log_http_token_audiences: tuple[str, ...] = ()
    #: The log server's reader caps, timeouts and TLS (its port is ``log_http_port``, its
    #: address ``listen_host``; those two fields of it are not used).
    log_server: HttpSettings = field(default_factory=HttpSettings)
    #: Base URL under which users reach the log HTTP API (``http://podmortem.podmortem.svc:8080``);
    #: reports and ``status.log.url`` put ``/logs/{namespace}/{pod}`` after it. Empty writes the
    #: path alone, since the operator cannot know how (or whether) users reach its Service.
    log_base_url: str = ""
    #: Port of the Prometheus ``/metrics`` endpoint; 0 picks a free one.
    metrics_port: int = 9090
    #: Port of ``/healthz`` (liveness) and ``/readyz`` (readiness); 0 picks a free one.
    health_port: int = 8081
    #: Deadlines and connection caps of the metrics and health servers (`podmortem.serving_limits`):
    #: their callers (the kubelet, Prometheus) send a request at once and keep a few connections.
    probe_connections: ServerLimits = field(default_factory=ServerLimits)
    #: Default retention of a job's logs after its pod is gone.
    log_retention_s: float = 7 * 86400
    #: Default bytes of log kept per job (all its pods, containers and restarts), oldest first.
    log_retention_bytes: int = 1 << 30
    #: Bytes the whole log store may take (None: only the volume's own free space counts). Set it
    #: for an emptyDir with a ``sizeLimit`` (enforced by eviction, invisible to the store); the
    #: chart sets 90% of the emptyDir's limit or the claim's size.
    log_store_max_bytes: int | None = None
    #: Whether bare pods may be patched (only to write the ``podmortem.io/failure-report`` annotation);
    #: without it their report is an Event only.
    patch_pods: bool = True
    #: Leader election through a coordination.k8s.io Lease, for a second (standby) replica.
    leader_election: LeaderElectionSettings | None = None
    #: Namespaces to watch; empty watches the whole cluster.
    namespaces: tuple[str, ...] = ()
    #: Adding the sidecar to training pods (TrainingJobs' pods and, with ``webhook``, others').
    sidecar: SidecarInjectionSettings = field(default_factory=SidecarInjectionSettings)
    #: The admission webhook; None: not served.
    webhook: WebhookSettings | None = None
    #: Pods followed and reported because of their namespace and labels, opted in or not, as if annotated
    #: ``podmortem.io/watch: "true"`` (default options, the pod's own ``podmortem.io/`` annotations on top;
    #: docs/operator.md, "Following pods by label"). None: only TrainingJobs' pods, annotated pods and the
    #: pods of annotated jobs are. Off by default: following a pod costs a log connection and store space.
    follow_selector: PodSelector | None = None

    def __post_init__(self) -> None:
        if self.early_warning_epochs < 1:
            raise ValueError(f"early_warning_epochs must be at least 1, got {self.early_warning_epochs}")
        if not 0 < self.memory_warning_ratio <= 1:
            raise ValueError(f"memory_warning_ratio must be in (0, 1], got {self.memory_warning_ratio}")
        for name in ("stale_log_threshold_s", "log_retention_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.last_log_line_interval_s < 0:
            raise ValueError(f"last_log_line_interval_s must be >= 0, got {self.last_log_line_interval_s}")
        for name in ("status_report_max_bytes", "annotation_report_max_bytes", "log_retention_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("log_http_port", "metrics_port", "health_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ValueError(f"{name} must be 0..65535, got {getattr(self, name)}")
        if self.follow_selector is not None and self.namespaces:
            unseen = [ns for ns in self.follow_selector.namespaces if ns not in self.namespaces]
            if unseen:
                raise ValueError(f"the follow selector's namespaces {', '.join(unseen)} are not watched "
                                 f"(watched: {', '.join(self.namespaces)}): their pods are never seen")
