"""Prometheus metrics of log following: is every stream alive, and was anything lost?

Counters are bumped once per batch of lines, never per line, so metrics cost
nothing measurable on the hot path. One :class:`LogMetrics` exists per
registry (the process-wide default unless one is passed), because
prometheus-client refuses to register a metric name twice.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: Why a stream ended and was reopened (the ``reason`` label of ``reconnects_total``).
RECONNECT_REASONS = ("eof", "read-timeout", "reset", "http-error", "api-unavailable", "limit-bytes",
                     "restart", "not-ready")

_LAG_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 1800.0, 7200.0)


class LogMetrics:
    """The follower's metrics, bound to one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.streams_active = Gauge(
            "podmortem_logs_streams_active", "Container log streams being followed now.",
            registry=registry,
        )
        self.reconnects = Counter(
            "podmortem_logs_reconnects_total", "Log streams that ended and were reopened, by reason.",
            ["reason"], registry=registry,
        )
        self.lines = Counter(
            "podmortem_logs_lines_total", "Log lines delivered (each exactly once).", registry=registry,
        )
        self.bytes = Counter(
            "podmortem_logs_bytes_total", "Bytes of delivered log lines, timestamps included.",
            registry=registry,
        )
        self.gaps = Counter(
            "podmortem_logs_gaps_total", "Places where log lines may have been lost, by reason.",
            ["reason"], registry=registry,
        )
        self.duplicates = Counter(
            "podmortem_logs_duplicate_lines_dropped_total",
            "Replayed lines dropped after a reconnect (sinceTime only has whole seconds).",
            registry=registry,
        )
        self.lag = Histogram(
            "podmortem_logs_stream_lag_seconds",
            "Delay from a line's runtime timestamp to its delivery, observed per batch.",
            buckets=_LAG_BUCKETS, registry=registry,
        )
        for reason in RECONNECT_REASONS:
            self.reconnects.labels(reason)


_BY_REGISTRY: dict[int, tuple[CollectorRegistry, LogMetrics]] = {}
_LOCK = threading.Lock()


def for_registry(registry: CollectorRegistry | None = None) -> LogMetrics:
    """The metrics registered in ``registry`` (default: the global one), created once."""
    registry = REGISTRY if registry is None else registry
    with _LOCK:
        entry = _BY_REGISTRY.get(id(registry))
        if entry is None or entry[0] is not registry:
            entry = (registry, LogMetrics(registry))
            _BY_REGISTRY[id(registry)] = entry
        return entry[1]


class StoreCounters(Protocol):
    """What :class:`StoreCollector` reads: a ``LogStore``'s own running totals."""

    lines_total: int
    bytes_total: int
    gaps_total: int
    corrupt_bytes_total: int
    full_since: float | None


class StoreCollector(Collector):
    """Exports a log store's counters when scraped, so its write path makes no metric calls.

    Register with ``registry.register(StoreCollector(store))`` (``LogStore(registry=...)`` does it
    while the store is open). Totals count from the store's opening, like a process's counters.
    """

    def __init__(self, store: StoreCounters) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        store = self._store
        yield CounterMetricFamily("podmortem_logs_store_lines", "Log lines written to the durable store.",
                                  value=store.lines_total)
        yield CounterMetricFamily("podmortem_logs_store_bytes",
                                  "Bytes written to the durable store's segments (lines and batch headers).",
                                  value=store.bytes_total)
        yield CounterMetricFamily("podmortem_logs_store_gaps",
                                  "Gap markers (possible losses) written to the durable store.",
                                  value=store.gaps_total)
        yield CounterMetricFamily("podmortem_logs_store_corrupt_bytes",
                                  "Bytes of stored segments found damaged (set aside and marked, never "
                                  "served as lines); each damaged range counted once per process.",
                                  value=store.corrupt_bytes_total)
        yield GaugeMetricFamily("podmortem_logs_store_full",
                                "1 while writes to the log store fail for a full volume (followers are "
                                "paused and retry from their cursors), else 0.",
                                value=0 if store.full_since is None else 1)
