"""Training-log forms built from their printing code's format strings, as people paste them.

PyTorch's DataLoader worker report with its final full stop dropped, a shell's ``Killed`` in
Markdown bold, zsh's job report of a SIGSEGV (Src/jobs.c printjob with signames2.awk's lower-case
``segmentation fault``), XLA's ``Out of memory allocating %d bytes.``, its cuMemAllocAsync allocator's
glog line, and a soft-wrapped XLA status in the older words (``Resource exhausted: ``).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podmortem.diagnosis import exit_causes, training_log

_pids = st.integers(min_value=2, max_value=4_194_304)
_bytes = st.integers(min_value=1, max_value=10**13)
_words = st.text("abcdefghijklmnopqrstuvwxyz_./-", min_size=1, max_size=20)
_progress = st.lists(st.integers(0, 10**6).map(lambda n: f"iter {n}: loss 0.{n % 97}"), max_size=5)


@given(_progress, _pids)
def test_a_dataloader_segfault_without_its_full_stop(before: list[str], pid: int) -> None:
    line = f"RuntimeError: DataLoader worker (pid {pid}) is killed by signal: Segmentation fault"
    facts = training_log.read([*before, line])
    found = exit_causes.segfault(exit_code=1, facts=facts)
    assert found is not None and found.code == "segfault" and str(pid) in found.message


@given(_progress, st.sampled_from(("**Killed**", "*Killed*", "***Killed***", "  **Killed**  ")))
def test_a_shell_killed_in_markdown_emphasis(before: list[str], killed: str) -> None:
    kill = training_log.shell_kill([*before, killed])
    assert kill is not None and kill.source == "shell-killed"


def test_killed_inside_words_or_bold_prose_is_no_report() -> None:
    for line in ("**Killed** by the OOM killer?", "NotKilled", "the job was **Killed** again"):
        assert training_log.shell_kill([line]) is None, line


@given(_progress, _pids, st.booleans(), st.lists(_words, min_size=1, max_size=4),
       st.sampled_from(("zsh: ", "{pid} ", "[1]    {pid} ", "[2]  + {pid} ")))
def test_zsh_segmentation_fault_job_reports(before: list[str], pid: int, core: bool, argv: list[str],
                                           lead: str) -> None:
    status = "segmentation fault (core dumped)" if core else "segmentation fault"
    line = f"{lead.format(pid=pid)}{status}  python {' '.join(argv)}"
    facts = training_log.read([*before, line])
    found = exit_causes.segfault(exit_code=1, facts=facts)
    assert found is not None and found.code == "segfault"


def test_a_segfault_report_before_a_traceback_is_not_the_end() -> None:
    lines = ["zsh: segmentation fault  python a.py", "Traceback (most recent call last):", "ValueError: x"]
    assert training_log.shell_segfault(lines) is None
    assert training_log.shell_segfault(["I got a segmentation fault yesterday"]) is None


_XLA_ERRORS = ("jaxlib.xla_extension.XlaRuntimeError: ", "jax.errors.JaxRuntimeError: ", "")


@given(_bytes, st.sampled_from(_XLA_ERRORS))
def test_xla_out_of_memory_allocating(size: int, exc: str) -> None:
    oom = training_log.cuda_oom([f"{exc}RESOURCE_EXHAUSTED: Out of memory allocating {size} bytes."])
    assert oom is not None and oom.tried == size and oom.form == "xla-oom-allocating"


@given(_bytes, _pids, st.integers(0, 99), st.sampled_from(("bytes: ", ": ")))
def test_xla_cumemallocasync_out_of_memory(size: int, tid: int, n: int, sep: str) -> None:
    # LOG(ERROR) << Name() << " cuMemAllocAsync failed to allocate " << num_bytes << " bytes: " << status
    line = (f"E1103 18:23:55.103160 {tid} gpu_cudamallocasync_allocator.cc:361] gpu_async_{n} "
            f"cuMemAllocAsync failed to allocate {size} {sep}RESOURCE_EXHAUSTED: : CUDA_ERROR_OUT_OF_MEMORY: "
            "out of memory").replace(" : RESOURCE", ": RESOURCE")
    oom = training_log.cuda_oom([line, " Reported by CUDA: Free memory/Total memory: 1/2"])
    assert oom is not None and oom.tried == size
    other = line.replace("CUDA_ERROR_OUT_OF_MEMORY: out of memory", "CUDA_ERROR_INVALID_VALUE: invalid")
    assert training_log.cuda_oom([other]) is None


@given(_bytes, st.data())
def test_an_old_xla_status_soft_wrapped_at_any_space(size: int, data: st.DataObject) -> None:
    message = (f"[1] 2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/python/"
               f"local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out of memory while "
               f"trying to allocate {size} bytes.")
    spaces = [i for i, c in enumerate(message) if c == " " and i > message.index("Resource")]
    cut = data.draw(st.sampled_from(spaces))
    oom = training_log.cuda_oom(["```", message[:cut + 1], message[cut + 1:], "```"])
    assert oom is not None and oom.tried == size
