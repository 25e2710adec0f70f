"""Benchmark: `podmortem sidecar`'s own cost per sampled pod, and the time from an OOM kill to its message.

On the real kernel, in one run: a trainer with a forked worker (tests/sidecar/pod.py) in a capped
memory cgroup, and the sidecar started as a pod spec starts it (the console script, default
interval 2 s) as a separate process of the same unprivileged user. First the trainer idles for
``--idle`` seconds while the sidecar samples it: the sidecar's RSS (VmRSS and its peak VmHWM) and
CPU (utime + stime over the wall time, from /proc/<pid>/stat). Then the trainer allocates until the
kernel kills it, ``--kills`` times: the time from the kill (the cgroup's OOM-kill counter rising,
polled here every millisecond) to the termination message file holding the evidence. Printed as
ratios against the goals: RSS < 32 MiB, CPU < 1% of a core, kill to message < 1 s.

This machine has no private PID namespace for the pod, so the sidecar scans the whole host's /proc
at every look (given the trainer's cgroup with --container-cgroup): its CPU here is an upper bound
of a pod's, where /proc holds only the pod's processes. Needs root (a memory cgroup, setpriv);
without it, it says why and exits 0.

    python bench/sidecar.py [--idle 30] [--kills 5]
    python bench/sidecar.py --processes 20000 [--idle 30]

``--processes N`` measures a trainer of N sleeping processes instead (no kill): the sidecar's RSS
and CPU while it watches them, against the goals for a hostile process count (issue 36): RSS <
32 MiB and CPU < 5% of a core at 20,000 processes. The sidecar is started once the N are there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the pod comes from the tests
from tests.sidecar import pod

from podmortem.reports import sidecar_evidence as ev
from podmortem_demo import sandbox

GOAL_RSS = 32 * pod.MIB
GOAL_CPU = 0.01
GOAL_LATENCY_S = 1.0
GOAL_CPU_MANY = 0.05

#: N sleeping children (forked from one python, so they share its pages), then "ready".
MANY = r"""
import gc, os, signal, sys
gc.freeze()
for _ in range(int(sys.argv[1])):
    if os.fork() == 0:
        signal.pause()
        os._exit(0)
print("ready", flush=True)
signal.pause()
"""


def many(idle_s: float, count: int) -> int:
    """The sidecar watching ``count`` sleeping processes of the trainer for ``idle_s`` seconds."""
    directory = pod.user_dir("podmortem-bench-sidecar-")
    try:
        with sandbox.MemoryCgroup(limit_bytes=None, prefix="podmortem-bench-many") as cgroup:
            trainer = cgroup.popen(pod.as_user([sys.executable, "-c", MANY, str(count - 1)]),
                                   stdout=subprocess.PIPE)
            sidecar = None
            try:
                assert trainer.stdout is not None
                started = time.monotonic()
                if trainer.stdout.readline().strip() != b"ready":
                    raise SystemExit("the trainer did not start its processes")
                print(f"{count} trainer processes started in {time.monotonic() - started:.1f} s")
                log = directory / "sidecar.log"
                with log.open("wb") as out:
                    sidecar = subprocess.Popen(
                        pod.sidecar_args(termination_log=directory / "termination-log",
                                         container_cgroup=pod.cgroup_line(trainer.pid)),
                        stdout=out, stderr=subprocess.STDOUT)
                found_at = time.monotonic()
                while "trainer container found" not in log.read_text():
                    if sidecar.poll() is not None or time.monotonic() > found_at + 120:
                        raise SystemExit(f"the sidecar did not find the trainer:\n{log.read_text()}")
                    time.sleep(0.05)
                print(f"found by the sidecar after {time.monotonic() - found_at:.2f} s")
                cpu0, t0 = cpu_seconds(sidecar.pid), time.monotonic()
                time.sleep(idle_s)
                cpu1, t1 = cpu_seconds(sidecar.pid), time.monotonic()
                rss, hwm = status_kib(sidecar.pid, "VmRSS") * 1024, status_kib(sidecar.pid, "VmHWM") * 1024
                sidecar.send_signal(15)
                sidecar.wait(timeout=60)
                doc = ev.parse((directory / "termination-log").read_text())
            finally:
                subprocess.run(["kill", "-KILL", *map(str, cgroup.pids())], check=False)
                stop(*(p for p in (trainer, sidecar) if p is not None))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    cpu = (cpu1 - cpu0) / (t1 - t0)
    print(f"watched {doc.procs} processes for {t1 - t0:.1f} s at the default 2 s interval "
          f"({doc.samples} samples, {len(doc.top)} in top)")
    print(f"RSS          {rss / pod.MIB:6.1f} MiB (peak {hwm / pod.MIB:.1f} MiB)   "
          f"goal < 32 MiB: {hwm / GOAL_RSS:.2f}x of it")
    print(f"CPU          {cpu * 100:6.3f} % of a core              "
          f"goal < 5%:    {cpu / GOAL_CPU_MANY:.2f}x of it")
    return 0
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def start(cgroup: sandbox.MemoryCgroup, directory: Path) -> tuple[
        subprocess.Popen[bytes], subprocess.Popen[bytes], Path, Path]:
    message = directory / "termination-log"
    message.unlink(missing_ok=True)
    log = directory / "sidecar.log"
    trainer, _worker = pod.start_trainer(cgroup, trainer_mib=40, worker_mib=20)
    with log.open("wb") as out:
        sidecar = subprocess.Popen(
            pod.sidecar_args(termination_log=message, container_cgroup=pod.cgroup_line(trainer.pid)),
            stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "trainer container found" not in log.read_text():
        if sidecar.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the sidecar did not find the trainer:\n{log.read_text()}")
        time.sleep(0.01)
    return trainer, sidecar, message, log


def kill_to_message(cgroup: sandbox.MemoryCgroup, trainer: subprocess.Popen[bytes], message: Path) -> float:
    """Let the trainer go; seconds from the counter's rise to a whole message in the file."""
    before = cgroup.oom_kills()
    pod.go(trainer)
    killed_at = written_at = None
    deadline = time.monotonic() + 60
    while written_at is None and time.monotonic() < deadline:
        now = time.monotonic()
        if killed_at is None and cgroup.oom_kills() > before:
            killed_at = now
        if killed_at is not None:
            try:
                ev.parse(message.read_bytes())
                written_at = time.monotonic()
            except (OSError, ev.EvidenceInvalid):
                pass
        time.sleep(0.001)
    if killed_at is None or written_at is None:
        raise SystemExit("no kill, or no message within 60 s")
    return written_at - killed_at


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of sampling measured (default 30)")
    parser.add_argument("--kills", type=int, default=5, help="OOM kills timed (default 5)")
    parser.add_argument("--processes", type=int, default=0,
                        help="instead: the sidecar watching this many sleeping trainer processes (no kill)")
    args = parser.parse_args(argv)
    reason = pod.why_not()
    if reason is not None:
        print(f"skipped: {reason}")
        return 0
    if args.processes:
        return many(args.idle, args.processes)
    directory = pod.user_dir("podmortem-bench-sidecar-")
    latencies: list[float] = []
    try:
        with sandbox.MemoryCgroup(limit_bytes=160 * pod.MIB, prefix="podmortem-bench") as cgroup:
            trainer, sidecar, message, _log = start(cgroup, directory)
            try:
                cpu0, t0 = cpu_seconds(sidecar.pid), time.monotonic()
                time.sleep(args.idle)
                cpu1, t1 = cpu_seconds(sidecar.pid), time.monotonic()
                rss, hwm = status_kib(sidecar.pid, "VmRSS") * 1024, status_kib(sidecar.pid, "VmHWM") * 1024
                latencies.append(kill_to_message(cgroup, trainer, message))
                sidecar.wait(timeout=60)
            finally:
                stop(trainer, sidecar)
            for _ in range(args.kills - 1):
                trainer, sidecar, message, _log = start(cgroup, directory)
                try:
                    latencies.append(kill_to_message(cgroup, trainer, message))
                    sidecar.wait(timeout=60)
                finally:
                    stop(trainer, sidecar)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    cpu = (cpu1 - cpu0) / (t1 - t0)
    processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
    print(f"sampled for {t1 - t0:.1f} s at the default 2 s interval; /proc here holds {processes} processes")
    print(f"RSS          {rss / pod.MIB:6.1f} MiB (peak {hwm / pod.MIB:.1f} MiB)   "
          f"goal < 32 MiB: {hwm / GOAL_RSS:.2f}x of it")
    print(f"CPU          {cpu * 100:6.3f} % of a core              goal < 1%:    {cpu / GOAL_CPU:.2f}x of it")
    median, worst = statistics.median(latencies), max(latencies)
    print(f"kill->message median {median * 1000:.1f} ms, max {worst * 1000:.1f} ms over "
          f"{len(latencies)} kills   goal < 1 s: {worst / GOAL_LATENCY_S:.3f}x of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
