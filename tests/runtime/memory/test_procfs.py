"""The /proc readers, on recorded file text and on this machine's own processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from podmortem_runtime import procfs

STATUS = """Name:\tpython
Umask:\t0022
State:\tS (sleeping)
VmPeak:\t 6012344 kB
VmHWM:\t 3780120 kB
VmRSS:\t 3145728 kB
RssAnon:\t 2900000 kB
RssFile:\t  245728 kB
Threads:\t12
"""

SMAPS_ROLLUP = """55d0c0a00000-7ffd1b5f9000 ---p 00000000 00:00 0                          [rollup]
Rss:             1204224 kB
Pss:              629145 kB
Pss_Anon:         600000 kB
Shared_Clean:      10000 kB
"""


def test_parse_status() -> None:
    mem = procfs.parse_status(STATUS)
    assert mem == procfs.ProcessMemory(
        rss_bytes=3145728 * 1024, peak_bytes=3780120 * 1024, anon_bytes=2900000 * 1024
    )


def test_status_of_a_kernel_thread_is_an_error() -> None:
    with pytest.raises(ValueError, match="VmRSS"):
        procfs.parse_status("Name:\tkthreadd\nState:\tS (sleeping)\n")


def test_parse_pss() -> None:
    assert procfs.parse_smaps_rollup_pss(SMAPS_ROLLUP) == 629145 * 1024


def test_ppid_with_spaces_and_parentheses_in_the_name() -> None:
    assert procfs.parse_ppid("4242 (pt_data (worker) 0) S 4100 4242 1 0 -1") == 4100


def test_own_status_is_read() -> None:
    mem = procfs.read_status()
    assert 0 < mem.rss_bytes <= mem.peak_bytes


def test_descendants_include_grandchildren(tmp_path: Path) -> None:
    def proc(pid: int, ppid: int) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (x y) S {ppid} 1 1 0")

    for pid, ppid in [(10, 1), (11, 10), (12, 10), (13, 11), (20, 1)]:
        proc(pid, ppid)
    (tmp_path / "self").mkdir()
    assert procfs.descendant_pids(10, proc=tmp_path) == [11, 12, 13]
    assert procfs.descendant_pids(13, proc=tmp_path) == []


def test_real_child_and_its_pss() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert child.pid in procfs.descendant_pids(os.getpid())
        pss = procfs.read_pss(child.pid)
        assert pss is not None and pss > 0
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    assert procfs.read_pss(child.pid) is None
