"""A hostile trainer against the real sidecar on the real kernel (issue 36, "the trainer is untrusted too").

Each test is one finding of the security re-test, made for real: a trainer whose mount namespace
has a tmpfs over its ``/sys/fs/cgroup/memory`` (made by root with ``unshare --mount`` here; in a pod
the trainer would need a user namespace, see docs/sidecar.md "Trust model") holding made-up
numbers, a FIFO, or a 2 GiB sparse ``memory.stat``; a trainer of the same uid writing the
sidecar's termination log through ``/proc/<sidecar>/root``; 1,100 trainer processes against a
sidecar whose RLIMIT_NOFILE is 1,024 (set on the sidecar's process alone with ``prlimit``, never on
pytest). As in test_sidecar_kernel.py the trainer and the sidecar run as the same unprivileged user.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.sidecar import pod

from podmortem.reports import sidecar_evidence as ev
from podmortem_demo import sandbox

pytestmark = pytest.mark.kernel

DEADLINE_S = 30.0
PRLIMIT = shutil.which("prlimit")
UNSHARE = shutil.which("unshare")

#: Sleeps after saying "ready"; with an argument N, first forks N children that sleep too.
SLEEPER = r"""
import os, signal, sys
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 0):
    if os.fork() == 0:
        signal.pause()
        os._exit(0)
print("ready", flush=True)
signal.pause()
"""

#: Root's part of the hostile trainer: a private mount namespace, a tmpfs over the cgroup mount with
#: the files the test asks for ($1: how memory.stat is faked), then the trainer itself as the user.
HOSTILE_MOUNT = r"""
set -e
dir=/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
mount -t tmpfs fake /sys/fs/cgroup/memory
mkdir -p "$dir"
echo 1048576 > "$dir/memory.limit_in_bytes"
echo 31337 > "$dir/memory.failcnt"
printf 'oom_kill_disable 0\nunder_oom 0\noom_kill 5\n' > "$dir/memory.oom_control"
echo 1000000 > "$dir/memory.usage_in_bytes"
echo 1048576 > "$dir/memory.max_usage_in_bytes"
echo "$$" > "$dir/cgroup.procs"
case "$1" in
  fifo) mkfifo "$dir/memory.stat" ;;
  sparse) truncate -s 2G "$dir/memory.stat" ;;
  *) printf 'cache 0\nrss 1000000\n' > "$dir/memory.stat" ;;
esac
shift
exec "$@"
"""


@pytest.fixture
def cgroup() -> Iterator[sandbox.MemoryCgroup]:
    reason = pod.why_not()
    if reason is not None:
        pytest.skip(reason)
    if sandbox.find_root().version != 1:
        pytest.skip("the hostile mount is laid out as cgroup v1's (this machine's only memory controller)")
    with sandbox.MemoryCgroup(limit_bytes=512 * pod.MIB, prefix="podmortem-hostile") as made:
        yield made


@pytest.fixture
def home() -> Iterator[Path]:
    path = pod.user_dir("podmortem-hostile-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _stop(*procs: subprocess.Popen[bytes] | None) -> None:
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()


def _ready(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"


def _wait_log(sidecar: subprocess.Popen[bytes], log: Path, text: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while text not in log.read_text():
        assert sidecar.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def _sidecar(home: Path, container_cgroup: str, *, nofile: int | None = None) -> subprocess.Popen[bytes]:
    args = pod.sidecar_args(termination_log=home / "termination-log", container_cgroup=container_cgroup,
                            interval=0.5)
    if nofile is not None:
        assert PRLIMIT is not None
        args = [PRLIMIT, f"--nofile={nofile}:{nofile}", "--", *args]
    with (home / "sidecar.log").open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


def _sigterm_and_read(sidecar: subprocess.Popen[bytes], home: Path) -> ev.SidecarEvidence:
    sidecar.send_signal(signal.SIGTERM)
    try:
        code = sidecar.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("the sidecar did not end within 10 s of SIGTERM:\n" + (home / "sidecar.log").read_text())
    assert code == 0, (home / "sidecar.log").read_text()
    return ev.parse((home / "termination-log").read_text())


def _vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("kind", ["numbers", "fifo", "sparse"])
def test_a_tmpfs_over_the_trainers_cgroup_mount_is_refused(
    cgroup: sandbox.MemoryCgroup, home: Path, kind: str
) -> None:
    if UNSHARE is None:
        pytest.skip("needs unshare (util-linux)")
    trainer = cgroup.popen(
        [UNSHARE, "--mount", "--propagation", "private", "/bin/sh", "-c", HOSTILE_MOUNT, "sh", kind,
         *pod.as_user([sys.executable, "-c", SLEEPER])],
        stdout=subprocess.PIPE,
    )
    sidecar = None
    try:
        _ready(trainer)
        path = pod.cgroup_line(trainer.pid)
        sidecar = _sidecar(home, path)
        _wait_log(sidecar, home / "sidecar.log", "trainer container found")
        time.sleep(1.2)  # two more samples at 0.5 s
        hwm_kib = _vm_hwm_kib(sidecar.pid)
        doc = _sigterm_and_read(sidecar, home)
    finally:
        _stop(trainer, sidecar)
    text = (home / "termination-log").read_text()
    assert hwm_kib < 100 * 1024, hwm_kib  # the 2 GiB file was never read (it took the sidecar to 2,064 MiB)
    assert doc.mem is None or (doc.mem.limit != pod.MIB and doc.mem.limit_hits != 31337), text
    assert doc.oom.after != 5 and doc.kill is None, text
    assert any("not a cgroup filesystem" in note for note in doc.notes), text


#: Root's part of a subtler trainer: one real cgroup file bound over another in its own mount
#: namespace (both on the cgroup filesystem): memory.swappiness (60) as memory.limit_in_bytes.
BIND_OVER = r"""
set -e
dir=/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
mount --bind "$dir/memory.swappiness" "$dir/memory.limit_in_bytes"
exec "$@"
"""


def test_a_real_cgroup_file_bound_over_another_is_refused(cgroup: sandbox.MemoryCgroup, home: Path) -> None:
    if UNSHARE is None:
        pytest.skip("needs unshare (util-linux)")
    trainer = cgroup.popen(
        [UNSHARE, "--mount", "--propagation", "private", "/bin/sh", "-c", BIND_OVER, "sh",
         *pod.as_user([sys.executable, "-c", SLEEPER])],
        stdout=subprocess.PIPE,
    )
    sidecar = None
    try:
        _ready(trainer)
        sidecar = _sidecar(home, pod.cgroup_line(trainer.pid))
        _wait_log(sidecar, home / "sidecar.log", "trainer container found")
        time.sleep(1.2)
        doc = _sigterm_and_read(sidecar, home)
    finally:
        _stop(trainer, sidecar)
    text = (home / "termination-log").read_text()
    assert doc.mem is None or doc.mem.limit != 60, text
    assert any("mounted over" in note for note in doc.notes), text


def test_the_trainer_cannot_write_the_sidecars_termination_log(
    cgroup: sandbox.MemoryCgroup, home: Path
) -> None:
    trainer = cgroup.popen(pod.as_user([sys.executable, "-c", SLEEPER]), stdout=subprocess.PIPE)
    sidecar = None
    try:
        _ready(trainer)
        path = pod.cgroup_line(trainer.pid)
        sidecar = _sidecar(home, path)
        _wait_log(sidecar, home / "sidecar.log", "trainer container found")
        target = f"/proc/{sidecar.pid}/root{home}/termination-log"
        forge = subprocess.run(
            pod.as_user([sys.executable, "-c",
                         "import sys; open(sys.argv[1], 'w').write('{\"v\":1}')", target]),
            capture_output=True, text=True, timeout=DEADLINE_S,
        )
        assert forge.returncode != 0 and "PermissionError" in forge.stderr, forge
        doc = _sigterm_and_read(sidecar, home)
    finally:
        _stop(trainer, sidecar)
    assert doc.reason == "sigterm"


@pytest.mark.skipif(PRLIMIT is None, reason="needs prlimit (util-linux)")
def test_more_processes_than_descriptors_neither_ends_the_watch_nor_loses_the_evidence(
    cgroup: sandbox.MemoryCgroup, home: Path
) -> None:
    children = 1100
    trainer = cgroup.popen(pod.as_user([sys.executable, "-c", SLEEPER, str(children)]),
                           stdout=subprocess.PIPE)
    sidecar = None
    try:
        _ready(trainer)
        path = pod.cgroup_line(trainer.pid)
        sidecar = _sidecar(home, path, nofile=1024)
        _wait_log(sidecar, home / "sidecar.log", "trainer container found")
        time.sleep(2.0)  # four samples at 0.5 s, and every exit-time look between them
        assert sidecar.poll() is None, (home / "sidecar.log").read_text()  # not "every process has exited"
        doc = _sigterm_and_read(sidecar, home)
    finally:
        _stop(sidecar)
        subprocess.run(["kill", "-KILL", *[str(p) for p in cgroup.pids()]], check=False)
        _stop(trainer)
    assert doc.reason == "sigterm"
    assert doc.procs == children + 1
    assert "Too many open files" not in (home / "sidecar.log").read_text()
