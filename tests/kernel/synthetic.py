"""Realistic synthetic OOM records in every text format, for the tests and the parser's benchmarks.

Real posted records cover some kernels and formats; these fill in the rest with
known ground truth: v1 (old one-line KB stats, new key-per-line bytes) and v2
stats, old and new task tables, and the prefixes of dmesg, dmesg -T, /dev/kmsg,
syslog, journalctl and quoted mail. Every record is generated from a
`SyntheticKill`, so a test can compare the parser's output with what went in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

Format = Literal["kmsg", "dmesg", "dmesg-T", "syslog", "journal-quoted", "plain"]
FORMATS: tuple[Format, ...] = ("kmsg", "dmesg", "dmesg-T", "syslog", "journal-quoted", "plain")
PAGE = 4096


@dataclass
class SyntheticTask:
    pid: int
    name: str
    anon_pages: int
    file_pages: int = 100
    shmem_pages: int = 0
    total_vm_pages: int = 0
    oom_score_adj: int = 0


@dataclass
class SyntheticKill:
    """Ground truth for one record."""

    victim_pid: int
    tasks: list[SyntheticTask]
    cgroup_version: Literal[1, 2] = 2
    #: "old": pre-4.19 text (no oom-kill line, one-line KB stats, old task table).
    era: Literal["old", "new"] = "new"
    limit_kb: int = 4 * 1024 * 1024
    anon_bytes: int = 0
    file_bytes: int = 0
    shmem_bytes: int = 0
    kernel_bytes: int = 8 * 1024 * 1024
    pod_uid: str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    container_id: str = "ab" * 32
    constraint_printed: str = "CONSTRAINT_MEMCG"
    trigger_comm: str = "python"
    host: str = "node-a"
    oom_group: bool = False
    extra_stat: dict[str, int] = field(default_factory=dict)

    @property
    def victim(self) -> SyntheticTask:
        return next(t for t in self.tasks if t.pid == self.victim_pid)

    @property
    def oom_memcg(self) -> str:
        uid = self.pod_uid.replace("-", "_")
        return f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice"

    @property
    def task_memcg(self) -> str:
        return f"{self.oom_memcg}/cri-containerd-{self.container_id}.scope"


def _messages(kill: SyntheticKill) -> list[str]:
    v = kill.victim
    msgs = [
        f"{kill.trigger_comm} invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, "
        f"oom_score_adj={v.oom_score_adj}",
        f"CPU: 3 PID: {v.pid} Comm: {kill.trigger_comm} Not tainted 6.1.0-18-amd64 #1 Debian 6.1.76-1",
        "Call Trace:",
        " <TASK>",
        " dump_stack_lvl+0x44/0x5c",
        " out_of_memory+0x235/0x520",
        " </TASK>",
    ]
    usage_kb = kill.limit_kb
    if kill.era == "old":
        msgs.append(f"Task in {kill.task_memcg} killed as a result of limit of {kill.oom_memcg}")
    msgs.append(f"memory: usage {usage_kb}kB, limit {kill.limit_kb}kB, failcnt 1234")
    if kill.cgroup_version == 1:
        msgs.append(f"memory+swap: usage {usage_kb}kB, limit 9007199254740988kB, failcnt 0")
        msgs.append(f"kmem: usage {kill.kernel_bytes // 1024}kB, limit 9007199254740988kB, failcnt 0")
    else:
        msgs.append("swap: usage 0kB, limit 0kB, failcnt 0")
    if kill.cgroup_version == 1 and kill.era == "old":
        cache = kill.file_bytes + kill.shmem_bytes
        msgs.append(f"Memory cgroup stats for {kill.oom_memcg}: cache:0KB rss:0KB shmem:0KB mapped_file:0KB")
        msgs.append(
            f"Memory cgroup stats for {kill.task_memcg}: cache:{cache // 1024}KB "
            f"rss:{kill.anon_bytes // 1024}KB rss_huge:0KB shmem:{kill.shmem_bytes // 1024}KB "
            f"mapped_file:0KB inactive_anon:{kill.anon_bytes // 1024}KB active_anon:0KB"
        )
    elif kill.cgroup_version == 1:
        msgs.append(f"Memory cgroup stats for {kill.oom_memcg}:")
        cache = kill.file_bytes + kill.shmem_bytes
        for key, value in (
            ("cache", cache),
            ("rss", kill.anon_bytes),
            ("shmem", kill.shmem_bytes),
            ("mapped_file", 0),
            ("pgfault", 12345),
            ("total_cache", cache),
            ("total_rss", kill.anon_bytes),
            ("total_shmem", kill.shmem_bytes),
        ):
            msgs.append(f"{key} {value}")
    else:
        msgs.append(f"Memory cgroup stats for {kill.oom_memcg}:")
        stat = {
            "anon": kill.anon_bytes,
            "file": kill.file_bytes + kill.shmem_bytes,
            "kernel": kill.kernel_bytes,
            "kernel_stack": 163840,
            "pagetables": 1 << 20,
            "sock": 0,
            "shmem": kill.shmem_bytes,
            "file_mapped": 0,
            "inactive_anon": kill.anon_bytes,
            "active_anon": 0,
            "pgfault": 987654,
            **kill.extra_stat,
        }
        msgs.extend(f"{k} {val}" for k, val in stat.items())
    msgs.append("Tasks state (memory values in pages):")
    if kill.era == "old":
        msgs.append("[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name")
        for t in kill.tasks:
            rss = t.anon_pages + t.file_pages + t.shmem_pages
            msgs.append(
                f"[{t.pid:7d}]     0 {t.pid:5d} {t.total_vm_pages:8d} {rss:8d}   262144        0 "
                f"{t.oom_score_adj:13d} {t.name}"
            )
    else:
        msgs.append(
            "[  pid  ]   uid  tgid total_vm      rss rss_anon rss_file rss_shmem pgtables_bytes "
            "swapents oom_score_adj name"
        )
        for t in kill.tasks:
            rss = t.anon_pages + t.file_pages + t.shmem_pages
            msgs.append(
                f"[{t.pid:7d}]     0 {t.pid:5d} {t.total_vm_pages:8d} {rss:8d} {t.anon_pages:8d} "
                f"{t.file_pages:8d} {t.shmem_pages:9d}   262144        0 {t.oom_score_adj:13d} {t.name}"
            )
    if kill.era == "new":
        msgs.append(
            f"oom-kill:constraint={kill.constraint_printed},nodemask=(null),"
            f"cpuset=cri-containerd-{kill.container_id}.scope,mems_allowed=0,oom_memcg={kill.oom_memcg},"
            f"task_memcg={kill.task_memcg},task={v.name},pid={v.pid},uid=0"
        )
    else:
        msgs.append(
            f"Memory cgroup out of memory: Kill process {v.pid} ({v.name}) score 999 or sacrifice child"
        )
    killed = (
        f"Killed process {v.pid} ({v.name}) total-vm:{v.total_vm_pages * 4}kB, "
        f"anon-rss:{v.anon_pages * 4}kB, file-rss:{v.file_pages * 4}kB, shmem-rss:{v.shmem_pages * 4}kB"
    )
    if kill.era == "new":
        killed = (
            f"Memory cgroup out of memory: {killed}, UID:0 pgtables:256kB oom_score_adj:{v.oom_score_adj}"
        )
    msgs.append(killed)
    if kill.oom_group:
        msgs.append(f"Tasks in {kill.task_memcg} are going to be killed due to memory.oom.group set")
        msgs.append(killed)
    msgs.append(
        f"oom_reaper: reaped process {v.pid} ({v.name}), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"
    )
    return msgs


def render(kill: SyntheticKill, fmt: Format, *, t0: float = 1000.0, seq0: int = 100) -> list[str]:
    """The record as lines of text in ``fmt``."""
    out = []
    for i, msg in enumerate(_messages(kill)):
        t = t0 + i * 0.00002
        if fmt == "kmsg":
            out.append(f"6,{seq0 + i},{int(t * 1e6)},-;{msg}")
        elif fmt == "dmesg":
            out.append(f"[{t:12.6f}] {msg}")
        elif fmt == "dmesg-T":
            out.append(f"[Tue Mar  4 10:{int(t0) // 60 % 60:02d}:{int(t0) % 60:02d} 2025] {msg}")
        elif fmt == "syslog":
            out.append(f"Mar  4 10:{int(t0) // 60 % 60:02d}:{int(t0) % 60:02d} {kill.host} kernel: {msg}")
        elif fmt == "journal-quoted":
            out.append(f"> mar 04 10:{int(t0) // 60 % 60:02d}:{int(t0) % 60:02d} {kill.host} kernel: {msg}")
        else:
            out.append(msg)
    return out


def random_kill(rng: random.Random) -> SyntheticKill:
    """A varied kill: a grown trainer with forked workers, a lone process, or a sidecar-heavy pod."""
    trainer_pages = rng.randint(20_000, 400_000)
    base_pid = rng.randint(1000, 4_000_000)
    tasks = [SyntheticTask(base_pid, "python", trainer_pages, total_vm_pages=trainer_pages * 2)]
    workers = rng.randint(0, 6)
    owned_total = 0
    for i in range(workers):
        owned = rng.randint(0, trainer_pages // 2)
        owned_total += owned
        tasks.append(
            SyntheticTask(
                base_pid + 10 + i,
                rng.choice(["pt_data_worker", "python"]),
                anon_pages=rng.randint(owned, trainer_pages),
                total_vm_pages=trainer_pages * 2,
            )
        )
    if rng.random() < 0.3:
        tasks.append(SyntheticTask(base_pid + 100, "CPU 0/KVM helper", 500, total_vm_pages=9000))
    victim = rng.choice(tasks)
    anon = (trainer_pages + owned_total) * PAGE
    version: Literal[1, 2] = rng.choice([1, 2])
    era: Literal["old", "new"] = "old" if version == 1 and rng.random() < 0.4 else "new"
    return SyntheticKill(
        victim_pid=victim.pid,
        tasks=tasks,
        cgroup_version=version,
        era=era,
        limit_kb=anon // 1024 + 4096,
        anon_bytes=anon,
        file_bytes=rng.randint(0, 1 << 24),
        shmem_bytes=rng.randint(0, 1 << 22),
        pod_uid=f"{rng.getrandbits(32):08x}-1111-2222-3333-{rng.getrandbits(48):012x}",
        container_id=f"{rng.getrandbits(256):064x}",
        constraint_printed=rng.choice(["CONSTRAINT_MEMCG", "CONSTRAINT_MEMCG", "CONSTRAINT_NONE"]),
        host=rng.choice(["node-a", "node-b"]),
        oom_group=version == 2 and rng.random() < 0.2,
    )
