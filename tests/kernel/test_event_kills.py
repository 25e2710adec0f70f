"""node-problem-detector's OOMKilling Events read as the kernel's kill lines they carry.

The lines are built from the kernel's format strings (mm/oom_kill.c) as node-problem-detector's
``kernel-monitor.json`` rules match them (``Killed process \\d+ (.+) total-vm:\\d+kB, anon-rss:\\d+kB,
file-rss:\\d+kB.*``; before 4.19 ``Kill process \\d+ (.+) score \\d+ or sacrifice child``), inside
the forms kubectl prints an Event in: ``get events`` rows, describe's Events row, an event dump.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem.kernel import oom_parser

_pids = st.integers(min_value=2, max_value=4_194_304)
_comms = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=15)
_kb = st.integers(min_value=0, max_value=10**9)


def _killed(pid: int, comm: str, vm: int, anon: int, memcg: bool) -> str:
    head = "Memory cgroup out of memory: " if memcg else "Out of memory: "
    return (f"{head}Killed process {pid} ({comm}) total-vm:{vm}kB, anon-rss:{anon}kB, file-rss:0kB, "
            "shmem-rss:0kB")


_ROWS = (
    "default   {age}   Warning   OOMKilling   node/{node}   {msg}",
    "{age}       Warning   OOMKilling                    node/{node}    {msg}",
    "  Warning  OOMKilling  {age} (x3 over 9m)  kernel-monitor, {node}  {msg}",
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(_pids, _comms, _kb, _kb, st.booleans(), st.sampled_from(_ROWS)),
             min_size=1, max_size=6, unique_by=lambda k: k[0]),
)
def test_events_rows_alone_are_the_kills_they_carry(
    kills: list[tuple[int, str, int, int, bool, str]],
) -> None:
    lines = [row.format(age="8m54s", node="ip-10-2-112-20.ec2.internal",
                        msg=_killed(pid, comm, vm, anon, memcg))
             for pid, comm, vm, anon, memcg, row in kills]
    records = oom_parser.parse_lines(["LAST SEEN   TYPE      REASON       OBJECT      MESSAGE", *lines])
    assert [(r.victim_pid, r.victim_comm) for r in records] == [(k[0], k[1]) for k in kills]
    assert [r.victim.anon_rss_kb if r.victim else None for r in records] == [k[3] for k in kills]


@settings(max_examples=100, deadline=None)
@given(_pids, _comms, _pids, _comms, st.booleans())
def test_an_event_dump_with_the_old_two_line_pattern(chosen: int, chosen_comm: str, pid: int, comm: str,
                                                     combined: bool) -> None:
    note = "(combined from similar events): " if combined else ""
    text = (
        "Level:Warning \nKind:Node \nNamespace:default \nName:node-a.161d4864605be234 \nReason:OOMKilling \n"
        "Timestamp:2020-07-01 10:04:39 +0800 CST \n"
        f"Message:{note}Memory cgroup out of memory: Kill process {chosen} ({chosen_comm}) score 2366 or "
        f"sacrifice child\nKilled process {pid} ({comm}) total-vm:5870996kB, anon-rss:101048kB, "
        "file-rss:40932kB, shmem-rss:0kB\n"
    )
    (record,) = oom_parser.parse_text(text)
    assert (record.victim_pid, record.victim_comm) == (pid, comm)
    assert record.chosen is not None and record.chosen.pid == chosen


@given(_pids, _comms)
def test_the_choice_line_alone_names_no_victim(pid: int, comm: str) -> None:
    """Only the kernel's choice reached the Event: a child may have died instead (kills counted, no pid)."""
    row = (f"default   54m    Warning   OOMKilling  node/ncn-w003  Memory cgroup out of memory: Kill process "
           f"{pid} ({comm}) score 1966 or sacrifice child")
    (record,) = oom_parser.parse_lines([row])
    assert record.victim_pid is None and record.chosen is not None and record.chosen.pid == pid


def test_with_the_kernel_record_the_events_add_nothing() -> None:
    kernel = "[ 100.000000] " + _killed(4242, "python", 100, 50, True)
    event = _ROWS[0].format(age="2m", node="node-a", msg=_killed(4242, "python", 100, 50, True))
    other = _ROWS[0].format(age="1m", node="node-a", msg=_killed(777, "java", 100, 50, True))
    records = oom_parser.parse_lines([event, kernel, other])
    assert [(r.victim_pid, r.line_format) for r in records] == [(4242, "dmesg")]


def test_an_event_dump_and_a_describe_row_of_another_kill_are_two_kills() -> None:
    """Without the kernel's own lines each Event is a kill, whatever form kubectl printed it in."""
    dump = ["Reason:OOMKilling ", f"Message:{_killed(3504804, 'kubectl', 100, 50, True)}"]
    old = "Killed process 11726, UID 498, (mysqld) total-vm:7823732kB, anon-rss:2539268kB, file-rss:768kB"
    row = _ROWS[2].format(age="95s", node="node-a", msg=old)
    records = oom_parser.parse_lines([*dump, "", row])
    assert [(r.victim_pid, r.victim_comm) for r in records] == [(3504804, "kubectl"), (11726, "mysqld")]


def test_what_is_no_event_of_the_node() -> None:
    msg = _killed(4242, "python", 100, 50, True)
    for line in (
        f"`Warning OOMKilling  {msg}`",  # prose naming the reason, no object or source
        f"May 19 18:14:43 node-a node-problem-detector[4208]: Reason:OOMKilling Message:{msg}",
    ):
        assert oom_parser.parse_lines([line]) == [], line
