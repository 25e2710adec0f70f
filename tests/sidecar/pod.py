"""A training pod on the real kernel, as far as one machine without Kubernetes can make one.

The trainer (a python that holds memory, with one forked worker that dies with it) runs in a
capped memory cgroup of its own; the sidecar is ``podmortem sidecar``, started as the chart would
start it, as a separate process of the same unprivileged user. Both are started through
``setpriv`` from root, the trainer through `podmortem_demo.sandbox`'s wrapper, so the test process
never joins the capped cgroup. Shared by tests/sidecar/test_sidecar_kernel.py and bench/sidecar.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from podmortem_demo import sandbox

#: The unprivileged user both run as (nobody on Debian).
UID = GID = 65534
PODMORTEM = str(Path(sys.executable).with_name("podmortem"))
SETPRIV = shutil.which("setpriv")
MIB = 1024 * 1024

#: Holds ``argv[1]`` MiB, forks a worker that holds ``argv[2]`` MiB and dies with the trainer
#: (PR_SET_PDEATHSIG), says "ready <worker pid>", waits for a line, then allocates until killed.
TRAINER = r"""
import ctypes, os, signal, sys
MIB = 1 << 20
def hold(mib):
    b = bytearray(mib * MIB)
    b[::4096] = b"x" * len(b[::4096])
    return b
held = [hold(int(sys.argv[1]))]
parent = os.getpid()
worker = os.fork()
if worker == 0:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(0)
    mine = hold(int(sys.argv[2]))
    while True:
        signal.pause()
print("ready", worker, flush=True)
sys.stdin.readline()
while True:
    held.append(hold(4))
"""


def as_user(args: list[str]) -> list[str]:
    """``args`` run as `UID`/`GID`, no supplementary groups, no capabilities."""
    assert SETPRIV is not None
    return [SETPRIV, f"--reuid={UID}", f"--regid={GID}", "--clear-groups", *args]


def why_not() -> str | None:
    """Why this machine cannot run the pod (for a skip reason), or None when it can."""
    if os.geteuid() != 0:
        return "needs root: to create a memory cgroup and to start the trainer and sidecar as another user"
    if SETPRIV is None:
        return "needs setpriv (util-linux) to run the trainer and the sidecar as an unprivileged user"
    try:
        root = sandbox.find_root()
    except sandbox.CgroupUnavailable as exc:
        return f"no writable memory cgroup: {exc}"
    if root.version != 1 and not Path(root.path, "cgroup.controllers").exists():
        return f"no memory cgroup at {root.path}"
    return None


def user_dir(prefix: str) -> Path:
    """A directory the unprivileged user may write (tmp_path's parents are root's, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.chown(path, UID, GID)
    path.chmod(0o755)
    return path


def cgroup_line(pid: int) -> str:
    """The memory cgroup of ``pid`` as /proc/<pid>/cgroup shows it (what --container-cgroup takes)."""
    text = Path(f"/proc/{pid}/cgroup").read_text()
    unified = None
    for line in text.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            return path
        if number == "0":
            unified = path
    assert unified is not None, text
    return unified


def start_trainer(cgroup: sandbox.MemoryCgroup, *, trainer_mib: int, worker_mib: int) -> tuple[
        subprocess.Popen[bytes], int]:
    """Start the trainer in ``cgroup`` as the user; return it and its worker's pid once both hold memory."""
    proc = cgroup.popen(as_user([sys.executable, "-c", TRAINER, str(trainer_mib), str(worker_mib)]),
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[:1] == [b"ready"], line
    return proc, int(line[1])


def go(trainer: subprocess.Popen[bytes]) -> None:
    """Let the trainer allocate until the kernel kills it."""
    assert trainer.stdin is not None
    trainer.stdin.write(b"go\n")
    trainer.stdin.flush()


def sidecar_args(*, termination_log: Path, container_cgroup: str | None, interval: float | None = None,
                 ) -> list[str]:
    """``podmortem sidecar`` as a pod spec would run it, as the user."""
    args = [PODMORTEM, "sidecar", "--termination-log", str(termination_log)]
    if container_cgroup is not None:
        args += ["--container-cgroup", container_cgroup]
    if interval is not None:
        args += ["--interval", str(interval)]
    return as_user(args)


@dataclass(frozen=True)
class Kill:
    """One real OOM kill watched by the sidecar: who was killed, and what the sidecar left."""

    trainer_pid: int
    worker_pid: int
    #: The trainer's memory cgroup as /proc/<pid>/cgroup shows it (what the sidecar was given).
    cgroup_path: str
    #: The sidecar's termination message, as it wrote it.
    message: str


def kill_watched(cgroup: sandbox.MemoryCgroup, home: Path, *, trainer_mib: int, worker_mib: int,
                 interval: float | None = None, settle_s: float = 0.0, deadline_s: float = 60.0) -> Kill:
    """Start the trainer in ``cgroup`` and the sidecar beside it (files in ``home``), let the trainer
    grow until the kernel kills it, and return once the sidecar has ended by itself.

    ``settle_s``: seconds of sampling after the sidecar found the trainer, before it grows.
    """
    message, log = home / "termination-log", home / "sidecar.log"
    trainer, worker = start_trainer(cgroup, trainer_mib=trainer_mib, worker_mib=worker_mib)
    sidecar: subprocess.Popen[bytes] | None = None
    try:
        path = cgroup_line(trainer.pid)
        with log.open("wb") as out:
            sidecar = subprocess.Popen(
                sidecar_args(termination_log=message, container_cgroup=path, interval=interval),
                stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + deadline_s
        while "trainer container found" not in log.read_text():  # found, and sampled once
            assert sidecar.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        time.sleep(settle_s)
        go(trainer)
        assert trainer.wait(timeout=deadline_s) == -9  # SIGKILL: the kernel's OOM kill
        assert sidecar.wait(timeout=deadline_s) == 0, log.read_text()  # by itself: the trainer is gone
    finally:
        for proc in (trainer, sidecar):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for pipe in (trainer.stdin, trainer.stdout):
            if pipe is not None:
                pipe.close()
    return Kill(trainer_pid=trainer.pid, worker_pid=worker, cgroup_path=path, message=message.read_text())
