"""Everything the node agent can be told, in one documented place.

The agent runs as a DaemonSet with the host's ``/proc`` and ``/sys/fs/cgroup``
mounted read-only under ``/host``; tests point the same fields at fake trees
under ``tmp_path``. Each field says its unit and why its default is what it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

KernelLogSource = Literal["auto", "kmsg", "off"]


@dataclass(frozen=True)
class AgentSettings:
    """How one node agent finds its pods, samples them, and serves the evidence."""

    #: The Kubernetes node this agent runs on (the downward API's ``spec.nodeName``). Pods are listed
    #: with ``fieldSelector=spec.nodeName=<node_name>``; in static mode it only labels the evidence.
    node_name: str = ""

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

    #: How long evidence of a pod that left this node is still served, in seconds. The operator asks
    #: for it within seconds of a termination; 15 minutes covers a slow or restarted operator.
    forget_after_s: float = 900.0

    #: Directory for the agent's small state file (the last /dev/kmsg sequence number read, and the
    #: boot it belongs to). A hostPath, so that a restarted agent resumes instead of rescanning.
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

    #: The kernel's log device. Reading it needs CAP_SYSLOG (or ``kernel.dmesg_restrict=0``).
    kmsg_path: Path = Path("/dev/kmsg")

    #: Where kernel OOM records come from: "kmsg" (/dev/kmsg), "auto" (the same, today; a syslog(2)
    #: fallback is planned), or "off" (sample only, e.g. where no OOM records are wanted).
    kernel_log_source: KernelLogSource = "auto"

    #: Address the HTTP server binds: evidence, /healthz and /metrics share it.
    listen_host: str = "0.0.0.0"

    #: TCP port of evidence and /healthz: 8090, the Helm chart's ``agent.http.port``.
    listen_port: int = 8090

    #: TCP port of /metrics alone (no token), 9090 as in the chart; the same as ``listen_port`` or 0
    #: serves /metrics on the main port only.
    metrics_port: int = 9090

    #: Static mode, for tests and nodes without an API server: pod UID → cgroup path (relative to the
    #: memory hierarchy's root, as the kernel prints it in OOM records). When set, the Kubernetes API
    #: is not used at all.
    static_pods: dict[str, str] = field(default_factory=dict)

    #: Annotation that opts a pod (not owned by a TrainingJob) into sampling; its value must be "true".
    watch_annotation: str = "podmortem.io/watch"

    #: Seconds between two pod listings from the API server. Pods start slowly compared to this, and a
    #: node's list is small; a watch would be cheaper only on huge nodes.
    pod_refresh_s: float = 15.0

    #: Seconds to wait for in-flight work on a graceful stop before giving up.
    stop_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if self.poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be positive, got {self.poll_interval_s}")
        if self.ring_size < 1:
            raise ValueError(f"ring_size must be at least 1, got {self.ring_size}")
        if self.kernel_records_per_pod < 1:
            raise ValueError(f"kernel_records_per_pod must be at least 1, got {self.kernel_records_per_pod}")
        if self.kernel_log_source not in ("auto", "kmsg", "off"):
            raise ValueError(f"kernel_log_source must be auto, kmsg or off, got {self.kernel_log_source!r}")
        for name in ("listen_port", "metrics_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ValueError(f"{name} must be 0..65535, got {getattr(self, name)}")
        for uid, path in self.static_pods.items():
            if not path.startswith("/") or path == "/":
                raise ValueError(f"static pod {uid}: cgroup path must be absolute and not '/', got {path!r}")

    @property
    def kmsg_state_file(self) -> Path:
        return self.state_dir / "kmsg-position.json"
