"""Fake host trees for agent tests: a /proc and a cgroup mount laid out like real nodes.

File contents are recorded from real kernels (smaps_rollup from 6.x, memory.stat
from v1 and v2 cgroups), so parsing is exercised on what the kernel really writes.
"""

from __future__ import annotations

from pathlib import Path

POD_UID = "1788d98a-0700-426a-8701-2312e4cc2163"
CONTAINER_ID = "a07d3c191742700df28b349710c93b2014b255b22364decb09b53ca123fa8272"

SMAPS_ROLLUP = """\
55949ff16000-7ffcaea94000 ---p 00000000 00:00 0                          [rollup]
Rss:              {rss} kB
Pss:              {pss} kB
Pss_Dirty:           116 kB
Pss_Anon:            116 kB
Pss_File:            214 kB
Pss_Shmem:             0 kB
Shared_Clean:       1612 kB
Shared_Dirty:          0 kB
Private_Clean:        {pc} kB
Private_Dirty:       {pd} kB
Referenced:         1772 kB
Anonymous:           {anon} kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  {swap} kB
SwapPss:               0 kB
Locked:                0 kB
"""

V1_STAT = """\
cache 2162688
rss 71041024
rss_huge 0
shmem 0
mapped_file 0
dirty 0
writeback 0
pgpgin 20240
pgpgout 2361
pgfault 20436
pgmajfault 0
inactive_anon 71041024
active_anon 0
inactive_file 2162688
active_file 0
unevictable 0
hierarchical_memory_limit 104857600
total_cache 2162688
total_rss 71041024
total_rss_huge 0
total_shmem 0
total_mapped_file 0
total_inactive_anon 71041024
total_active_anon 0
total_inactive_file 2162688
total_active_file 0
total_unevictable 0
"""

V2_STAT = """\
anon 314535936
file 4096
kernel 8785920
kernel_stack 49152
pagetables 8785920
sec_pagetables 0
percpu 0
sock 0
vmalloc 0
shmem 0
file_mapped 135168
file_dirty 0
file_writeback 0
inactive_anon 312000000
active_anon 2535936
inactive_file 4096
active_file 0
unevictable 0
pgfault 17409645
pgmajfault 23265
"""


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def add_process(
    proc: Path,
    pid: int,
    *,
    comm: str = "python",
    rss_kb: int = 1772,
    pss_kb: int = 330,
    private_clean_kb: int = 44,
    private_dirty_kb: int = 116,
    anon_kb: int = 116,
    swap_kb: int = 0,
) -> None:
    write(proc / str(pid) / "comm", comm + "\n")
    write(
        proc / str(pid) / "smaps_rollup",
        SMAPS_ROLLUP.format(
            rss=rss_kb, pss=pss_kb, pc=private_clean_kb, pd=private_dirty_kb, anon=anon_kb, swap=swap_kb
        ),
    )


def add_kernel_thread(proc: Path, pid: int, comm: str = "kworker/0:1") -> None:
    write(proc / str(pid) / "comm", comm + "\n")
    write(proc / str(pid) / "smaps_rollup", "")


def make_v1_cgroup(
    root: Path,
    path: str,
    *,
    usage: int = 73203712,
    peak: int = 80000000,
    limit: int | str = 104857600,
    oom_kill: int = 0,
    pids: tuple[int, ...] = (),
) -> Path:
    """A v1 memory cgroup under ``root/memory`` (``root`` is the cgroup mount)."""
    d = root / "memory" / path.strip("/")
    write(d / "memory.usage_in_bytes", f"{usage}\n")
    write(d / "memory.max_usage_in_bytes", f"{peak}\n")
    write(d / "memory.limit_in_bytes", f"{limit}\n")
    write(d / "memory.stat", V1_STAT)
    write(d / "memory.oom_control", f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kill}\n")
    write(d / "cgroup.procs", "".join(f"{p}\n" for p in pids))
    return d


def make_v1_root(root: Path) -> None:
    write(root / "memory" / "memory.usage_in_bytes", "123\n")
    write(root / "memory" / "memory.stat", V1_STAT)
    write(root / "memory" / "cgroup.procs", "1\n")


def make_v2_root(root: Path) -> None:
    write(root / "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
    write(root / "memory.stat", V2_STAT)
    write(root / "cgroup.procs", "1\n")


def make_v2_cgroup(
    root: Path,
    path: str,
    *,
    current: int = 323321856,
    peak: int | None = 400000000,
    limit: int | str = 536870912,
    oom_kill: int = 0,
    pids: tuple[int, ...] = (),
) -> Path:
    d = root / path.strip("/")
    write(d / "memory.current", f"{current}\n")
    if peak is not None:
        write(d / "memory.peak", f"{peak}\n")
    write(d / "memory.max", f"{limit}\n")
    write(d / "memory.stat", V2_STAT)
    write(d / "memory.events", f"low 0\nhigh 0\nmax 12\noom 1\noom_kill {oom_kill}\noom_group_kill 0\n")
    write(d / "cgroup.procs", "".join(f"{p}\n" for p in pids))
    return d


#: Pod and container cgroup paths of the layouts kubelets make, by driver and cgroup version.
def systemd_pod(uid: str = POD_UID, qos: str = "burstable") -> str:
    return f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid.replace('-', '_')}.slice"


def systemd_container(uid: str = POD_UID, cid: str = CONTAINER_ID, qos: str = "burstable") -> str:
    return f"{systemd_pod(uid, qos)}/cri-containerd-{cid}.scope"


def cgroupfs_pod(uid: str = POD_UID, qos: str = "besteffort") -> str:
    return f"/kubepods/{qos}/pod{uid}"


def cgroupfs_container(uid: str = POD_UID, cid: str = CONTAINER_ID, qos: str = "besteffort") -> str:
    return f"{cgroupfs_pod(uid, qos)}/{cid}"
