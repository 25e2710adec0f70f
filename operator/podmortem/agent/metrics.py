"""The agent's Prometheus metrics: per-pod memory gauges and the agent's own health.

Gauges carry ``namespace``, ``pod`` and ``uid`` labels; a pod's series are removed
when the agent forgets the pod, so a node that runs thousands of short pods does
not grow an unbounded series set. The registry is passed in, never the global
one, so tests and several agents in one process do not collide.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge

POD_LABELS = ("namespace", "pod", "uid")


class AgentMetrics:
    """All metrics of one agent, registered in the given registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.usage = Gauge(
            "podmortem_agent_pod_memory_usage_bytes",
            "Memory charged to the pod's cgroup (v1 usage_in_bytes, v2 memory.current).",
            POD_LABELS,
            registry=registry,
        )
        self.limit = Gauge(
            "podmortem_agent_pod_memory_limit_bytes",
            "The pod cgroup's memory limit; absent when unlimited.",
            POD_LABELS,
            registry=registry,
        )
        self.peak = Gauge(
            "podmortem_agent_pod_memory_peak_bytes",
            "The pod cgroup's high-water mark (v1 max_usage_in_bytes, v2 memory.peak).",
            POD_LABELS,
            registry=registry,
        )
        self.pss = Gauge(
            "podmortem_agent_pod_pss_bytes",
            "Sum of the PSS of the pod's processes (shared pages split between sharers).",
            POD_LABELS,
            registry=registry,
        )
        self.private = Gauge(
            "podmortem_agent_pod_private_bytes",
            "Sum of private (unshared) memory of the pod's processes.",
            POD_LABELS,
            registry=registry,
        )
        self.processes = Gauge(
            "podmortem_agent_pod_processes", "Processes in the pod's cgroups.", POD_LABELS, registry=registry
        )
        self.oom_records = Counter(
            "podmortem_agent_pod_oom_kill_records",
            "Kernel OOM-kill records mapped to the pod.",
            POD_LABELS,
            registry=registry,
        )
        self.watched_pods = Gauge(
            "podmortem_agent_watched_pods", "Pods the agent samples now.", registry=registry
        )
        self.sample_gaps = Counter(
            "podmortem_agent_sample_gaps",
            "Pod sampling rounds without a reading, by reason.",
            ("reason",),
            registry=registry,
        )
        self.unreadable_processes = Counter(
            "podmortem_agent_unreadable_processes",
            "Processes whose smaps_rollup could not be read (needs CAP_SYS_PTRACE).",
            registry=registry,
        )
        self.kmsg_readable = Gauge(
            "podmortem_agent_kmsg_readable",
            "1 while the kernel log (/dev/kmsg or syslog(2)) is being read, 0 when it cannot be (/healthz).",
            registry=registry,
        )
        self.kmsg_lost = Counter(
            "podmortem_agent_kmsg_lost_records",
            "Kernel log records overwritten before the agent read them.",
            registry=registry,
        )
        self.kmsg_records = Counter(
            "podmortem_agent_kmsg_records", "Kernel log records (syslog(2): lines) read.", registry=registry
        )
        self.kernel_log_source = Gauge(
            "podmortem_agent_kernel_log_source",
            "1 for the kernel log source in use (kmsg: /dev/kmsg, syslog: syslog(2)), 0 for the other.",
            ("source",),
            registry=registry,
        )
        self.kernel_log_gaps = Counter(
            "podmortem_agent_kernel_log_gaps",
            "Times the syslog(2) ring buffer wrapped past the agent's cursor (lines may be lost).",
            registry=registry,
        )
        self.oom_unmatched = Counter(
            "podmortem_agent_oom_records_unmatched",
            "OOM-kill records whose cgroup belonged to no watched pod for unplaced_record_keep_s.",
            registry=registry,
        )

    def pod_gauges(self) -> tuple[Gauge, ...]:
        return (self.usage, self.limit, self.peak, self.pss, self.private, self.processes)

    def forget_pod(self, labels: tuple[str, str, str]) -> None:
        for metric in (*self.pod_gauges(), self.oom_records):
            with contextlib.suppress(KeyError):
                metric.remove(*labels)
