"""syslog(2) on this machine's real kernel: the READ_ALL format, no consuming, and the cursor live."""

from __future__ import annotations

import os
import uuid

import pytest

from podmortem.kernel import syslog as klog
from podmortem.kernel import syslog_cursor

pytestmark = pytest.mark.kernel


@pytest.fixture(autouse=True)
def _needs_syslog() -> None:
    try:
        klog.buffer_size()
    except OSError as exc:
        pytest.skip(f"needs syslog(2) (CAP_SYSLOG): {exc}")


def _write_kmsg(message: str) -> None:
    try:
        fd = os.open("/dev/kmsg", os.O_WRONLY)
    except OSError as exc:
        pytest.skip(f"needs a writable /dev/kmsg to inject a marker line: {exc}")
    try:
        os.write(fd, f"<6>{message}\n".encode())
    finally:
        os.close(fd)


def test_read_all_gives_prefixed_lines_and_consumes_nothing() -> None:
    first = klog.read_all().decode(errors="replace")
    assert 0 < len(first.encode()) <= klog.buffer_size()
    lines = [syslog_cursor.parse_line(raw) for raw in syslog_cursor.split_lines(first)]
    assert lines and all(line.prio is not None for line in lines)
    assert any(line.ts_us is not None for line in lines)
    # READ_ALL does not consume: the newest line is still there on the next read.
    assert syslog_cursor.split_lines(first)[-1] in klog.read_all().decode(errors="replace")


def test_the_cursor_finds_a_fresh_line_exactly_once() -> None:
    boot = "this-boot"
    cursor = syslog_cursor.end_cursor(klog.read_all().decode(errors="replace"), boot_id=boot)
    marker = f"podmortem-test-marker-{uuid.uuid4()}"
    _write_kmsg(marker)
    found = syslog_cursor.diff(klog.read_all().decode(errors="replace"), cursor, boot_id=boot)
    mine = [line for line in found.lines if line.message.endswith(marker)]
    assert len(mine) == 1 and mine[0].ts_us is not None
    again = syslog_cursor.diff(klog.read_all().decode(errors="replace"), found.cursor, boot_id=boot)
    assert not [line for line in again.lines if marker in line.message]
