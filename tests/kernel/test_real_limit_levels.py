"""Two classes of issue 14 made live on the real kernel: a QoS-class limit and a shmem-dominant cgroup.

No public record of either was found, so the corpus holds copies recorded on this project's
machine (records 64 and 65); these tests make the same kills happen now and diagnose what the
kernel prints. They need root with a writable cgroup v1 memory controller and a tmpfs mount, and
skip with the reason otherwise; the pytest process never joins a capped cgroup.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.full_volume import tmpfs

from podmortem.cgroups import paths
from podmortem.diagnosis import diagnose
from podmortem.kernel import kmsg, oom_parser
from podmortem.reports import FailureReport

pytestmark = pytest.mark.kernel

V1 = Path("/sys/fs/cgroup/memory")
LIMIT = 96 << 20


def _v1() -> Path:
    if not (V1 / "cgroup.procs").exists() or not os.access(V1, os.W_OK):
        pytest.skip("needs a writable cgroup v1 memory controller at /sys/fs/cgroup/memory")
    return V1


@pytest.fixture
def reader() -> Iterator[kmsg.KmsgReader]:
    try:
        r = kmsg.KmsgReader().open()
    except kmsg.KmsgUnavailable as exc:
        pytest.skip(f"needs a readable /dev/kmsg: {exc}")
    with r:
        r.seek_end()
        yield r


def _run_in(cgroup: Path, argv: list[str]) -> int:
    """Run ``argv`` inside ``cgroup`` (the child moves itself in before exec); its exit code."""
    script = f'echo $$ > {cgroup}/cgroup.procs && exec "$@"'
    return subprocess.run(["sh", "-c", script, "sh", *argv], check=False, capture_output=True).returncode


def _report_for(reader: kmsg.KmsgReader, memcg: str) -> FailureReport:
    kernel: list[kmsg.KmsgRecord] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        kernel.extend(reader.records())
        mine = [r for r in oom_parser.parse_records(kernel) if r.killed and r.oom_memcg == memcg]
        if mine:
            record = mine[-1]
            pod = paths.pod_ref(task_memcg=record.task_memcg, oom_memcg=record.oom_memcg,
                                cpuset=record.cpuset)
            return diagnose(record, pod=pod)
        time.sleep(0.05)
    raise AssertionError(f"no OOM record for {memcg} within 30 s")


def test_a_limit_on_the_burstable_class_is_named_as_such(reader: kmsg.KmsgReader) -> None:
    root = _v1() / f"kubepods-{uuid.uuid4().hex[:8]}"  # the kubelet's layout, under a test-only top
    qos = root / "burstable"
    container = qos / f"pod{uuid.uuid4()}" / uuid.uuid4().hex
    container.mkdir(parents=True)
    try:
        (qos / "memory.limit_in_bytes").write_text(str(LIMIT))
        code = _run_in(container, ["python3", "-c",
                                   "x = bytearray(150 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1"])
        assert code == -9 or code == 137
        report = _report_for(reader, "/" + str(qos.relative_to(V1)))
    finally:
        for d in (container, container.parent, qos, root):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
    text = next(f.message + " " + (f.action or "") for f in report.findings if f.code == "memcg-limit")
    assert "QoS cgroup" in text and "no pod hit a limit of its own" in text
    assert "Raising this pod's limit does not help" in text


def test_a_shmem_filled_cgroup_says_killing_frees_little(reader: kmsg.KmsgReader, tmp_path: Path) -> None:
    cgroup = _v1() / f"podmortem-shm-{uuid.uuid4().hex[:8]}"
    cgroup.mkdir()
    try:
        (cgroup / "memory.limit_in_bytes").write_text(str(LIMIT))
        with tmpfs(tmp_path / "shm", size="200m") as shm:
            assert _run_in(cgroup, ["dd", "if=/dev/zero", f"of={shm}/blob", "bs=1M", "count=88"]) == 0
            code = _run_in(cgroup, ["dd", "if=/dev/zero", "of=/dev/null", "bs=12M", "count=4"])
            assert code == -9 or code == 137
            report = _report_for(reader, "/" + cgroup.name)
    finally:
        for _ in range(50):
            try:
                cgroup.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    codes = {f.code for f in report.findings}
    assert {"memcg-limit", "shmem-dominant", "kill-frees-little"} <= codes, codes
