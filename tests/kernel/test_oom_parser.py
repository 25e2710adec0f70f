"""The OOM parser on every text format, interleaved and cut-short records, and arbitrary input."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.kernel import synthetic
from tests.kernel.synthetic import SyntheticKill, SyntheticTask

from podmortem.kernel import oom_parser

FIXTURES = Path(__file__).parent.parent / "fixtures" / "oom-records"
REAL_KMSG = FIXTURES / "20-podmortem-v1-kmsg-fork-cow-6.18.log"


def _kill(**overrides: object) -> SyntheticKill:
    tasks = [
        SyntheticTask(4000, "python", 50_000, total_vm_pages=120_000),
        SyntheticTask(4010, "pt_data_worker", 30_000, total_vm_pages=120_000),
    ]
    kill = SyntheticKill(victim_pid=4000, tasks=tasks, anon_bytes=60_000 * 4096, limit_kb=250_000)
    for key, value in overrides.items():
        setattr(kill, key, value)
    return kill


@pytest.mark.parametrize("fmt", synthetic.FORMATS)
@pytest.mark.parametrize(("version", "era"), [(2, "new"), (1, "new"), (1, "old")])
def test_every_format_and_era_parses_to_the_truth(fmt: synthetic.Format, version: int, era: str) -> None:
    kill = _kill(cgroup_version=version, era=era)
    [record] = oom_parser.parse_lines(synthetic.render(kill, fmt))
    assert record.victim_pid == 4000
    assert record.constraint_effective == "CONSTRAINT_MEMCG"
    assert record.oom_memcg == kill.oom_memcg and record.task_memcg == kill.task_memcg
    assert [t.pid for t in record.tasks] == [4000, 4010]
    assert record.cgroup_version == version
    assert record.task_table_format == ("old" if era == "old" else "new")
    assert not record.partial, record.missing
    assert record.counters["memory"].limit_kb == 250_000
    block = record.stat_for(kill.task_memcg if era == "old" and version == 1 else kill.oom_memcg)
    assert block is not None
    key = "anon" if version == 2 else "rss"
    assert block.stat[key] == 60_000 * 4096  # bytes, whatever unit was printed
    expected_format = {"journal-quoted": "syslog"}.get(fmt, fmt)
    assert record.line_format == expected_format


def test_raw_kmsg_continuation_dictionary_lines_are_skipped() -> None:
    lines = synthetic.render(_kill(), "kmsg")
    with_dict = []
    for line in lines:
        with_dict.append(line)
        with_dict.append(" SUBSYSTEM=memory")
        with_dict.append(" DEVICE=+memcg:1")
    [record] = oom_parser.parse_lines(with_dict)
    assert not record.partial and len(record.tasks) == 2


def test_kmsg_escaped_newlines_split_into_lines() -> None:
    lines = synthetic.render(_kill(), "plain")
    start = lines.index(next(m for m in lines if m.startswith("Memory cgroup stats")))
    end = lines.index("Tasks state (memory values in pages):")
    joined = "\\x0a".join(lines[start + 1 : end])
    kmsg = [f"6,{i},{i * 10},-;{m}" for i, m in enumerate([*lines[: start + 1], joined, *lines[end:]])]
    [record] = oom_parser.parse_lines(kmsg)
    assert record.cgroup_stats[0].stat["anon"] == 60_000 * 4096


def test_interleaved_records_from_two_hosts_split_correctly() -> None:
    a = synthetic.render(_kill(host="node-a", victim_pid=4000), "syslog")
    b_kill = _kill(host="node-b", victim_pid=4010, container_id="cd" * 32)
    b = synthetic.render(b_kill, "syslog")
    noise = ["Mar  4 10:16:40 node-c kernel: eth0: link up", "Mar  4 10:16:40 node-a sshd[1]: Accepted key"]
    mixed = []
    for i in range(max(len(a), len(b))):
        mixed.extend(a[i : i + 1])
        mixed.append(noise[i % 2])
        mixed.extend(b[i : i + 1])
    records = oom_parser.parse_lines(mixed)
    by_host = {r.host: r for r in records}
    assert sorted(by_host) == ["node-a", "node-b"]
    assert by_host["node-a"].victim_pid == 4000 and by_host["node-b"].victim_pid == 4010
    assert by_host["node-b"].task_memcg == b_kill.task_memcg
    assert all(not r.partial and len(r.tasks) == 2 for r in records)


def test_consecutive_records_with_unrelated_lines_between() -> None:
    text = []
    for i in range(5):
        text += ["[ 100.0] usb 1-1: new high-speed USB device", "[ 100.1] EXT4-fs (sda1): mounted"]
        text += synthetic.render(_kill(victim_pid=4000 if i % 2 else 4010), "dmesg", t0=1000.0 + i * 60)
    records = oom_parser.parse_lines(text)
    assert [r.victim_pid for r in records] == [4010, 4000, 4010, 4000, 4010]
    assert all(not r.partial for r in records)


def test_records_without_header_split_on_printing_order() -> None:
    """Two headless records back to back (grep -A output): a part out of order starts the next."""
    one = [m for m in synthetic.render(_kill(), "plain") if "invoked oom-killer" not in m]
    other = _kill(victim_pid=4010)
    two = [m for m in synthetic.render(other, "plain") if "invoked oom-killer" not in m]
    records = oom_parser.parse_lines(one + two)
    assert [r.victim_pid for r in records] == [4000, 4010]
    assert all(r.missing == ["header"] for r in records)


def test_a_block_pasted_twice_is_one_record() -> None:
    """The same kill twice (a reply quoting the paste, a re-paste): a pid is killed once."""
    one = synthetic.render(_kill(), "dmesg")
    [record] = oom_parser.parse_lines(one + one)
    assert record.victim_pid == 4000 and not record.partial
    cut = [m for m in one if "invoked oom-killer" not in m]  # the second copy lacks its header
    [record] = oom_parser.parse_lines(one + cut)
    assert record.trigger_comm is not None and record.kernel_version is not None


def test_truncated_record_is_partial_and_keeps_what_it_has() -> None:
    lines = synthetic.render(_kill(), "dmesg")
    cut = next(i for i, m in enumerate(lines) if "Killed process" in m)
    truncated = [*lines[:cut], lines[cut][:70]]  # the Killed line cut mid-way
    [record] = oom_parser.parse_lines(truncated)
    assert record.partial
    assert record.victim_pid == 4000 and len(record.tasks) == 2


@pytest.mark.parametrize("cut", [5, 12, 20, 25])
def test_record_cut_anywhere_never_raises(cut: int) -> None:
    lines = synthetic.render(_kill(), "kmsg")[:cut]
    for record in oom_parser.parse_lines(lines):
        assert record.partial


def test_old_kernel_without_oom_kill_line() -> None:
    [record] = oom_parser.parse_lines(synthetic.render(_kill(cgroup_version=1, era="old"), "dmesg-T"))
    assert record.oom_kill is None and record.constraint_printed is None
    assert record.constraint_effective == "CONSTRAINT_MEMCG" and record.constraint_inferred
    assert record.chosen is not None and record.chosen.score == 999


def test_constraint_none_in_a_memcg_kill_is_inferred() -> None:
    [record] = oom_parser.parse_lines(synthetic.render(_kill(constraint_printed="CONSTRAINT_NONE"), "plain"))
    assert record.constraint_printed == "CONSTRAINT_NONE"
    assert record.constraint_effective == "CONSTRAINT_MEMCG"
    assert record.constraint_note is not None and "CONSTRAINT_NONE" in record.constraint_note


def test_oom_group_kills_are_deduplicated_by_pid() -> None:
    [record] = oom_parser.parse_lines(synthetic.render(_kill(oom_group=True), "kmsg"))
    assert [k.pid for k in record.killed] == [4000]
    assert record.oom_group_memcg is not None


def test_real_kmsg_capture() -> None:
    [record] = oom_parser.parse_text(REAL_KMSG.read_text())
    assert record.kmsg_seq == 418 and record.monotonic_s == pytest.approx(425.146217)
    assert record.victim_pid == 6054 and [t.pid for t in record.tasks] == [6054, 6055]
    [block] = record.cgroup_stats
    assert block.version == 1 and block.hierarchical and block.stat["total_rss"] == 133636096


def test_kmsg_sequence_gap_inside_a_record_marks_it_partial() -> None:
    lines = synthetic.render(_kill(), "kmsg")
    del lines[10]
    [record] = oom_parser.parse_lines(lines)
    assert "kmsg-gap" in record.missing


def test_streaming_yields_records_as_they_complete() -> None:
    lines = synthetic.render(_kill(), "dmesg", t0=100.0) + synthetic.render(_kill(), "dmesg", t0=200.0)
    seen = []
    for record in oom_parser.iter_records(iter(lines)):
        seen.append(record.monotonic_s)
    assert seen == [pytest.approx(100.0), pytest.approx(200.0)]


def test_varied_random_records() -> None:
    rng = random.Random(20250304)
    for i in range(200):
        kill = synthetic.random_kill(rng)
        fmt = synthetic.FORMATS[i % len(synthetic.FORMATS)]
        [record] = oom_parser.parse_lines(synthetic.render(kill, fmt, t0=1000.0 + i))
        assert record.victim_pid == kill.victim_pid
        assert [t.name for t in record.tasks] == [t.name for t in kill.tasks]
        assert record.constraint_effective == "CONSTRAINT_MEMCG"
        assert not record.partial


_KERNELISH = st.sampled_from(
    [
        "invoked oom-killer: gfp_mask=0xcc0",
        "Memory cgroup stats for /a:",
        "oom-kill:constraint=",
        "Killed process 1 (x) total-vm:",
        "[  pid  ]   uid  tgid total_vm      rss name",
        "[ 1] 0 1 2 3 4 5 6 x",
        "Tasks state (memory values in pages):",
        "memory: usage 1kB, limit 2kB, failcnt 3",
        "anon 12",
        "6,1,2,-;",
        "[ 12.5] ",
        "> ",
        "Jan  1 00:00:00 h kernel: ",
        "\\x0a",
        "\n",
        " ",
        ",task=x,pid=1,uid=0",
        "Tasks in /x are going to be killed due to memory.oom.group set",
        "oom_reaper: reaped process 1 (x), now",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_arbitrary_text(text: str) -> None:
    oom_parser.parse_text(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_KERNELISH, st.text(max_size=30)), max_size=60).map("".join))
def test_never_raises_on_kernel_like_fragments(text: str) -> None:
    for record in oom_parser.parse_text(text):
        record.model_dump_json()


@settings(max_examples=200, deadline=None)
@given(st.binary())
def test_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    oom_parser.parse_text(data.decode("utf-8", errors="replace"))


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=200), st.integers(min_value=0, max_value=5000))
def test_never_raises_on_a_real_record_cut_or_corrupted(cut: int, pos: int) -> None:
    text = REAL_KMSG.read_text()
    text = text[: len(text) * cut // 200]
    text = text[:pos] + "\x00\ufffd[" + text[pos:]
    oom_parser.parse_text(text)
