"""A real OOM kill in a real memory cgroup, read back from /dev/kmsg and diagnosed.

The child grows a heap, forks a child that keeps the old pages, then rewrites its
own heap: every written page becomes a copy-on-write copy, until the cgroup's limit
is hit. Other tests (and other programs) may cause OOM kills at the same time, so
only records naming this test's own cgroup count.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from podmortem.diagnosis import diagnose
from podmortem.kernel import kmsg, oom_parser
from podmortem.reports import OomKillRecord
from podmortem_demo import sandbox

LIMIT = 128 * 1024 * 1024
HEAP_MIB = 80
#: How long to wait for the kill and for the kernel to finish printing it.
DEADLINE_S = 60.0

GROW_FORK_REWRITE = f"""
import os, sys, time
heap = bytearray({HEAP_MIB} * 1024 * 1024)
for i in range(0, len(heap), 4096):
    heap[i] = 1
child = os.fork()
if child == 0:
    time.sleep(120)  # keeps the old pages mapped
    os._exit(0)
print(os.getpid(), child, flush=True)
for r in range(2, 6):  # copy-on-write: each write gives the parent its own copy of the page
    for i in range(0, len(heap), 4096):
        heap[i] = r
time.sleep(120)
"""


def _own_records(kernel: list[kmsg.KmsgRecord], name: str) -> list[OomKillRecord]:
    records = oom_parser.parse_records(kernel)
    return [
        r
        for r in records
        if any(p and p.rstrip("/").endswith("/" + name) for p in (r.oom_memcg, r.task_memcg))
    ]


@pytest.mark.kernel
def test_fork_copy_on_write_oom_kill_is_diagnosed(make_cgroup: Callable[..., sandbox.MemoryCgroup]) -> None:
    try:
        reader = kmsg.KmsgReader().open()
    except kmsg.KmsgUnavailable as exc:
        pytest.skip(f"needs a readable /dev/kmsg: {exc}")
    with reader:
        reader.seek_end()  # only records written after the test started
        cg = make_cgroup(limit_bytes=LIMIT)
        proc = cg.popen([sys.executable, "-c", GROW_FORK_REWRITE], stdout=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline().split()
            assert len(first) == 2, "the test process died before it forked"
            pids = {int(first[0]), int(first[1])}
            kernel: list[kmsg.KmsgRecord] = []
            deadline = time.monotonic() + DEADLINE_S
            mine: list[OomKillRecord] = []
            while time.monotonic() < deadline:
                kernel.extend(reader.records())
                mine = [r for r in _own_records(kernel, cg.name) if r.killed]
                if mine:
                    break
                time.sleep(0.05)
        finally:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    assert mine, f"no OOM kill record for {cg.name} within {DEADLINE_S} s (oom_kills={cg.oom_kills()})"
    record = mine[0]
    report = diagnose(record)

    assert report.kill is not None and report.kill.pid in pids
    assert report.kill.constraint_effective == "CONSTRAINT_MEMCG"
    assert report.cgroup is not None and report.cgroup.limit_bytes == LIMIT
    assert {t.pid for t in report.tasks} >= pids
    codes = {f.code for f in report.findings}
    assert {"memcg-limit", "anon-dominant", "fork-copies"} <= codes, codes
    fork = report.finding("fork-copies")
    assert fork is not None and set(fork.evidence["fork_pids"]) | {fork.evidence["parent_pid"]} == pids  # type: ignore[arg-type]
    assert report.verdict == "memcg-limit" and not report.partial
