"""Prometheus metrics of the report pipeline, served next to the log follower's metrics.

They live in prometheus-client's default registry, like the log metrics, so
one ``/metrics`` endpoint serves both.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

OOM_KILLS = Counter(
    "podmortem_oom_kills_total",
    "Terminations with exit 137, OOMKilled or eviction that got a report, by the report's verdict.",
    ["namespace", "verdict"],
)
REPORTS = Counter(
    "podmortem_reports_total",
    "Failure reports written, by where they went (status, annotation, event) and outcome (ok, error).",
    ["target", "outcome"],
)
REPORT_LATENCY = Histogram(
    "podmortem_report_latency_seconds",
    "Seconds from seeing a termination to the report written (Prometheus evidence aside).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
)
EVIDENCE_FAILURES = Counter(
    "podmortem_evidence_failures_total",
    "Evidence sources that failed during a report (agent, prometheus).",
    ["source"],
)
KERNEL_RECORDS = Counter(
    "podmortem_kernel_records_total",
    "OOM-like kills by whether the kernel's record made it into the report: attached (at once or"
    " later), not-found (not within the follow-up window).",
    ["outcome"],
)
MEMORY_PRESSURE = Counter(
    "podmortem_memory_pressure_warnings_total",
    "Early warnings raised because the memory peak is projected to cross the limit.",
    ["namespace"],
)
FOLLOWED_PODS = Gauge(
    "podmortem_followed_pods",
    "Pods whose logs this operator follows now.",
)
WATCHED_PODS = Gauge(
    "podmortem_watched_pods",
    "Pods the operator keeps state for now (each pod of a followed job, or annotated; running or not). "
    "A pod leaves when its deletion is seen, also one deleted while the pod watch was down (at the relist).",
)
CONNECTION_WAITS = Gauge(
    "podmortem_log_follow_connection_waits",
    "Log followers waiting now for a connection: every connection the open-files limit leaves to log "
    "streams is in use (podmortem.open_files.budget). Raise the container's hard limit.",
)
DESCRIPTOR_WAITS = Counter(
    "podmortem_log_follow_descriptor_waits_total",
    "Times a log follower found no free file descriptor (EMFILE or ENFILE) and waited to resume. "
    "process_open_fds and process_max_fds show the headroom.",
)
