"""A GPU OOM is cuda-oom in every framework, and a shell's Killed is a SIGKILL of unknown cause.

Texts as TensorFlow, JAX/XLA, the CUDA runtime, cuBLAS, PyTorch's DataLoader and bash, zsh and dash
print them (podmortem.diagnosis.catalogue holds their format strings), read as a training log's
tail by the operator's rules: the verdict, the framework named, the numbers the message gives.
"""

from __future__ import annotations

import pytest

from podmortem.diagnosis import catalogue, exit_causes, training_log

_TF = [
    "2024-05-01 12:00:00.1: W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran "
    "out of memory trying to allocate 1.50GiB (rounded to 1610612736)requested by op Conv2D",
    "Traceback (most recent call last):",
    '  File "train.py", line 9, in <module>',
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
    "shape[64,256,56,56] and type float on /job:localhost/replica:0/task:0/device:GPU:1 by allocator "
    "GPU_1_bfc",
]
_JAX = ["jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
        "8000000000 bytes."]


def _oom(lines: list[str]) -> list[str]:
    return [f.code for f in exit_causes.cuda_oom(training_log.read(lines))]


def test_tensorflow_gpu_oom_names_the_framework_and_keeps_the_size() -> None:
    facts = training_log.read(_TF)
    (oom, *_) = exit_causes.cuda_oom(facts)
    assert oom.code == "cuda-oom"
    assert oom.evidence["framework"] == "TensorFlow" and oom.evidence["device"] == 1
    assert oom.evidence["tried_bytes"] == int(1.5 * 2**30)
    assert oom.message.startswith("TensorFlow could not allocate 1.5 GiB on GPU 1")


def test_jax_gpu_oom_keeps_the_bytes() -> None:
    (oom,) = exit_causes.cuda_oom(training_log.read(_JAX))
    assert oom.evidence["framework"] == "JAX/XLA" and oom.evidence["tried_bytes"] == 8_000_000_000


@pytest.mark.parametrize(("line", "framework"), [
    ("RuntimeError: CUDA error: out of memory", "CUDA runtime"),
    ("[rank1]: torch.AcceleratorError: CUDA error: out of memory", "CUDA runtime"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cuBLAS"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "cuDNN"),
])
def test_runtime_and_library_gpu_ooms_are_cuda_oom(line: str, framework: str) -> None:
    (oom,) = exit_causes.cuda_oom(training_log.read(["step 10", line]))
    assert oom.evidence["framework"] == framework and oom.evidence["tried_bytes"] is None


@pytest.mark.parametrize("lines", [
    # the host's allocator, not a GPU's
    ["ResourceExhaustedError: OOM when allocating tensor with shape[9000,9000] and type float on "
     "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu"],
    # TensorFlow's warning that a retry may succeed
    ["W bfc_allocator.cc:275] Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.19GiB with "
     "freed_by_count=0. The caller indicates that this is not a failure, but may mean that there could be "
     "performance gains if more memory were available."],
    ["CUDA error: device-side assert triggered"],
])
def test_what_is_no_gpu_oom(lines: list[str]) -> None:
    assert _oom(lines) == []


@pytest.mark.parametrize(("lines", "pid", "source"), [
    (["Epoch 3/10", " 47%|####7     | 235/500 [01:10<01:20,  3.3it/s]\rKilled"], None, "shell-killed"),
    (["loading shards", "Killed"], None, "shell-killed"),
    (["/bin/bash: line 1:  4242 Killed                  python train.py --epochs 3"], 4242,
     "bash-killed-line"),
    (["zsh: killed     python train.py"], None, "zsh-killed"),
    (["RuntimeError: DataLoader worker (pid 31337) is killed by signal: Killed. "], 31337,
     "torch-dataloader-killed"),
])
def test_a_reported_sigkill_is_sigkill_not_oom_with_what_to_check(
    lines: list[str], pid: int | None, source: str
) -> None:
    finding = exit_causes.shell_sigkill(exit_code=1, facts=training_log.read(lines))
    assert finding is not None and finding.code == "sigkill-not-oom"
    assert finding.evidence["pid"] == pid and finding.evidence["source"] == source
    assert "dmesg" in finding.action and "OOMKilled" in finding.action


@pytest.mark.parametrize("line", ["Process was Killed by the user", "Killed processes: 3", "NotKilled"])
def test_the_word_in_prose_is_no_report(line: str) -> None:
    assert exit_causes.shell_sigkill(exit_code=1, facts=training_log.read([line])) is None


def test_a_dataloader_worker_segfault_is_a_segfault_whatever_the_exit_code() -> None:
    lines = ["RuntimeError: DataLoader worker (pid 4242) is killed by signal: Segmentation fault. "]
    finding = exit_causes.segfault(exit_code=1, facts=training_log.read(lines))
    assert finding is not None and "pid 4242" in finding.message


@pytest.mark.parametrize(("key", "values", "signal"), [
    ("python-called-process-signal", ["python train.py", "SIGKILL", "9"], 9),
    ("python-called-process-exit", ["python train.py", "-11"], 11),
    ("deepspeed-exit-code", ["['/usr/bin/python', '-u', 'train.py']", "-7"], 7),
])
def test_the_launchers_words_read_as_the_catalogue_writes_them(
    key: str, values: list[str], signal: int
) -> None:
    """training_log's launcher patterns, checked against the catalogue's format strings."""
    it = iter(values)
    text = catalogue._PLACEHOLDER.sub(lambda _: next(it), catalogue.BY_KEY[key].format)
    child = training_log.child_signal(["Traceback (most recent call last):", text])
    assert child is not None and child.signal == signal, text


def test_a_kill_report_before_a_later_traceback_is_not_the_death() -> None:
    """A child the script ran was killed, and the script went on to fail of its own exception."""
    lines = ["Killed", "Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
             "ValueError: bad shape"]
    assert training_log.read(lines).shell_kill is None
