"""Which limit filled: the counter that failed the charge, and the cgroup level it belongs to.

A memcg OOM names a cgroup, but what a person should change depends on two things the
record shows only indirectly. The counter: cgroup v1 prints ``memory``, ``memory+swap``
and ``kmem`` lines and any of them can be the full one (with memsw, raising the memory
limit alone changes nothing); v2 prints ``memory`` and ``swap``, and a full swap.max is why
memory could not be swapped out. The level: a kubelet cgroup can be a container's, a
pod's (the sum of its containers' limits), a QoS class's or the node's allocatable for all
pods; only the first two are limits the pod set for itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from podmortem.reports.oom_record import MemoryCounter, OomKillRecord
from podmortem.reports.units import KIB

#: cgroup v1 prints "no limit" as this many kB (PAGE_COUNTER_MAX pages); anything this large is no limit.
UNLIMITED_KB = 2**50
#: A counter within this of its limit is full: the kernel charges in batches of up to 64 pages.
FULL_SLACK_KB = 256

Level = Literal["container", "pod", "qos", "node", "system"]
#: Where a limit sits relative to the pod's own cgroup, when the node agent knows that cgroup.
KnownLevel = Literal["container", "pod", "shared"]

_CONTAINER = re.compile(r"(?:(?:cri-containerd|crio|docker|containerd|libpod)-)?[0-9a-f]{64}(?:\.scope)?")
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
_POD = re.compile(rf"(?:kubepods(?:-burstable|-besteffort)?-pod(?:{_UID})\.slice|pod(?:{_UID}))")
_QOS = ("burstable", "besteffort", "kubepods-burstable.slice", "kubepods-besteffort.slice")
_NODE = ("kubepods", "kubepods.slice")


@dataclass(frozen=True, slots=True)
class LimitHit:
    """The counter that was full when the kernel gave up, with swap use where the record shows it."""

    counter: str
    usage_kb: int
    limit_kb: int
    failcnt: int
    #: Bytes swapped out: v1 memory+swap minus memory, v2 the swap line, else the v1 stat's ``swap``.
    swap_bytes: int | None
    #: v2: swap.max was full too, so nothing more could be swapped out.
    swap_full: bool


def level(path: str | None) -> Level | None:
    """What the limited cgroup is, from its path: a container's, a pod's, a QoS class's, the node's or other.

    "system" is any cgroup outside the pods: a systemd slice, the runtime's, a user session.
    """
    if not path:
        return None
    segments = [s for s in path.split("/") if s]
    if not segments:
        return "system"
    last = segments[-1]
    if _CONTAINER.fullmatch(last):
        return "container"
    if _POD.fullmatch(last):
        return "pod"
    if last in _QOS:
        return "qos"
    if last in _NODE:
        return "node"
    return "system"


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def level_from_pod(limit_path: str | None, pod_path: str | None) -> KnownLevel | None:
    """Where the limit that filled sits, from the pod's own cgroup as the node agent found it.

    Knowledge, not a guess from the path's shape: the agent knows which cgroup is the pod's,
    whatever the layout (cgroupfs, systemd, a custom ``--cgroup-root``, a nested runtime). The
    kernel may print a path with a prefix the agent's view lacks (a node in a container), so the
    pod's path may sit anywhere inside the kernel's. "pod": the limit is the pod's cgroup;
    "container": below it; "shared": above it (a QoS class's, the node's, a parent slice);
    None: neither (a cgroup the pod is not in, or a path missing).
    """
    if not limit_path or not pod_path:
        return None
    limit, pod = _parts(limit_path), _parts(pod_path)
    if not pod:
        return None
    for start in range(len(limit) - len(pod) + 1):
        if limit[start:start + len(pod)] == pod:
            return "pod" if start + len(pod) == len(limit) else "container"
    for skip in range(len(limit)):
        tail = limit[skip:]
        if tail and len(tail) < len(pod) and pod[:len(tail)] == tail:
            return "shared"
    if not limit:  # the root: every pod is under it
        return "shared"
    return None


def best_effort(path: str | None) -> bool:
    return bool(path) and "besteffort" in (path or "").rsplit("/", 1)[-1]


def _full(counter: MemoryCounter | None) -> bool:
    return (
        counter is not None
        and counter.limit_kb < UNLIMITED_KB
        and counter.usage_kb >= counter.limit_kb - FULL_SLACK_KB
    )


def at_limit(hit: LimitHit) -> bool:
    """Whether the hit counter was full: mainline memcg OOMs happen only at a full one."""
    return hit.limit_kb < UNLIMITED_KB and hit.usage_kb >= hit.limit_kb - FULL_SLACK_KB


def limit_hit(record: OomKillRecord) -> LimitHit | None:
    """The full and failing counter among the record's usage/limit/failcnt lines; None without them."""
    counters = record.counters
    memory = counters.get("memory")
    memsw = counters.get("memory+swap")
    kmem = counters.get("kmem")
    swap = counters.get("swap")
    if memory is None and memsw is None:
        return None
    chosen: tuple[str, MemoryCounter]
    # v1 charges memory+swap before memory (try_charge): when memsw is full, the charge failed there,
    # unless its failcnt says it never failed while memory's did.
    memory_failed_alone = (
        memsw is not None and memsw.failcnt == 0 and memory is not None and memory.failcnt > 0
    )
    if memsw is not None and _full(memsw) and not memory_failed_alone:
        chosen = ("memory+swap", memsw)
    elif memory is not None:
        chosen = ("memory", memory)
        if _full(kmem) and not _full(memory) and kmem is not None:
            chosen = ("kmem", kmem)
    else:
        assert memsw is not None
        chosen = ("memory+swap", memsw)
    swap_bytes: int | None = None
    if memsw is not None and memory is not None:
        swap_bytes = max(0, memsw.usage_kb - memory.usage_kb) * KIB
    elif swap is not None:
        swap_bytes = swap.usage_kb * KIB
    name, counter = chosen
    return LimitHit(
        counter=name,
        usage_kb=counter.usage_kb,
        limit_kb=counter.limit_kb,
        failcnt=counter.failcnt,
        swap_bytes=swap_bytes,
        swap_full=_full(swap),
    )


def stat_swap_bytes(record: OomKillRecord) -> int | None:
    """v1 stat blocks print the cgroup's swap use ("swap:524356KB"); the first block's, in bytes."""
    for block in record.cgroup_stats:
        if block.version == 1 and "swap" in block.stat:
            return block.stat["swap"]
    return None
