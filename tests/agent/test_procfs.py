from __future__ import annotations

from pathlib import Path

import pytest
from tests.agent import trees

from podmortem.cgroups import procfs

REAL_ROLLUP = trees.SMAPS_ROLLUP.format(rss=1772, pss=330, pc=44, pd=116, anon=116, swap=8)


def test_parse_smaps_rollup_converts_kb_to_bytes_and_skips_the_header() -> None:
    values = procfs.parse_smaps_rollup(REAL_ROLLUP)
    assert values["Rss"] == 1772 * 1024
    assert values["Pss"] == 330 * 1024
    assert values["Private_Dirty"] == 116 * 1024
    assert values["Swap"] == 8 * 1024
    assert all(" " not in k for k in values)
    assert len(values) == 22


def test_parse_smaps_rollup_tolerates_garbage() -> None:
    assert procfs.parse_smaps_rollup("") == {}
    assert procfs.parse_smaps_rollup("Pss: lots kB\nnonsense\nRss: 4 kB") == {"Rss": 4096}


def test_read_process_gives_pss_and_private(tmp_path: Path) -> None:
    trees.add_process(
        tmp_path,
        42,
        comm="pointgroup",
        rss_kb=2000,
        pss_kb=900,
        private_clean_kb=100,
        private_dirty_kb=600,
        anon_kb=650,
    )
    reading = procfs.read_process(tmp_path, 42)
    assert reading.comm == "pointgroup"
    assert reading.pss_bytes == 900 * 1024
    assert reading.private_bytes == 700 * 1024
    assert reading.rss_bytes == 2000 * 1024
    assert reading.anon_bytes == 650 * 1024


def test_read_process_that_exited_is_gone(tmp_path: Path) -> None:
    with pytest.raises(procfs.ProcessGone):
        procfs.read_process(tmp_path, 7)


def test_kernel_thread_is_unreadable_not_zero(tmp_path: Path) -> None:
    trees.add_kernel_thread(tmp_path, 3)
    with pytest.raises(procfs.ProcessUnreadable, match="no Pss"):
        procfs.read_process(tmp_path, 3)


def test_read_own_process_for_real() -> None:
    import os

    reading = procfs.read_process(Path("/proc"), os.getpid())
    assert reading.pss_bytes > 0
    assert reading.rss_bytes >= reading.private_bytes > 0


def test_read_process_keeps_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    """prctl(PR_SET_NAME) takes any bytes; such a name must not stop a sample (the sidecar reads it too)."""
    trees.add_process(tmp_path, 42, comm="x")
    (tmp_path / "42" / "comm").write_bytes(b"py\xff\xfethon\n")
    assert procfs.read_process(tmp_path, 42).comm == "py\ufffd\ufffdthon"
