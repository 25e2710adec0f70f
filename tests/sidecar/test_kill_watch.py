"""Pairing rises of the OOM-kill counter with vanished processes, in every order they can be seen."""

from __future__ import annotations

from podmortem.sidecar import kill_watch
from podmortem.sidecar.kill_watch import KillWatch
from podmortem.sidecar.sampling import ProcessSample

TRAINER = ProcessSample(12, "python", 3000, "trainer", ppid=1)
WORKER = ProcessSample(40, "pt_data_worker", 4000, "worker", ppid=12)  # PSS larger: half the trainer's pages
OTHER = ProcessSample(41, "pt_data_worker", 500, "worker", ppid=12)


def _watch(*processes: ProcessSample, counter: int = 0) -> KillWatch:
    watch = KillWatch()
    watch.saw(processes)
    assert watch.observe(running={p.pid for p in processes}, counter=counter, now=0.0) is None
    return watch


def test_a_rise_with_a_process_gone_is_a_kill_of_the_largest_gone() -> None:
    watch = _watch(TRAINER, WORKER, OTHER)
    kill = watch.observe(running={12}, counter=1, now=1.0)
    assert kill is not None
    assert kill.victim == WORKER and kill.gone == (40, 41)
    assert (kill.counter_before, kill.counter_after, kill.noticed_at) == (0, 1, 1.0)


def test_processes_gone_with_their_parent_died_with_it_and_are_not_the_victim() -> None:
    watch = _watch(TRAINER, WORKER, OTHER)
    kill = watch.observe(running=set(), counter=1, now=1.0)
    assert kill is not None and kill.victim == TRAINER and kill.gone == (12, 40, 41)


def test_the_counter_up_before_the_victim_has_exited_is_paired_with_the_next_to_go() -> None:
    watch = _watch(TRAINER, WORKER)
    assert watch.observe(running={12, 40}, counter=1, now=1.0) is None
    kill = watch.observe(running={12}, counter=1, now=1.1)
    assert kill is not None and kill.victim == WORKER and kill.counter_before == 0


def test_an_exit_with_no_kill_counted_is_no_kill_unless_counted_within_the_window() -> None:
    watch = _watch(TRAINER, WORKER, OTHER)
    assert watch.observe(running={12, 41}, counter=0, now=1.0) is None  # a worker finished
    assert watch.observe(running={12, 41}, counter=0, now=1.0 + kill_watch.PAIRING_WINDOW_S + 1) is None
    assert watch.observe(running={12}, counter=0, now=20.0) is None
    late = watch.observe(running={12}, counter=1, now=21.0)  # counted late: the one that went last
    assert late is not None and late.victim == OTHER
    assert watch.kills == [late]


def test_kills_before_the_first_reading_are_not_the_sidecars() -> None:
    watch = KillWatch()
    watch.saw((TRAINER,))
    assert watch.observe(running=set(), counter=5, now=0.0) is None
    assert (watch.first_counter, watch.counter) == (5, 5)


def test_an_unreadable_counter_pairs_nothing_and_keeps_the_gone() -> None:
    watch = _watch(TRAINER, WORKER)
    assert watch.observe(running={12}, counter=None, now=1.0) is None
    kill = watch.observe(running={12}, counter=2, now=1.5)
    assert kill is not None and kill.victim == WORKER and kill.counter_after == 2


def test_a_victim_without_pss_loses_to_one_with() -> None:
    unread = ProcessSample(50, "python", None, "worker", ppid=1)
    assert kill_watch.choose_victim([unread, OTHER]) == OTHER
    assert kill_watch.choose_victim([unread]) == unread


def test_a_rise_read_alone_is_paired_even_when_the_look_after_cannot_read_the_counter() -> None:
    # An exit wakes the sidecar; the counter read at once has the rise; the look after it finds the
    # trainer gone and the cgroup removed by the runtime.
    watch = _watch(TRAINER, WORKER)
    watch.counter_read(1)
    kill = watch.observe(running=set(), counter=None, now=1.0)
    assert kill is not None and kill.victim == TRAINER
    assert (kill.counter_before, kill.counter_after) == (0, 1)


def test_a_counter_read_alone_with_nothing_gone_waits_for_a_process_to_go() -> None:
    watch = _watch(TRAINER, WORKER)
    watch.counter_read(1)
    watch.counter_read(None)  # unreadable: changes nothing
    assert watch.observe(running={12, 40}, counter=None, now=1.0) is None
    kill = watch.observe(running={12}, counter=None, now=1.2)
    assert kill is not None and kill.victim == WORKER and kill.counter_before == 0


def test_no_rise_and_no_counter_is_no_kill() -> None:
    watch = _watch(TRAINER, WORKER)
    watch.counter_read(0)
    assert watch.observe(running=set(), counter=None, now=1.0) is None
    assert watch.kills == []
