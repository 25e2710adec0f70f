"""Bounded per-pod history: the last N memory samples and kernel records of each pod.

A DaemonSet lives for weeks on a node that runs thousands of pods; every buffer
must be bounded by count, and pods that left the node must eventually be
forgotten. Evidence is still served for a while after a pod goes, because the
operator asks for it right after the pod has died.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class PodHistory(Generic[T, R]):
    """What the agent remembers about one pod. ``gone_at`` is set once the pod left the node."""

    samples: collections.deque[T]
    records: collections.deque[R]
    gone_at: float | None = None
    #: Samples dropped because the ring was full (so a reader knows the history is truncated).
    samples_dropped: int = 0
    #: Kernel records dropped because the record ring was full.
    records_dropped: int = 0


@dataclass
class PodRings(Generic[T, R]):
    """Rings of samples (type ``T``) and kernel records (type ``R``), keyed by pod UID."""

    ring_size: int
    records_per_pod: int
    _pods: dict[str, PodHistory[T, R]] = field(default_factory=dict)

    def _history(self, uid: str) -> PodHistory[T, R]:
        history = self._pods.get(uid)
        if history is None:
            history = PodHistory(
                samples=collections.deque(maxlen=self.ring_size),
                records=collections.deque(maxlen=self.records_per_pod),
            )
            self._pods[uid] = history
        return history

    def add_sample(self, uid: str, sample: T) -> None:
        history = self._history(uid)
        if len(history.samples) == history.samples.maxlen:
            history.samples_dropped += 1
        history.samples.append(sample)

    def add_record(self, uid: str, record: R) -> None:
        history = self._history(uid)
        if len(history.records) == history.records.maxlen:
            history.records_dropped += 1
        history.records.append(record)

    def get(self, uid: str) -> PodHistory[T, R] | None:
        return self._pods.get(uid)

    def uids(self) -> list[str]:
        return list(self._pods)

    def mark_present(self, uids: Iterable[str], *, now: float) -> None:
        """Note which pods are on the node now: others start their grace period, returning ones end it."""
        present = set(uids)
        for uid, history in self._pods.items():
            if uid in present:
                history.gone_at = None
            elif history.gone_at is None:
                history.gone_at = now

    def forget_gone(self, *, now: float, after_s: float) -> list[str]:
        """Drop pods that left the node more than ``after_s`` seconds ago; return their UIDs."""
        stale = [uid for uid, h in self._pods.items() if h.gone_at is not None and now - h.gone_at > after_s]
        for uid in stale:
            del self._pods[uid]
        return stale
