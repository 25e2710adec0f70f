"""Fake pods for sidecar tests: a shared /proc and each container's own root with its cgroup mount.

Laid out as a sidecar sees a pod with ``shareProcessNamespace: true``: pid 1 is the pause
process, the sidecar and the trainer's processes each have ``cgroup``, ``comm``, ``stat``,
``smaps_rollup`` and ``mountinfo``, and ``/proc/<pid>/root`` leads to the container's root, where
its cgroup is mounted the way runtimes mount it (`Layout`). File contents come from
tests/agent/trees.py, recorded from real kernels.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.agent import trees as agent_trees

CONTAINER_ID = agent_trees.CONTAINER_ID
SIDECAR_ID = "5c1dcaa3" * 8
POD_UID = agent_trees.POD_UID
SIDECAR_PID = 7
TRAINER_PID = 12


@dataclass(frozen=True)
class Layout:
    """How one runtime shows a container's memory cgroup to a process of another container."""

    name: str
    version: int
    #: The trainer's cgroup as its /proc/<pid>/cgroup reads to the sidecar, and the sidecar's own.
    trainer_cgroup: str
    sidecar_cgroup: str
    #: The mount's root field in the trainer's mountinfo (None: no mountinfo at all), its mount point,
    #: and where below the mount the cgroup's files are.
    mount_root: str | None
    mount_point: str
    below: str


def _pod_path(version: int, cid: str) -> str:
    if version == 1:
        return f"{agent_trees.cgroupfs_pod()}/{cid}"
    return agent_trees.systemd_container(cid=cid)


LAYOUTS = [
    # cgroup v2, a cgroup namespace per container (containerd, CRI-O): the sidecar, in its own
    # namespace, sees the trainer's cgroup and its mount's root as "/.." paths.
    Layout(
        "v2-namespaced",
        2,
        f"/../cri-containerd-{CONTAINER_ID}.scope",
        "/",
        f"/../cri-containerd-{CONTAINER_ID}.scope",
        "/sys/fs/cgroup",
        "",
    ),
    # cgroup v2, one cgroup namespace for the pod (or the sidecar reading from the trainer's): "/" both.
    Layout("v2-shared-namespace", 2, "/", "/../sidecar", "/", "/sys/fs/cgroup", ""),
    # cgroup v2 with the host's cgroup namespace and the whole tree mounted (cgroupns=host).
    Layout(
        "v2-host-namespace",
        2,
        _pod_path(2, CONTAINER_ID),
        _pod_path(2, SIDECAR_ID),
        "/",
        "/sys/fs/cgroup",
        _pod_path(2, CONTAINER_ID).strip("/"),
    ),
    # cgroup v1 without cgroup namespaces (runc, docker): full paths, and the container's part of the
    # hierarchy bind-mounted at /sys/fs/cgroup/memory.
    Layout(
        "v1-bind",
        1,
        _pod_path(1, CONTAINER_ID),
        _pod_path(1, SIDECAR_ID),
        _pod_path(1, CONTAINER_ID),
        "/sys/fs/cgroup/memory",
        "",
    ),
    # cgroup v1 on a host (or a privileged container): the whole hierarchy at the mount.
    Layout(
        "v1-host", 1, "/podmortem-test/trainer", "/", "/", "/sys/fs/cgroup/memory", "podmortem-test/trainer"
    ),
    # No mountinfo readable: the usual mount point, the cgroup at its top for a "/.." path.
    Layout("v2-no-mountinfo", 2, f"/../cri-containerd-{CONTAINER_ID}.scope", "/", None, "/sys/fs/cgroup", ""),
    Layout(
        "v1-no-mountinfo-full-path",
        1,
        "/podmortem-test/trainer",
        "/",
        None,
        "/sys/fs/cgroup/memory",
        "podmortem-test/trainer",
    ),
]


def _cgroup_file(version: int, path: str) -> str:
    if version == 1:
        return f"9:name=systemd:/\n5:devices:{path}\n4:memory:{path}\n3:cpuset:/\n0::/\n"
    return f"0::{path}\n"


def _mountinfo(layout: Layout) -> str:
    lines = [
        "1310 1201 0:64 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w"
    ]
    if layout.mount_root is not None:
        if layout.version == 1:
            lines.append(
                "1316 1315 0:29 / /sys/fs/cgroup/cpu ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu"
            )
            lines.append(
                f"1317 1315 0:32 {layout.mount_root} {layout.mount_point} ro,nosuid,nodev,noexec,relatime "
                "master:15 - cgroup cgroup rw,memory"
            )
        else:
            lines.append(
                f"1315 1310 0:27 {layout.mount_root} {layout.mount_point} ro,nosuid,nodev,noexec,relatime "
                "- cgroup2 cgroup rw,nsdelegate,memory_recursiveprot"
            )
    return "\n".join(lines) + "\n"


class FakePod:
    """A pod's /proc under ``tmp/proc`` and each container's root under ``tmp/roots``."""

    def __init__(self, tmp: Path, layout: Layout, *, oom_kill: int = 0, limit: int = 536870912) -> None:
        self.tmp = tmp
        self.layout = layout
        self.proc = tmp / "proc"
        self.trainer_root = tmp / "roots" / "trainer"
        self.sidecar_root = tmp / "roots" / "sidecar"
        mount = self.trainer_root / layout.mount_point.lstrip("/")
        if layout.version == 1:
            self.cgroup_dir = agent_trees.make_v1_cgroup(
                mount.parent,
                layout.below or "/",
                oom_kill=oom_kill,
                limit=limit,
                usage=73203712,
                peak=80000000,
            )
            agent_trees.write(self.cgroup_dir / "memory.failcnt", "17\n")
        else:
            self.cgroup_dir = agent_trees.make_v2_cgroup(
                mount, layout.below or "/", oom_kill=oom_kill, limit=limit, current=323321856, peak=400000000
            )
        self.add(
            1,
            comm="pause",
            cgroup="/../pause" if layout.version == 2 else "/kubepods/pause",
            root=None,
            ppid=0,
        )
        self.add(SIDECAR_PID, comm="podmortem", cgroup=layout.sidecar_cgroup, root=self.sidecar_root)

    def add(
        self,
        pid: int,
        *,
        comm: str = "python",
        cgroup: str | None = None,
        root: Path | None = None,
        ppid: int = 1,
        pss_kb: int = 1000,
        state: str = "S",
    ) -> None:
        base = self.proc / str(pid)
        agent_trees.add_process(self.proc, pid, comm=comm, pss_kb=pss_kb, rss_kb=pss_kb * 2)
        agent_trees.write(
            base / "cgroup", _cgroup_file(self.layout.version, cgroup or self.layout.trainer_cgroup)
        )
        agent_trees.write(
            base / "stat", f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 4194560 100 0 0 0\n"
        )
        if self.layout.mount_root is not None:
            agent_trees.write(base / "mountinfo", _mountinfo(self.layout))
        target = self.trainer_root if root is None and pid != 1 else root
        if target is not None:
            target.mkdir(parents=True, exist_ok=True)
            (base / "root").symlink_to(target)

    def trainer(self, pid: int = TRAINER_PID, **kwargs: object) -> None:
        self.add(pid, comm="python", ppid=1, **kwargs)  # type: ignore[arg-type]

    def worker(self, pid: int, *, parent: int = TRAINER_PID, **kwargs: object) -> None:
        self.add(pid, comm="pt_data_worker", ppid=parent, **kwargs)  # type: ignore[arg-type]

    def exit(self, pid: int) -> None:
        shutil.rmtree(self.proc / str(pid))

    def zombie(self, pid: int) -> None:
        stat = self.proc / str(pid) / "stat"
        fields = stat.read_text().split()
        fields[2] = "Z"
        stat.write_text(" ".join(fields) + "\n")
        (self.proc / str(pid) / "smaps_rollup").write_text("")

    def set(self, name: str, text: str) -> None:
        (self.cgroup_dir / name).write_text(text)

    def oom_kill(self, count: int) -> None:
        if self.layout.version == 1:
            self.set("memory.oom_control", f"oom_kill_disable 0\nunder_oom 0\noom_kill {count}\n")
        else:
            self.set("memory.events", f"low 0\nhigh 0\nmax 12\noom 1\noom_kill {count}\noom_group_kill 0\n")
