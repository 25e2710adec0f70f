"""Forms the fourth held-out set showed, built from their printers' sources and small hand-made inputs.

Slurm's ``Detected N oom-kill event(s)`` (task/cgroup's check after a step), bash's ``Killed`` in a
translated locale (strsignal() through glibc's libc.mo), a DataLoader worker's report raised again
through a chained traceback, NumPy's and IPython's MemoryError forms without CPython's traceback
header, XLA's ``Failed to allocate request for``, TensorFlow 1.0-1.4's op_kernel OOM that names no
device, ``kubectl get events`` rows without their header, an init container killed at its limit,
describe's terminated state pasted alone or flattened, and a kernel line folded with backslashes.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podmortem.diagnosis import catalogue, exit_causes, offline, pod_events, termination, training_log
from podmortem.diagnosis.pasted import pasted_lines
from podmortem.kernel import log_lines, oom_parser

_pids = st.integers(min_value=2, max_value=4_194_304)
_progress = st.lists(st.integers(0, 10**6).map(lambda n: f"Epoch: [0][{n}/1736] Loss 0.{n % 97}"), max_size=5)
_steps = st.sampled_from(("191.batch", "7.0", "12.extern"))


@given(_progress, st.integers(1, 2000), _steps, st.booleans(), _pids)
def test_slurms_oom_kill_event_is_a_cgroup_limit_kill_over_the_shells_killed(
    before: list[str], events: int, step: str, new: bool, pid: int
) -> None:
    # task_cgroup_memory.c: "Detected %"PRIu64" oom-kill event(s) in step %s cgroup." (17.11-20.x), then
    # "in %ps%s. Some of your processes may have been killed by the cgroup out-of-memory handler."
    tail = (
        f"StepId={step} cgroup. Some of your processes may have been killed by the cgroup out-of-memory "
        "handler."
        if new
        else f"step {step} cgroup."
    )
    lines = [
        *before,
        f"/var/spool/slurmd/job1/slurm_script: line 28: {pid:5d} Killed                  python3 main.py",
        f"slurmstepd: error: Detected {events} oom-kill event(s) in {tail}",
    ]
    facts = training_log.read(lines)
    assert facts.shell_kill is not None
    found = exit_causes.batch_cgroup_oom(exit_code=1, facts=facts)
    assert (
        found is not None and found.code == "memcg-limit" and f"Detected {events} oom-kill" in found.message
    )


def test_no_slurm_line_no_cgroup_kill() -> None:
    facts = training_log.read(["Epoch 1", "Killed"])
    assert exit_causes.batch_cgroup_oom(exit_code=1, facts=facts) is None


@given(_progress, st.sampled_from(catalogue._GLIBC_SIGNAL_WORDS))
def test_bashs_killed_in_glibcs_translations(before: list[str], words: tuple[str, str, str | None]) -> None:
    _locale, killed, segv = words
    kill = training_log.shell_kill([*before, killed])
    assert kill is not None and kill.source.startswith("shell-killed-")
    if segv is not None:
        assert training_log.shell_segfault([*before, segv]) == segv


def test_translated_words_inside_prose_are_no_report() -> None:
    assert training_log.shell_kill(["进程已杀死了吗", "Der Prozess wurde Getötet, sagt er"]) is None


@given(_pids, st.sampled_from(("", "[rank0]: ")))
def test_a_dataloader_kill_raised_again_through_a_chained_traceback(pid: int, prefix: str) -> None:
    # torch/utils/data/_utils/signal_handling.py: the handler calls _error_if_any_worker_fails(), which
    # raises the C++ message as a RuntimeError in the main process; a trainer's own handler re-raises.
    lines = [
        f"{prefix}{x}"
        for x in (
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3.10/threading.py", line 324, in wait',
            "    _error_if_any_worker_fails()",
            f"RuntimeError: DataLoader worker (pid {pid}) is killed by signal: Killed. ",
            "",
            "The above exception was the direct cause of the following exception:",
            "",
            "Traceback (most recent call last):",
            '  File "train.py", line 9, in <module>',
            f"RuntimeError: DataLoader worker (pid(s) {pid}) exited unexpectedly",
        )
    ]
    kill = training_log.shell_kill(lines)
    assert kill is not None and kill.pid == pid and kill.source == "torch-dataloader-killed"


def test_a_kill_before_an_unchained_traceback_is_not_the_end() -> None:
    lines = ["Killed", "Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: x"]
    assert training_log.shell_kill(lines) is None


@given(
    st.sampled_from(
        (
            "numpy.core._exceptions._ArrayMemoryError",
            "numpy.core._exceptions.MemoryError",
            "numpy._core._exceptions._ArrayMemoryError",
        )
    ),
    st.integers(1, 999),
    st.sampled_from(("uint16", "float64")),
    st.booleans(),
)
def test_numpys_memory_error_without_its_traceback_header(
    name: str, gib: int, dtype: str, frame: bool
) -> None:
    message = f"Unable to allocate {gib}.0 GiB for an array with shape (176351, 176460) and data type {dtype}"
    lines = [
        "Hello, when i testing",
        *(['File "", line 739, in getCrop', "    x = np.pad(x)"] if frame else []),
        f"{name}: {message}",
        "how can i solve this ?",
    ]
    exc = training_log.python_exception(lines)
    assert exc is not None and exc.line == f"{name}: {message}" and exc.name == name


def test_numpys_words_in_prose_are_no_exception() -> None:
    assert (
        training_log.python_exception(
            ["it said Unable to allocate 3.00 GiB for an array with shape (3,) and data type int8"]
        )
        is None
    )


@given(st.sampled_from(("MemoryError", "KeyError", "ValueError")), st.sampled_from(("", "'x'", "bad value")))
def test_ipythons_traceback_names_its_exception_in_the_header(name: str, value: str) -> None:
    # IPython/core/ultratb.py VerboseTB: the type's name, "Traceback (most recent call last)" right-justified
    # to 75 columns; unindented frames ("<ipython-input-...> in <module>", "----> 3 ..."); "etype: evalue".
    header = name + "Traceback (most recent call last)".rjust(75 - len(name))
    lines = [
        header,
        "<ipython-input-3-b92fe8df242d> in <module>",
        "      1 filename = 'm.pkl'",
        "----> 3 model = pickle.load(open(filename, 'rb'))",
        "",
        f"{name}: {value}",
        "",
        "Please help.",
    ]
    exc = training_log.python_exception(lines)
    assert exc is not None and exc.line == f"{name}: {value}".strip()


@given(st.integers(1, 10**11), st.integers(0, 7))
def test_xlas_failed_to_allocate_request(size: int, device: int) -> None:
    human = f"{size / 2**30:.2f}GiB"
    line = (
        f"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for {human} "
        f"({size}B) on device ordinal {device}"
    )
    oom = training_log.cuda_oom(["...", line])
    assert oom is not None and oom.tried == size and oom.device == device and oom.framework == "JAX/XLA"


_OP = (
    "W tensorflow/core/framework/op_kernel.cc:1192] Resource exhausted: "
    "OOM when allocating tensor with shape[123008,500]"
)


@given(st.integers(0, 7), st.booleans())
def test_tensorflows_shape_only_oom_is_a_gpus_when_its_bfc_allocator_is_one(gpu: int, after: bool) -> None:
    bfc = (
        f"W tensorflow/core/common_runtime/bfc_allocator.cc:217] Allocator (GPU_{gpu}_bfc) ran out of memory "
        "trying to allocate 84.60MiB. The caller indicates that this is not a failure, but may mean that "
        "there could be performance gains if more memory is available."
    )
    lines = [_OP, bfc, "Traceback (most recent call last):"] if after else [bfc, "****", _OP]
    oom = training_log.cuda_oom(lines)
    assert oom is not None and oom.device == gpu and oom.tried is None and oom.framework == "TensorFlow"


def test_tensorflows_shape_only_oom_alone_names_no_gpu() -> None:
    assert training_log.cuda_oom(["step 3", _OP]) is None
    cpu = (
        "Allocator (cpu) ran out of memory trying to allocate 84.60MiB. The caller indicates that this is "
        "not a failure, but may mean that there could be performance gains if more memory is available."
    )
    assert training_log.cuda_oom([cpu, _OP]) is None


_ROWS = (
    "default       0s          Normal    Scheduled                 pod/podinfo-1            "
    "Successfully assigned "
    "default/podinfo-1 to node-a",
    "default       0s          Warning   FailedScheduling          pod/podinfo-2            "
    "0/3 nodes are available: "
    "2 Insufficient memory.",
    "default       0s          Normal    Killing                   pod/{name}    Stopping container pause",
    "default       0s          Normal    SuccessfulCreate          replicaset/x   Created pod: x-1",
)


@given(st.from_regex(r"[a-z][a-z0-9-]{2,30}[a-z0-9]", fullmatch=True), st.integers(0, 13), st.booleans())
def test_get_events_rows_without_their_header_tell_a_preemption(
    name: str, filler: int, namespace: bool
) -> None:
    preempted = (
        f"default       0s          Normal    Preempted                 pod/{name}    Preempted by "
        "default/podinfo-2 on node node-b"
    )
    rows = [*(_ROWS[i % 2] for i in range(filler)), preempted, *(r.format(name=name) for r in _ROWS[2:])]
    if not namespace:
        rows = [r.removeprefix("default       ") for r in rows]
    assert pod_events.kind_of(rows)
    pods = pod_events.pods_from_events(rows)
    (pod,) = [p for p in pods if p["metadata"]["name"] == name]
    assert pod["status"]["conditions"][0]["reason"] == "PreemptionByScheduler"


def test_get_events_rows_of_no_ending_are_not_a_pod_status() -> None:
    rows = [r.format(name="a") for r in _ROWS] * 4
    assert not pod_events.kind_of(rows)
    assert pod_events.pods_from_events(rows) == []


def _pod(init_policy: str | None) -> dict[str, object]:
    init = {"name": "init", **({"restartPolicy": init_policy} if init_policy else {})}
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"initContainers": [init], "containers": [{"name": "main"}]},
        "status": {
            "phase": "Failed",
            "initContainerStatuses": [
                {
                    "name": "init",
                    "containerID": "containerd://abc",
                    "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
                }
            ],
            "containerStatuses": [{"name": "main", "state": {"waiting": {"reason": "PodInitializing"}}}],
        },
    }


def test_an_init_container_killed_at_its_limit_is_the_pods_end() -> None:
    (t,) = termination.find(_pod(None))
    assert (t.container, t.reason, t.exit_code) == ("init", "OOMKilled", 137)


def test_a_native_sidecars_end_is_not_reported_as_the_pods() -> None:
    assert termination.find(_pod("Always")) == []


@given(st.sampled_from(("", "    ", "       ")), st.booleans(), st.sampled_from(("Last State", "State")))
def test_a_terminated_state_pasted_after_prose(indent: str, code: bool, state: str) -> None:
    text = "\n".join(
        [
            "Today the way to detect this is to look for the following:",
            "```",
            f"{indent}{state}:   Terminated",
            f"{indent}Reason:       OOMKilled",
            *([f"{indent}Exit Code:    137"] if code else []),
            "```",
        ]
    )
    assert offline.sniff(text) == "describe"
    (pod,) = offline.pods_from_describe(text)
    (cs,) = pod["status"]["containerStatuses"]
    end = cs["lastState" if state == "Last State" else "state"]["terminated"]
    assert end["reason"] == "OOMKilled" and end.get("exitCode") == (137 if code else None)


def test_a_terminated_state_among_a_logs_lines_or_fenced_with_them_is_no_describe() -> None:
    state = ["Last State:     Terminated", "  Reason:       OOMKilled"]
    assert offline.sniff("\n".join(["epoch 1 loss 0.3", "epoch 2 loss 0.2", *state])) is None
    assert offline.sniff("\n".join(["prose", "```", "epoch 2 loss 0.2", *state, "```"])) is None
    assert offline.fragment_kind(pasted_lines("the pod said\nReason:  OOMKilled\nthen it restarted")) is None


def test_backslash_continued_kernel_lines_are_joined_and_markdown_breaks_are_not() -> None:
    folded = ["a,\\\n", "    b,\\\n", "\tc\n", "d\\\n", "e\n"]
    assert list(log_lines.join_continued(folded)) == ["a,b,c\n", "d\\\n", "e\n"]


def test_a_summary_folded_with_backslashes_keeps_its_memcgs() -> None:
    scope = "docker-60ef727c9751aac9084702bca274544f94f1bb070ace95e8a79911c22b01a91d.scope"
    task = "/ecstasks.slice/ecstasks-488f.slice"
    lines = [
        "Apr 15 23:04:52 h kernel: head invoked oom-killer: gfp_mask=0x500cc2(GFP_HIGHUSER|__GFP_ACCOUNT), "
        "order=0, oom_score_adj=0",
        "Apr 15 23:04:52 h kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),\\",
        f"    cpuset={scope},mems_allowed=0,\\",
        f"    oom_memcg={task},\\",
        f"    task_memcg={task}/{scope},\\",
        "    task=tail,pid=51947,uid=0",
        "Apr 15 23:04:52 h kernel: Memory cgroup out of memory: Killed process 51947 (tail) "
        "total-vm:459896kB, "
        "anon-rss:458176kB, file-rss:772kB, shmem-rss:0kB, UID:0 pgtables:948kB oom_score_adj:0",
    ]
    (record,) = oom_parser.parse_lines(line + "\n" for line in lines)
    assert record.oom_memcg == task and record.victim_pid == 51947
