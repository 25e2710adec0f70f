"""The syslog(2) follower on a recorded kernel buffer, and how ``auto`` picks the kernel log source."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from podmortem.agent.kernel_log import KernelLog, KernelLogState
from podmortem.agent.kmsg_follower import KmsgFollower
from podmortem.agent.metrics import AgentMetrics
from podmortem.agent.settings import AgentSettings
from podmortem.agent.syslog_follower import SyslogFollower
from podmortem.kernel import syslog_cursor
from podmortem.reports.evidence import KernelLogStatus
from podmortem.reports.oom_record import OomKillRecord

RECORDED = syslog_cursor.split_lines((Path(__file__).parent / "data/syslog-read-all-oom.txt").read_text())
#: The recorded buffer's second record (pid 18017) starts at its "invoked oom-killer" line.
SECOND = next(i for i, line in enumerate(RECORDED) if "invoked oom-killer" in line)
HISTORY = RECORDED[:SECOND]
DUMP = RECORDED[SECOND:]


class Kernel:
    """A kernel ring buffer of ``capacity`` lines, read whole as SYSLOG_ACTION_READ_ALL does."""

    def __init__(self, lines: list[str], *, capacity: int = 10_000) -> None:
        self.lines = list(lines)
        self.capacity = capacity
        self.error: OSError | None = None

    def write(self, lines: list[str]) -> None:
        self.lines.extend(lines)
        del self.lines[: max(0, len(self.lines) - self.capacity)]

    def read(self) -> bytes:
        if self.error is not None:
            raise self.error
        return "".join(line + "\n" for line in self.lines).encode()


class Harness:
    def __init__(self, tmp_path: Path, kernel: Kernel, *, boot_id: str = "boot-1") -> None:
        self.proc = tmp_path / "proc"
        (self.proc / "sys/kernel/random").mkdir(parents=True, exist_ok=True)
        (self.proc / "sys/kernel/random/boot_id").write_text(boot_id + "\n")
        self.state = tmp_path / "state/syslog-cursor.json"
        self.kernel = kernel
        self.records: list[OomKillRecord] = []
        self.statuses: list[KernelLogStatus] = []
        self.metrics = AgentMetrics(CollectorRegistry())
        self.changed = asyncio.Event()

    def _records(self, records: list[OomKillRecord]) -> None:
        self.records.extend(records)
        self.changed.set()

    def _status(self, status: KernelLogStatus) -> None:
        self.statuses.append(status)
        self.changed.set()

    async def until(self, done: Callable[[], object]) -> None:
        while not done():
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), timeout=10)

    def follower(self) -> SyslogFollower:
        return SyslogFollower(
            state_file=self.state,
            proc_root=self.proc,
            metrics=self.metrics,
            on_records=self._records,
            on_status=self._status,
            read=self.kernel.read,
            poll_s=0.01,
            retry_s=3600,
        )


def test_first_start_skips_history_then_reports_a_dump_once(tmp_path: Path) -> None:
    kernel = Kernel(HISTORY)
    h = Harness(tmp_path, kernel)
    follower = h.follower()
    follower.start()
    assert follower.poll() == 0 and h.records == []  # the earlier kill (pid 17924) is history
    kernel.write(DUMP)
    assert follower.poll() == len(DUMP)
    assert follower.poll() == 0  # quiet: the open record is complete
    assert [(r.victim_pid, r.task_memcg) for r in h.records] == [(18017, "/podmortem-test-4a6722ff345f")]
    assert h.records[0].missing == []
    saved = syslog_cursor.SyslogCursor.from_json(json.loads(h.state.read_text()))
    assert saved == syslog_cursor.end_cursor("".join(f"{x}\n" for x in kernel.lines), boot_id="boot-1")

    # A restart resumes after the saved cursor: nothing is reported twice.
    again = Harness(tmp_path, kernel)
    restarted = again.follower()
    restarted.start()
    assert restarted.poll() == 0 and again.records == []


def test_a_crash_mid_dump_rereads_the_whole_dump(tmp_path: Path) -> None:
    kernel = Kernel(HISTORY)
    h = Harness(tmp_path, kernel)
    follower = h.follower()
    follower.start()
    half = len(DUMP) // 2
    kernel.write(DUMP[:half])
    follower.poll()  # the kernel is still printing; no quiet point, so no cursor saved past it
    del follower  # a crash: no close()
    kernel.write(DUMP[half:])
    again = Harness(tmp_path, kernel)
    restarted = again.follower()
    restarted.start()
    restarted.poll()
    assert [r.victim_pid for r in again.records] == [18017]
    assert again.records[0].missing == []


def test_graceful_close_hands_over_and_saves(tmp_path: Path) -> None:
    kernel = Kernel(HISTORY)
    h = Harness(tmp_path, kernel)
    follower = h.follower()
    follower.start()
    kernel.write(DUMP)
    follower.close()
    assert [r.victim_pid for r in h.records] == [18017]
    follower.close()  # idempotent
    assert [r.victim_pid for r in h.records] == [18017]


def test_a_cursor_from_another_boot_reads_this_boots_whole_log(tmp_path: Path) -> None:
    kernel = Kernel(RECORDED)
    first = Harness(tmp_path, kernel, boot_id="boot-0")
    f = first.follower()
    f.start()
    f.close()
    rebooted = Harness(tmp_path, kernel, boot_id="boot-1")
    follower = rebooted.follower()
    follower.start()
    follower.poll()
    assert [r.victim_pid for r in rebooted.records] == [17924, 18017]


def test_a_wrap_past_the_cursor_is_reported(tmp_path: Path) -> None:
    kernel = Kernel(HISTORY[:5], capacity=len(DUMP))
    h = Harness(tmp_path, kernel)
    follower = h.follower()
    follower.start()
    kernel.write(HISTORY[5:] + DUMP)  # more than the buffer holds before the next poll
    follower.poll()
    follower.poll()
    assert [r.victim_pid for r in h.records] == [18017]
    assert follower.last_gap is not None and follower.last_gap.reason == "wrapped"
    assert follower.lost >= 1
    assert h.metrics.kernel_log_gaps._value.get() == 1


async def test_refused_syslog_is_reported_and_retried(tmp_path: Path) -> None:
    kernel = Kernel(HISTORY)
    kernel.error = PermissionError(1, "Operation not permitted (reading the kernel log needs CAP_SYSLOG)")
    h = Harness(tmp_path, kernel)
    follower = h.follower()
    task = asyncio.create_task(follower.run())
    try:
        await h.until(lambda: h.statuses)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert h.statuses[0].readable is False and "CAP_SYSLOG" in (h.statuses[0].error or "")


async def test_running_follower_picks_up_a_dump(tmp_path: Path) -> None:
    kernel = Kernel(HISTORY)
    h = Harness(tmp_path, kernel)
    follower = h.follower()
    task = asyncio.create_task(follower.run())
    try:
        await h.until(lambda: h.statuses)
        assert h.statuses[-1].readable is True
        kernel.write(DUMP)
        await h.until(lambda: h.records)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [r.victim_pid for r in h.records] == [18017]
    assert h.state.exists()


def _kernel_log(tmp_path: Path, source: str, read: object) -> KernelLog:
    settings = AgentSettings(
        kmsg_path=tmp_path / "no-kmsg",
        kernel_log_source=source,  # type: ignore[arg-type]
        state_dir=tmp_path / "state",
        proc_root=tmp_path,
    )
    return KernelLog(
        settings=settings,
        metrics=AgentMetrics(CollectorRegistry()),
        on_records=lambda records: None,
        on_status=lambda state: None,
        read_syslog=read,  # type: ignore[arg-type]
    )


def test_auto_falls_back_to_syslog_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="podmortem.agent.kernel_log")
    follower, error = _kernel_log(tmp_path, "auto", Kernel(HISTORY).read).choose()
    assert isinstance(follower, SyslogFollower) and error is None
    message = caplog.records[-1].getMessage()
    assert "kernel log" in message and "syslog(2)" in message and "no-kmsg" in message


def test_auto_prefers_a_readable_kmsg(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="podmortem.agent.kernel_log")
    kmsg = tmp_path / "no-kmsg"
    kmsg.write_text("6,1,1,-;hello\n")  # any readable file stands in for the device
    follower, _ = _kernel_log(tmp_path, "auto", Kernel(HISTORY).read).choose()
    assert isinstance(follower, KmsgFollower)
    assert "kernel log: reading" in caplog.records[-1].getMessage()


def test_auto_with_neither_source_says_why(tmp_path: Path) -> None:
    kernel = Kernel([])
    kernel.error = PermissionError(1, "syslog(2) action 10: Operation not permitted")
    follower, error = _kernel_log(tmp_path, "auto", kernel.read).choose()
    assert follower is None and error is not None
    assert "no-kmsg" in error and "syslog(2)" in error and "CAP_SYSLOG" in error


def test_explicit_sources(tmp_path: Path) -> None:
    assert isinstance(_kernel_log(tmp_path, "syslog", Kernel([]).read).choose()[0], SyslogFollower)
    assert isinstance(_kernel_log(tmp_path, "kmsg", Kernel([]).read).choose()[0], KmsgFollower)


async def test_the_kernel_log_reports_its_source_and_last_gap_with_each_status(tmp_path: Path) -> None:
    """The agent learns the source and the gap from the state handed to it, not by reaching back."""
    kernel = Kernel(HISTORY[:5], capacity=len(DUMP))
    states: list[KernelLogState] = []
    reported = asyncio.Event()

    def on_status(state: KernelLogState) -> None:
        states.append(state)
        reported.set()

    async def until(condition: Callable[[], bool]) -> None:
        while not condition():
            reported.clear()
            await reported.wait()

    settings = AgentSettings(kmsg_path=tmp_path / "no-kmsg", kernel_log_source="syslog",
                             state_dir=tmp_path / "state", proc_root=tmp_path, syslog_poll_s=0.01)
    kernel_log = KernelLog(settings=settings, metrics=AgentMetrics(CollectorRegistry()),
                           on_records=lambda records: None, on_status=on_status, read_syslog=kernel.read)
    task = asyncio.create_task(kernel_log.run())
    try:
        async with asyncio.timeout(10):
            await until(lambda: bool(states))
            assert states[0].source == "syslog" and states[0].status.readable and states[0].gap is None
            kernel.write(HISTORY[5:] + DUMP)  # more than the buffer holds before the next poll
            await until(lambda: any(s.gap for s in states))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    last = states[-1]
    assert last.source == "syslog" and last.status.lost >= 1 and last.gap is not None and "wrap" in last.gap
