"""The limit the demo kubelet enforces itself where it cannot make a memory cgroup."""

from __future__ import annotations

import pytest

from podmortem_demo import watchdog

ROLLUP = """563bbb600000-7ffc7d855000 ---p 00000000 00:00 0                          [rollup]
Rss:                1740 kB
Pss:                 278 kB
Pss_Anon:            112 kB
Pss_File:            166 kB
Pss_Shmem:             4 kB
"""


def test_charged_pss_is_anonymous_and_shmem_only() -> None:
    assert watchdog.parse_charged_pss(ROLLUP) == (112 + 4) * 1024


def test_old_kernels_fall_back_to_pss() -> None:
    assert watchdog.parse_charged_pss("Rss: 10 kB\nPss: 7 kB\n") == 7 * 1024
    with pytest.raises(ValueError):
        watchdog.parse_charged_pss("Rss: 10 kB\n")


def test_a_gone_process_reads_as_none() -> None:
    assert watchdog.read_charged_pss(2**22 + 12345) is None
