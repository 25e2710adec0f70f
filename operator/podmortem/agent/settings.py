"""Everything the node agent can be told, in one documented place.

The agent runs as a DaemonSet with the host's ``/proc`` and ``/sys/fs/cgroup``
mounted read-only under ``/host``; tests point the same fields at fake trees
under ``tmp_path``. Each field says its unit and why its default is what it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from podmortem.connection_limits import ServerLimits
from podmortem.kube.label_selector import PodSelector
from podmortem.kube.owners import DEFAULT_FOREIGN_KINDS, WATCH_ANNOTATION, ForeignKind

KernelLogSource = Literal["auto", "kmsg", "syslog", "off"]
KERNEL_LOG_SOURCES: tuple[KernelLogSource, ...] = ("auto", "kmsg", "syslog", "off")


@dataclass(frozen=True)
class AgentSettings:
    """How one node agent finds its pods, samples them, and serves the evidence."""

    #: The Kubernetes node this agent runs on (the downward API's ``spec.nodeName``). Pods are listed
    #: with ``fieldSelector=spec.nodeName=<node_name>``; in static mode it only labels the evidence.
    node_name: str = ""

    #: This agent's own pod and namespace (the downward API), for its log and /healthz only.
    pod_name: str = ""
    pod_namespace: str = ""

    #: Seconds between two memory samples of every watched pod. 10 s is what the issue asks for: an
    #: epoch of a long training run takes minutes, so growth is visible, and reading a few hundred
    #: small files every 10 s costs well under 1% of a core.
    poll_interval_s: float = 10.0

    #: Samples kept per pod (a ring; the oldest go first). 360 × 10 s = one hour of history, about
    #: 1 MiB per pod with a dozen processes: enough to see an epoch's growth before a kill.
    ring_size: int = 360

    #: Kernel OOM records kept per pod. A pod rarely collects more than a handful before it dies;
    #: the cap only bounds memory if a crash-looping container is killed again and again.
    kernel_records_per_pod: int = 32

    #: How long a kernel record that names no pod the agent knows yet is kept and matched again
    #: after each sampling round, in seconds: a pod killed before the agent's first round after a
    #: restart, or within its first seconds on the node. Records of other processes age out.
    unplaced_record_keep_s: float = 120.0

    #: How long evidence of a pod that left this node is still served, in seconds. The operator asks
    #: for it within seconds of a termination; 15 minutes covers a slow or restarted operator.
    forget_after_s: float = 900.0

    #: Directory for the agent's small state files (the last /dev/kmsg sequence number read, or the
    #: syslog(2) cursor, and the boot they belong to; the kernel records placed so far). A hostPath,
    #: so that a restarted agent resumes instead of rescanning, and still serves earlier records.
    state_dir: Path = Path("/var/lib/podmortem/agent")

    #: File holding the bearer token the operator must present (mounted from a Secret), re-read when
    #: it changes, so a rotated Secret needs no restart. None turns authentication off (the chart's
    #: contract when no Secret is configured); the agent then says so in its log and /healthz.
    token_path: Path | None = None

    #: The host's /proc (``/host/proc`` in the DaemonSet). Used for smaps_rollup, comm and boot_id.
    proc_root: Path = Path("/proc")

    #: The host's cgroup mount (``/host/sys/fs/cgroup`` in the DaemonSet). v1 (``memory/`` below it)
    #: and v2 (a unified tree with the memory controller) are both detected here.
    cgroup_root: Path = Path("/sys/fs/cgroup")

    #: The kernel's log device (``/host/dev/kmsg`` where the chart mounts the host's). Reading it needs
    #: CAP_SYSLOG, and a container runtime lets a container open a hostPath device only when it is
    #: privileged (or the device is allowed explicitly); ``auto`` then falls back to syslog(2).
    kmsg_path: Path = Path("/dev/kmsg")

    #: Where kernel OOM records come from: "kmsg" (/dev/kmsg), "syslog" (the syslog(2) call, which
    #: needs only CAP_SYSLOG), "auto" (/dev/kmsg if it can be opened, else syslog(2); the log says which,
    #: with the words "kernel log"), or "off" (sample only).
    kernel_log_source: KernelLogSource = "auto"

    #: Seconds between two reads of the kernel ring buffer through syslog(2). Each read copies the
    #: whole buffer (128 KiB to a few MiB) and, when nothing is new, compares one line: 0.5 s costs
    #: well under 1% of a core and keeps a kill's record at most about a second behind the kernel,
    #: since the operator asks for the evidence right after it sees the pod die.
    syslog_poll_s: float = 0.5

    #: Seconds between attempts to open an unreadable kernel log (missing capability, blocked device).
    #: Such causes are configuration and do not fix themselves quickly; the reason shows in /healthz.
    kernel_log_retry_s: float = 30.0

    #: Address the HTTP server binds: evidence, /healthz and /metrics share it.
    listen_host: str = "0.0.0.0"

    #: TCP port of evidence and /healthz: 8090, the Helm chart's ``agent.http.port``.
    listen_port: int = 8090

    #: TCP port of /metrics alone (no token), 9090 as in the chart; the same as ``listen_port`` or 0
    #: serves /metrics on the main port only.
    metrics_port: int = 9090
    #: Deadlines and connection caps of both ports (`podmortem.serving_limits`): the node's whole
    #: network reaches them, and the operator, the kubelet and Prometheus need a few connections each.
    connections: ServerLimits = field(default_factory=ServerLimits)

    #: Static mode, for tests and nodes without an API server: pod UID → cgroup path (relative to the
    #: memory hierarchy's root, as the kernel prints it in OOM records). When set, the Kubernetes API
    #: is not used at all.
    static_pods: dict[str, str] = field(default_factory=dict)

    #: Annotation that opts a pod (not owned by a TrainingJob) into sampling; its value must be "true".
    watch_annotation: str = WATCH_ANNOTATION

    #: Seconds between two pod listings from the API server. Pods start slowly compared to this, and a
    #: node's list is small; a watch would be cheaper only on huge nodes.
    pod_refresh_s: float = 15.0

    #: Object kinds (besides TrainingJob) whose pods are sampled when the object, the pod's direct
    #: owner, is annotated ``podmortem.io/watch: "true"``: the chart's ``foreignKinds``, by default
    #: batch/v1 Jobs and Kubeflow PyTorchJobs, the same as the operator's.
    foreign_kinds: tuple[ForeignKind, ...] = DEFAULT_FOREIGN_KINDS

    #: Seconds an owner's annotation is trusted before it is read again. A job annotated after its
    #: pods started is picked up within this (plus ``pod_refresh_s``); 60 s keeps the API calls to
    #: one per job per minute.
    owner_cache_s: float = 60.0

    #: Namespaces whose pods are listed; empty = all (one cluster-wide list). With a list, the chart
    #: grants the agent RBAC only in those namespaces, so each is listed on its own.
    namespaces: tuple[str, ...] = ()

    #: Pods sampled because of their namespace and labels, opted in or not: the operator's follow
    #: selector (the chart's ``followSelector``), so that the pods it follows and reports by label
    #: have samples and kernel records in their reports as annotated ones do. None: off.
    follow_selector: PodSelector | None = None

    #: Kubeconfig for the API server; None = the pod's service account, else ``$KUBECONFIG`` or
    #: ``~/.kube/config`` (running the agent by hand on a node).
    kubeconfig: Path | None = None

    #: Seconds to wait for in-flight work on a graceful stop before giving up.
    stop_timeout_s: float = 5.0

    #: Every pod's OOM kill on this node, marked for podmortem or not, becomes an Event on the pod
    #: (reason OOMKilling) and a count in ``podmortem_agent_oom_kills_total`` (`oom_events`). Off by
    #: default: it needs the right to create Events, and the operator's reports already cover the
    #: pods it follows.
    oom_events: bool = False
    #: Seconds between two OOM-kill Events on one pod; kills in between are folded into the next.
    #: 60 s: a crash-looping pod (the kubelet's back-off starts at 10 s) gives one Event a minute.
    oom_event_interval_s: float = 60.0
    #: OOM-kill Events the node posts per minute at most, all pods together: a node-wide OOM storm
    #: costs the API server 30 writes a minute, not one per process the kernel killed.
    oom_events_per_minute: int = 30
    #: Pod labels copied onto ``podmortem_agent_oom_kills_total`` (``label_<key>``, as
    #: kube-state-metrics writes them); at most 10, since each multiplies nothing but every series
    #: carries it. Empty: namespace, pod and container only.
    oom_metric_pod_labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be positive, got {self.poll_interval_s}")
        if self.ring_size < 1:
            raise ValueError(f"ring_size must be at least 1, got {self.ring_size}")
        if self.kernel_records_per_pod < 1:
            raise ValueError(f"kernel_records_per_pod must be at least 1, got {self.kernel_records_per_pod}")
        if self.kernel_log_source not in KERNEL_LOG_SOURCES:
            raise ValueError(
                f"kernel_log_source must be one of {', '.join(KERNEL_LOG_SOURCES)}, "
                f"got {self.kernel_log_source!r}"
            )
        for name in ("unplaced_record_keep_s", "forget_after_s", "stop_timeout_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("syslog_poll_s", "kernel_log_retry_s", "pod_refresh_s", "owner_cache_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("listen_port", "metrics_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ValueError(f"{name} must be 0..65535, got {getattr(self, name)}")
        if self.oom_event_interval_s < 0:
            raise ValueError(f"oom_event_interval_s must be >= 0, got {self.oom_event_interval_s}")
        if self.oom_events_per_minute < 1:
            raise ValueError(f"oom_events_per_minute must be at least 1, got {self.oom_events_per_minute}")
        if len(self.oom_metric_pod_labels) > 10:
            raise ValueError(f"at most 10 oom_metric_pod_labels, got {len(self.oom_metric_pod_labels)}")
        for uid, path in self.static_pods.items():
            if not path.startswith("/") or path == "/":
                raise ValueError(f"static pod {uid}: cgroup path must be absolute and not '/', got {path!r}")

    @property
    def kmsg_state_file(self) -> Path:
        return self.state_dir / "kmsg-position.json"

    @property
    def syslog_state_file(self) -> Path:
        return self.state_dir / "syslog-cursor.json"

    @property
    def records_state_file(self) -> Path:
        return self.state_dir / "kernel-records.json"
