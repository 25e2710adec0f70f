"""The agent's state and its sampling loop: pods, rings, kernel records, health.

One `NodeAgent` per process. The sampling loop and the kernel log follower both
write into it; the HTTP server only reads. Everything runs on one event loop
(file reads go to a worker thread in one batch per round), so no locks are needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from podmortem.agent import matching, record_store, sampler
from podmortem.agent.assemble import Entry, build_evidence
from podmortem.agent.kernel_log import KernelLogState
from podmortem.agent.metrics import AgentMetrics
from podmortem.agent.oom_events import OomEvents
from podmortem.agent.pods import PodSource, WatchedPod
from podmortem.agent.ring import PodRings
from podmortem.agent.settings import AgentSettings
from podmortem.cgroups import cgroupfs
from podmortem.reports.evidence import KernelLogStatus, PodEvidence
from podmortem.reports.memory import MemorySample
from podmortem.reports.oom_record import OomKillRecord

logger = logging.getLogger(__name__)

RecordKey = tuple[str, int | None, int | None, float | None]


def _record_key(uid: str, record: OomKillRecord) -> RecordKey:
    """One kill of one pod, however often its record is read (a restart, two log sources)."""
    return (uid, record.kmsg_seq, record.victim_pid, record.monotonic_s)


#: Unplaced kernel records held at most (the oldest go first); a busy node's other OOM kills age out.
UNPLACED_MAX = 256


class NodeAgent:
    """What one node's agent knows: the watched pods, their rings, and the kernel log reader's status."""

    def __init__(
        self,
        *,
        settings: AgentSettings,
        pod_source: PodSource,
        metrics: AgentMetrics,
        hierarchy: cgroupfs.MemoryHierarchy | None,
        hierarchy_error: str | None = None,
        records_file: Path | None = None,
        oom_events: OomEvents | None = None,
    ) -> None:
        """``records_file``: where placed kernel records persist (see `record_store`); None: memory only.
        ``oom_events``: every pod's OOM kill as an Event and a count (``--oom-events``); None: off."""
        self.settings = settings
        self.pod_source = pod_source
        self.metrics = metrics
        self.hierarchy = hierarchy
        self.hierarchy_error = hierarchy_error
        self.rings: PodRings[Entry, OomKillRecord] = PodRings(
            ring_size=settings.ring_size, records_per_pod=settings.kernel_records_per_pod
        )
        self.pods: dict[str, WatchedPod] = {}
        #: Everything ever watched and not yet forgotten, so evidence outlives the pod.
        self.known: dict[str, WatchedPod] = {}
        self.kernel_log_status = KernelLogStatus(readable=False, error="not started yet")
        #: "kmsg" or "syslog": where kernel records come from (None until chosen, or when off).
        self.kernel_log_source: str | None = None
        #: The last span of kernel log that may have been lost (syslog(2) wraps), in words.
        self.kernel_log_gap: str | None = None
        self.rounds = 0
        self.last_round_at: datetime | None = None
        self.last_round_error: str | None = None
        #: pid → pod UID from the last samples, to place kernel records that name no cgroup.
        self._pid_owners: dict[int, str] = {}
        self._record_keys: set[RecordKey] = set()
        self.records_file = records_file
        #: Records that named no known pod yet, with when they came (monotonic), matched again each round.
        self._unplaced: list[tuple[float, OomKillRecord]] = []
        self.oom_events = oom_events

    # -- sampling ---------------------------------------------------------------------------------

    async def sample_once(self) -> None:
        """One round: refresh the pod set, sample every pod, update rings and gauges."""
        pods = await self.pod_source.current()
        now_mono = time.monotonic()
        self.pods = pods
        self.known.update(pods)
        self.rings.mark_present(pods, now=now_mono)
        forgot_records = False
        for uid in self.rings.forget_gone(now=now_mono, after_s=self.settings.forget_after_s):
            gone = self.known.pop(uid, None)
            self.metrics.forget_pod(self._labels(gone or WatchedPod(uid=uid)))
            forgot_records = forgot_records or any(key[0] == uid for key in self._record_keys)
            self._record_keys = {key for key in self._record_keys if key[0] != uid}
        if forgot_records:
            self._save_records()
        if self._unplaced:
            self._place_again(now_mono)
        if self.oom_events is not None:
            self.oom_events.retry()  # a pod the listing did not know at its kill may be known now
        for uid in [u for u in self.known if u not in pods and self.rings.get(u) is None]:
            self.known.pop(uid)
        self.metrics.watched_pods.set(len(pods))
        error = self.pod_source.last_error
        if self.hierarchy is None:
            self.last_round_error = self.hierarchy_error
            return
        now = datetime.now(UTC)
        results = await asyncio.to_thread(self._sample_all, list(pods.values()), now)
        owners: dict[int, str] = {}
        for pod, result in results:
            entry: Entry
            if result.sample is not None:
                entry = result.sample
                self._observe(pod, result.sample)
                owners.update(dict.fromkeys((p.pid for p in result.sample.processes), pod.uid))
            else:
                assert result.gap is not None
                entry = result.gap
                self.metrics.sample_gaps.labels(result.gap.reason).inc()
            if result.unreadable_processes:
                self.metrics.unreadable_processes.inc(result.unreadable_processes)
            self.rings.add_sample(pod.uid, entry)
        self._pid_owners = owners
        self.rounds += 1
        self.last_round_at = now
        self.last_round_error = error

    def _sample_all(
        self, pods: list[WatchedPod], now: datetime
    ) -> list[tuple[WatchedPod, sampler.SampleResult]]:
        assert self.hierarchy is not None
        return [
            (
                pod,
                sampler.sample_pod(
                    hierarchy=self.hierarchy, proc_root=self.settings.proc_root, pod=pod, now=now
                ),
            )
            for pod in pods
        ]

    def _labels(self, pod: WatchedPod) -> tuple[str, str, str]:
        return (pod.namespace, pod.name, pod.uid)

    def _observe(self, pod: WatchedPod, sample: MemorySample) -> None:
        labels = self._labels(pod)
        m = self.metrics
        for gauge, value in (
            (m.usage, sample.usage_bytes),
            (m.limit, sample.limit_bytes),
            (m.peak, sample.peak_bytes),
        ):
            if value is None:
                with contextlib.suppress(KeyError):
                    gauge.remove(*labels)
            else:
                gauge.labels(*labels).set(value)
        m.pss.labels(*labels).set(sum(p.pss_bytes or 0 for p in sample.processes))
        m.private.labels(*labels).set(sum(p.private_bytes or 0 for p in sample.processes))
        m.processes.labels(*labels).set(len(sample.processes))

    async def run_sampling(self) -> None:
        """Sample every ``poll_interval_s`` until cancelled; one failed round never ends the loop."""
        interval = self.settings.poll_interval_s
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.sample_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_round_error = f"sampling round failed: {exc!r}"
                logger.exception("sampling round failed")
            await asyncio.sleep(max(0.0, interval - (loop.time() - started)))

    # -- kernel records ---------------------------------------------------------------------------

    def on_kernel_log(self, state: KernelLogState) -> None:
        """The kernel log's state, as `KernelLog` reports it, for ``/status`` and the evidence."""
        self.kernel_log_status = state.status
        self.kernel_log_source = state.source
        self.kernel_log_gap = state.gap

    def on_records(self, records: list[OomKillRecord]) -> list[tuple[str, OomKillRecord]]:
        """Map fresh OOM records to watched pods and keep them; return what was kept, for logging.

        A record that names no pod known yet is held and matched again after the next rounds
        (for ``unplaced_record_keep_s``): the kernel log may be read before the first round.
        """
        if self.oom_events is not None:
            self.oom_events.on_records(records)
        kept, unplaced = self._place(records)
        now = time.monotonic()
        self._unplaced.extend((now, record) for record in unplaced)
        overflow = len(self._unplaced) - UNPLACED_MAX
        if overflow > 0:
            del self._unplaced[:overflow]
            self.metrics.oom_unmatched.inc(overflow)
        return kept

    def _place_again(self, now: float) -> None:
        held, self._unplaced = self._unplaced, []
        _, unplaced = self._place([record for _, record in held])
        came = {id(record): at for at, record in held}
        for record in unplaced:
            at = came[id(record)]
            if now - at <= self.settings.unplaced_record_keep_s:
                self._unplaced.append((at, record))
            else:
                self.metrics.oom_unmatched.inc()

    def _place(
        self, records: list[OomKillRecord]
    ) -> tuple[list[tuple[str, OomKillRecord]], list[OomKillRecord]]:
        pod_paths = {uid: pod.cgroup_path for uid, pod in self.known.items() if pod.cgroup_path}
        kept: list[tuple[str, OomKillRecord]] = []
        unplaced: list[OomKillRecord] = []
        for record in records:
            uid = matching.match_record(
                record, pod_paths=pod_paths, pid_owners=self._pid_owners, watched_uids=set(self.known)
            )
            if uid is None:
                unplaced.append(record)
                continue
            key = _record_key(uid, record)
            if key in self._record_keys:
                continue
            self._record_keys.add(key)
            self.rings.add_record(uid, record)
            self.metrics.oom_records.labels(*self._labels(self.known[uid])).inc()
            kept.append((uid, record))
            logger.info(
                "OOM kill of pid %s (%s) mapped to pod %s", record.victim_pid, record.victim_comm, uid
            )
        if kept:
            self._save_records()  # before the kernel log position moves past them
        return kept, unplaced

    def _save_records(self) -> None:
        if self.records_file is None:
            return
        pods = []
        for uid in self.rings.uids():
            history = self.rings.get(uid)
            if history is None or not history.records:
                continue
            pod = self.known.get(uid) or WatchedPod(uid=uid)
            pods.append(
                record_store.PodRecords(
                    uid=uid, namespace=pod.namespace, name=pod.name, records=tuple(history.records)
                )
            )
        try:
            record_store.save(self.records_file, pods)
        except OSError as exc:
            logger.warning("cannot save kernel records to %s: %s", self.records_file, exc)

    def restore_records(self) -> int:
        """Take back the records a previous run placed (see `record_store`); returns how many."""
        if self.records_file is None:
            return 0
        restored = 0
        for entry in record_store.load(self.records_file):
            pod = WatchedPod(uid=entry.uid, namespace=entry.namespace, name=entry.name)
            self.known.setdefault(entry.uid, pod)
            for record in entry.records:
                key = _record_key(entry.uid, record)
                if key not in self._record_keys:
                    self._record_keys.add(key)
                    self.rings.add_record(entry.uid, record)
                    restored += 1
        if restored:
            logger.info("restored %d kernel record(s) from %s", restored, self.records_file)
        return restored

    # -- reading ----------------------------------------------------------------------------------

    def evidence(self, uid: str, *, since: datetime | None = None) -> PodEvidence | None:
        history = self.rings.get(uid)
        pod = self.known.get(uid)
        if history is None and pod is None:
            return None
        return build_evidence(
            uid=uid,
            history=history,
            pod=pod,
            node=self.settings.node_name,
            cgroup_version=self.hierarchy.version if self.hierarchy else None,
            kmsg=self.kernel_log_status,
            now=datetime.now(UTC),
            since=since,
        )

    def ready(self) -> tuple[bool, str]:
        """Ready when the agent does its job: it can sample, and it knows this node's pods."""
        if self.hierarchy is None:
            return False, f"cannot sample: {self.hierarchy_error}"
        ok, why = self.pod_source.ready()
        if not ok:
            return False, why
        return True, "ready"

    def health(self) -> dict[str, Any]:
        """Sampling is what the agent must do; an unreadable kernel log degrades it but is not fatal."""
        ok = self.hierarchy is not None
        return {
            "ok": ok,
            "node": self.settings.node_name,
            "agent_pod": f"{self.settings.pod_namespace}/{self.settings.pod_name}"
            if self.settings.pod_name
            else None,
            "cgroup": {
                "root": str(self.hierarchy.root) if self.hierarchy else None,
                "version": self.hierarchy.version if self.hierarchy else None,
                "error": self.hierarchy_error,
            },
            "kmsg": {
                **self.kernel_log_status.model_dump(),
                "source": self.kernel_log_source,
                "last_gap": self.kernel_log_gap,
            },
            "sampling": {
                "rounds": self.rounds,
                "last_round_at": self.last_round_at.isoformat() if self.last_round_at else None,
                "error": self.last_round_error,
                "watched_pods": len(self.pods),
            },
        }
