"""Which watched pod a kernel OOM-kill record belongs to, if any.

Many things get OOM-killed on a node; the agent reports only records whose
cgroup is one of its pods' (or below one: the container cgroups). Paths are
compared component by component, so ``/pod-a`` never matches ``/pod-ab``. The
kernel prints paths from the root of the memory hierarchy, which on a nested
node (kind) has a prefix the agent's view of the tree lacks; the pod's path is
therefore also accepted as a run of components inside the record's path. For
records without any cgroup path (old or truncated ones), the killed pid is
looked up among the processes the last samples saw.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from podmortem.cgroups import paths
from podmortem.reports.oom_record import OomKillRecord


def _parts(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.split("/") if p)


def path_belongs(record_path: str, pod_path: str) -> bool:
    """True if ``record_path`` is the pod's cgroup or below it (allowing an extra leading prefix)."""
    rec, pod = _parts(record_path), _parts(pod_path)
    if not pod or len(rec) < len(pod):
        return False
    return any(rec[start : start + len(pod)] == pod for start in range(len(rec) - len(pod) + 1))


def record_paths(record: OomKillRecord) -> list[str]:
    """The cgroup paths a record names, most specific first (the victim's own cgroup before the limit's)."""
    paths = [record.task_memcg, record.oom_memcg, record.oom_group_memcg]
    paths.extend(block.path for block in record.cgroup_stats)
    seen: list[str] = []
    for path in paths:
        if path and path != "/" and path not in seen:
            seen.append(path)
    return seen


def match_record(
    record: OomKillRecord,
    *,
    pod_paths: Mapping[str, str],
    pid_owners: Mapping[int, str] | None = None,
    watched_uids: Collection[str] = (),
) -> str | None:
    """The UID of the watched pod this record is about, or None.

    ``pod_paths`` maps UID → cgroup path. ``watched_uids`` are pods whose cgroup may not have been
    found yet (a pod killed within its first sampling round): a kubelet-made path component that
    names one of them matches too. ``pid_owners`` maps pids seen in recent samples → UID, used only
    when the record names no cgroup path at all.
    """
    named = record_paths(record)
    for path in named:
        # The longest pod path wins, in case one watched cgroup is nested in another.
        best: tuple[int, str] | None = None
        for uid, pod_path in pod_paths.items():
            if path_belongs(path, pod_path):
                depth = len(_parts(pod_path))
                if best is None or depth > best[0]:
                    best = (depth, uid)
        if best is not None:
            return best[1]
    if watched_uids:
        for path in named:
            identity = paths.identify(path)
            if identity is not None and identity.pod_uid is not None and identity.pod_uid in watched_uids:
                return str(identity.pod_uid)
    if not named and pid_owners:
        pid = record.victim_pid
        if pid is not None:
            return pid_owners.get(pid)
    return None
