"""Forms the fifth held-out set showed, built from their printers' sources and small hand-made inputs.

The torchrun agent's ``failed (exitcode: N)`` cut after its exit code, NumPy's ``_ArrayMemoryError``
named by its module path with a message in other words, an exception's type and message on lines of
their own (Django's error page), Volcano's ``Evict`` events, a tool's events table holding
node-problem-detector's ``OOMKilling``, a terminated state's fields alone (``yq`` of
``lastState.terminated``), zsh's numbered job report, and the GPU allocators' messages
(TensorFlow's stream executor, a TPU's HBM, PyTorch's caching allocator's tail) in a log.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podmortem.diagnosis import offline, pod_events, training_log
from podmortem.kernel import oom_parser

_pids = st.integers(min_value=2, max_value=4_194_304)


@given(st.sampled_from((-9, -6, 1)), st.sampled_from(("", "but  ", "[2023-04-23 10:00:00,000] ")))
def test_the_agents_failed_line_cut_after_its_exit_code(code: int, before: str) -> None:
    # torch/distributed/elastic/multiprocessing/api.py logs through the module's logger; Python logging's
    # default format is "%(levelname)s:%(name)s:%(message)s".
    line = f"{before}ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: {code})"
    child = training_log.child_failure(["me too.", line])
    assert child is not None and child.exit_code == code
    assert child.signal == (-code if code < 0 else None) and child.pid is None


def test_a_failed_exit_code_without_the_agents_logger_is_no_child_failure() -> None:
    assert training_log.child_failure(["the build failed (exitcode: -9) again"]) is None


@given(st.sampled_from(("numpy.core._exceptions.", "numpy._core._exceptions.", "")),
       st.sampled_from(("Unable to allocate 41.2 GB for array with form (172928, 32001)", "anything")))
def test_numpys_array_memory_error_named_by_its_module_path(module: str, message: str) -> None:
    line = f'the error "{module}_ArrayMemoryError: {message}" '
    found = training_log.python_exception(["I ran the API", line, "What can this be?"])
    assert found is not None and found.name == f"{module}_ArrayMemoryError"


@given(st.sampled_from(("MemoryError", "numpy.core._exceptions._ArrayMemoryError", "| MemoryError |")),
       st.integers(1, 999))
def test_an_exception_type_on_the_line_before_its_message(kind: str, mib: int) -> None:
    # Django's technical 500 page: "Exception Type" and "Exception Value" in cells of their own.
    lines = ["Request Method: | POST", kind,
             f"Unable to allocate {mib}. MiB for an array with shape (9131294, 2) and data type float64",
             "/srv/lib/python3.6/site-packages/numpy/lib/function_base.py in copy, line 775"]
    found = training_log.python_exception(lines)
    assert found is not None and found.name == kind.strip("| ")


def test_a_message_after_a_line_that_is_no_type_is_no_exception() -> None:
    lines = ["numpy said", "Unable to allocate 1.00 GiB for an array with shape (2,) and data type float64"]
    assert training_log.python_exception(lines) is None


_VOLCANO_ROWS = [
    "42s         Normal    Killing            pod/routine-driver           Stopping container spark",
    "42s         Warning   Evict              pod/routine-driver           Pod is evicted, because of {}",
    "41s         Warning   FailedScheduling   pod/urgent-driver            1/1 tasks in gang unschedulable",
]


@given(st.sampled_from(("preempt", "reclaim")))
def test_volcanos_evict_for_preempt_or_reclaim_is_a_preemption(action: str) -> None:
    rows = [row.format(action) for row in _VOLCANO_ROWS]
    assert pod_events.kind_of(rows)
    (pod,) = pod_events.pods_from_events(rows)
    assert pod["metadata"]["name"] == "routine-driver"
    assert pod["status"]["conditions"][0]["reason"] == "PreemptionByScheduler"


def test_volcanos_evict_for_another_reason_is_no_pods_end() -> None:
    rows = [row.format("shuffle") for row in _VOLCANO_ROWS]
    assert pod_events.pods_from_events(rows) == []


_TABLE = ("default         Warning    node3.164b58660f8d4590    2020-11-27T19:01:27+08:00   {}OOMKilling{}"
          "Out of memory: Kill process {} (stress) score 205 or sacrifice child Killed process {} (stress), "
          "UID 0, total-vm:826516kB, anon-rss:819296kB, file-rss:0kB, shmem-rss:0kB")


@given(_pids)
def test_oomkilling_as_a_cell_of_a_tools_events_table(pid: int) -> None:
    (record,) = oom_parser.parse_lines([_TABLE.format("", "            ", pid, pid) + "\n"])
    assert record.chosen is not None and record.chosen.pid == pid and record.scope == "global"


def test_oomkilling_in_prose_with_single_spaces_is_a_quote() -> None:
    line = _TABLE.format("", " ", 123, 123).replace("   OOMKilling", " OOMKilling")
    assert oom_parser.parse_lines([line + "\n"]) == []


_YQ = "$ kubectl get pod x -o yaml | yq '.status.containerStatuses[0].lastState.terminated'\n"


@given(st.sampled_from(("", _YQ)),
       st.sampled_from(("OOMKilled", "Error")), st.sampled_from((137, 1)))
def test_a_terminated_states_fields_alone(command: str, reason: str, code: int) -> None:
    text = (f"{command}containerID: containerd://{'ab' * 32}\nexitCode: {code}\n"
            f'finishedAt: "2025-12-17T10:56:44Z"\nreason: {reason}\nstartedAt: "2025-12-17T10:56:35Z"\n')
    assert offline.sniff(text) == "pod"
    (pod,) = offline.pods_from_document(text)
    (status,) = pod["status"]["containerStatuses"]
    terminated = next(v for v in status.values() if isinstance(v, dict))["terminated"]
    assert terminated["exitCode"] == code and terminated["reason"] == reason


def test_a_log_that_ends_with_an_exit_code_line_is_no_pod() -> None:
    assert offline.sniff("epoch 1\nepoch 2\nepoch 3\nepoch 4\nexitCode: 1\nreason: done\n") is None
    assert offline.sniff("exitCode: 1\nthen the trainer printed more\n") is None
    assert offline.sniff("Traceback (most recent call last):\n    exitCode: 137\nreason: OOMKilled\n") is None


@given(st.sampled_from(("", "+", "-")), _pids, st.integers(1, 99))
def test_zshs_numbered_job_killed(mark: str, pid: int, job: int) -> None:
    # Src/jobs.c printjob: "[%ld]  %c " then, long-listed, "%d " then sigmsg padded, then the job's text.
    line = f"[{job}]  {mark or ' '} {pid} killed     python3 convert.py"
    kill = training_log.shell_kill(["python3 convert.py --size 65B", "", line])
    assert kill is not None and kill.source.startswith("zsh-killed-job") and kill.pid == pid


@given(st.sampled_from(("32.00M", "2.96G", "512B")), st.integers(1, 2**40))
def test_tensorflows_driver_failed_to_allocate_is_a_gpu_oom(human: str, size: int) -> None:
    line = (f"2019-07-21 23:23:06.228049: E tensorflow/stream_executor/cuda/cuda_driver.cc:828] failed to "
            f"allocate {human} ({size} bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory")
    oom = training_log.cuda_oom(["failed to create cublas handle: CUBLAS_STATUS_NOT_INITIALIZED", line])
    assert oom is not None and oom.tried == size


def test_a_driver_allocation_that_failed_for_another_reason_is_no_oom() -> None:
    line = "E cuda_driver.cc:828] failed to allocate 2.96G (3179741184 bytes) from device: CUDA_ERROR_UNKNOWN"
    assert training_log.cuda_oom([line]) is None


def test_a_tpus_hbm_exhausted_is_a_device_oom() -> None:
    line = ("#XlaRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate "
            "4.39G. That was not possible. There are 2.30G free.; (0x0x0_HBM0)")
    oom = training_log.cuda_oom([line])
    assert oom is not None and oom.form == "tpu-hbm-oom"


@given(st.integers(1, 1023), st.integers(0, 7))
def test_the_caching_allocators_tail_alone(mib: int, gpu: int) -> None:
    line = (f"Tried to allocate {mib}.00 MiB (GPU {gpu}; 1.96 GiB total capacity; 1.24 GiB already "
            "allocated; 2.88 MiB free; 1.25 GiB reserved in total by PyTorch)")
    oom = training_log.cuda_oom([line])
    assert oom is not None and oom.tried == mib * 2**20

