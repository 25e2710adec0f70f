"""CUDA OOM in a pod without hostPID: PyTorch prints the trainer itself as ``Process <host pid>``.

PyTorch's ``reportProcessMemoryInfo`` (c10/cuda/CUDACachingAllocator.cpp) writes, for each process
NVML lists on the device, ``Including non-PyTorch memory, this process has X memory in use. `` when
the pid NVML reports equals ``getpid()``, else ``Process N has X memory in use. ``. NVML reports host
pids, so in a pod's own pid namespace the trainer's line is the second form. These messages are built
as PyTorch builds them (its ``format_size``: two decimals, bytes/KiB/MiB/GiB).
"""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from podmortem.diagnosis import exit_causes, training_log

MIB = 1024**2
GIB = 1024**3


def format_size(n: int) -> str:
    """c10's ``format_size``."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= MIB:
        return f"{n / 1024:.2f} KiB"
    if n <= GIB:
        return f"{n / MIB:.2f} MiB"
    return f"{n / GIB:.2f} GiB"


def message(
    *, procs: list[tuple[int | None, int]], allocated: int, unallocated: int, tried: int = 2 * GIB,
    total: int = 79 * GIB, free: int = 300 * MIB,
) -> str:
    """``procs``: (pid, bytes in use), pid None for the one NVML pid equal to getpid()."""
    info = "".join(
        ("Including non-PyTorch memory, this process" if pid is None else f"Process {pid}")
        + f" has {format_size(used)} memory in use. "
        for pid, used in procs
    )
    return (
        "torch.OutOfMemoryError: CUDA out of memory. "
        f"Tried to allocate {format_size(tried)}. GPU 0 has a total capacity of {format_size(total)} of "
        f"which {format_size(free)} is free. {info}Of the allocated memory {format_size(allocated)} is "
        f"allocated by PyTorch, and {format_size(unallocated)} is reserved by PyTorch but unallocated. If "
        "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
        "expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def finding_message(oom: training_log.CudaOom) -> str:
    return exit_causes.cuda_oom(training_log.LogFacts(cuda_oom=oom))[0].message


def test_the_issue_case_the_trainer_alone_in_a_pod() -> None:
    """``Process 77213 has 77.93 GiB``: allocated + reserved is 77.51 GiB, the rest is the CUDA context."""
    text = message(procs=[(77213, int(77.93 * GIB))], allocated=int(76.80 * GIB), unallocated=int(0.71 * GIB))
    oom = training_log.cuda_oom([text])
    assert oom is not None
    assert oom.self_seen_as == 77213 and oom.other_processes == ()
    assert oom.process_in_use == round(77.93 * GIB)
    words = finding_message(oom)
    assert "other process(es)" not in words
    assert "printed as 'Process 77213'" in words and "another pid namespace" in words


def test_other_real_processes_stay_others() -> None:
    text = message(
        procs=[(4242, 3 * GIB), (77213, int(40.40 * GIB)), (5151, 512 * MIB)],
        allocated=int(39.50 * GIB), unallocated=int(0.50 * GIB),
    )
    oom = training_log.cuda_oom([f"[rank0]: {text}"])
    assert oom is not None and oom.self_seen_as == 77213
    assert oom.other_processes == ((4242, 3 * GIB), (5151, 512 * MIB))
    assert "2 other process(es) on the device holding 3.5 GiB" in finding_message(oom)


def test_with_hostpid_pytorch_says_this_process_and_nothing_is_guessed() -> None:
    """Another process whose figure happens to fit the reserve is left alone when PyTorch named this one."""
    text = message(
        procs=[(999, int(20.30 * GIB)), (None, int(20.20 * GIB))],
        allocated=int(19.80 * GIB), unallocated=int(0.10 * GIB),
    )
    oom = training_log.cuda_oom([text])
    assert oom is not None and oom.self_seen_as is None
    assert oom.process_in_use == round(20.20 * GIB) and oom.other_processes == ((999, round(20.30 * GIB)),)


def test_no_entry_fits_the_reserve_so_all_are_others() -> None:
    """A figure far above the reserve plus a context is not this process (its own line is absent)."""
    text = message(procs=[(31337, 30 * GIB)], allocated=10 * GIB, unallocated=GIB)
    oom = training_log.cuda_oom([text])
    assert oom is not None and oom.self_seen_as is None and oom.process_in_use is None
    assert oom.other_processes == ((31337, 30 * GIB),)
    assert "1 other process(es) on the device holding 30.0 GiB" in finding_message(oom)


_WINDOW = (-64 * MIB, training_log.CONTEXT_SLACK_BYTES + 64 * MIB)


@settings(max_examples=300, deadline=None)
@given(
    allocated=st.integers(min_value=GIB, max_value=140 * GIB),
    unallocated=st.integers(min_value=0, max_value=4 * GIB),
    context=st.integers(min_value=150 * MIB, max_value=700 * MIB),
    own_pid=st.integers(min_value=2, max_value=4_194_304),
    others=st.lists(
        st.tuples(
            st.integers(min_value=2, max_value=4_194_304), st.integers(min_value=MIB, max_value=80 * GIB)
        ),
        max_size=6,
    ),
    position=st.integers(min_value=0, max_value=6),
)
def test_the_trainer_seen_from_another_pid_namespace_is_never_another_process(
    allocated: int, unallocated: int, context: int, own_pid: int, others: list[tuple[int, int]], position: int
) -> None:
    reserve = allocated + unallocated
    # Others whose figure is not within the window of the reserve (else which is which is not knowable).
    assume(all(not (_WINDOW[0] <= used - reserve <= _WINDOW[1]) for _, used in others))
    assume(own_pid not in {pid for pid, _ in others})
    own = (own_pid, reserve + context)
    procs: list[tuple[int | None, int]] = [*others]
    procs.insert(min(position, len(procs)), own)
    oom = training_log.cuda_oom(["some earlier line", message(procs=procs, allocated=allocated,
                                                               unallocated=unallocated)])
    assert oom is not None
    assert oom.self_seen_as == own_pid
    assert oom.process_in_use is not None
    assert abs(oom.process_in_use - (reserve + context)) <= 6 * MIB  # printed to two decimals
    assert [pid for pid, _ in oom.other_processes] == [pid for pid, _ in others]
    words = finding_message(oom)
    assert f"printed as 'Process {own_pid}'" in words
    assert (f"{len(others)} other process(es)" in words) == bool(others)
