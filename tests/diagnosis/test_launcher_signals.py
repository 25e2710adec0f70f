"""A launcher's child killed by a signal: torchrun's agent and summary, ``torch.distributed.launch``'s
``CalledProcessError``, DeepSpeed's launcher.

The texts are built the way their sources build them: torchrun's agent line
(``torch/distributed/elastic/multiprocessing/api.py``, ``"failed (exitcode: %s) local_rank: %s (pid: %s)
of binary: %s"``), the ``ChildFailedError`` summary (``errors/error_handler``'s templates of torch 1.9
and >= 1.10: ``exitcode : -9 (pid: N)``, ``error_file``, ``traceback : Signal 9 (SIGKILL) received by
PID N``), and CPython's own ``subprocess.CalledProcessError.__str__``. The real posts are the records of
``tests/fixtures/corpus-new`` (their sidecars name the threads).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podmortem.diagnosis import job_root_cause as jrc
from podmortem.diagnosis import termination, training_log, verdicts
from podmortem.reports.failure import FailureReport

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus-new"
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "training-logs"
#: The verdict a launcher's child killed by each signal gives; any other signal or exit adds none.
BY_SIGNAL = {7: "shm-full", 9: "sigkill-not-oom", 11: "segfault"}
NAMES = training_log.SIGNAL_NAMES


def pod(exit_code: int = 1, reason: str = "Error") -> dict[str, Any]:
    term = {"exitCode": exit_code, "reason": reason, "containerID": "containerd://c1",
            "finishedAt": "2024-05-01T12:00:00Z"}
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"nodeName": "n1", "containers": [{"name": "trainer"}]},
        "status": {"containerStatuses": [{"name": "trainer", "state": {"terminated": term}}]},
    }


def report(tail: list[str], exit_code: int = 1, reason: str = "Error") -> FailureReport:
    [t] = termination.find(pod(exit_code, reason))
    return verdicts.diagnose_termination(
        termination=t, evidence=None, last_line_ns=None, stale_after_s=600, log_tail=tail
    )


def corpus(name: str) -> list[str]:
    # As the CLI reads a log: its last 50 lines.
    return next(CORPUS.glob(f"{name}-*.log")).read_text().splitlines()[-50:]


# -- the records -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "verdict", "pid"),
    [
        ("136", "sigkill-not-oom", 14750),  # ChildFailedError summary, accelerate's deepspeed launcher
        ("137", "sigkill-not-oom", 2630),  # glog agent line, summary cut before its Root Cause
        ("138", "sigkill-not-oom", 36071),  # summary transcribed from a screenshot, fields run together
        ("139", "sigkill-not-oom", 812917),  # agent SIGTERMs the siblings, then "failed (exitcode: -9)"
        ("140", "sigkill-not-oom", 31631),  # agent line glued to a progress bar after a Chinese label
        ("171", "segfault", None),  # torch.distributed.launch: CalledProcessError died with SIGSEGV
        ("170", "segfault", 3182701),
        ("172", "segfault", 5528),  # the agent's "forcefully exitting via 9" of siblings is not the cause
        ("181", "segfault", 28773),
        ("182", "segfault", 50837),
        ("183", "segfault", 15048),
        ("184", "segfault", 1416),
    ],
)
def test_corpus_records_of_a_child_killed_by_a_signal(record: str, verdict: str, pid: int | None) -> None:
    tail = corpus(record)
    child = training_log.read(tail).child_signal
    assert child is not None and child.pid == pid
    r = report(tail)
    assert r.verdict == verdict
    assert r.finding("python-exception") is None  # the launcher's own traceback only reports the death
    if verdict == "sigkill-not-oom":
        f = r.findings[0]
        assert f.evidence["signal"] == 9 and f.evidence["pid"] == pid
        assert "SIGKILL" in f.message and "OOM" in f.message


def test_the_flattened_summary_reads_its_fields() -> None:
    child = training_log.child_failure(corpus("138"))
    assert child is not None
    assert (child.rank, child.local_rank, child.exit_code, child.pid, child.signal) == (2, 2, -9, 36071, 9)
    quoted = training_log.child_failure((LOGS / "childfailed-sigkill-quoted.log").read_text().splitlines())
    assert quoted is not None and (quoted.rank, quoted.local_rank, quoted.signal) == (0, 0, 9)
    assert quoted.host == "ip-119-181-1-31.ec2.internal" and quoted.time == "2024-07-25_12:48:53"
    assert report((LOGS / "childfailed-sigkill-quoted.log").read_text().splitlines()).verdict == (
        "sigkill-not-oom"
    )


@pytest.mark.parametrize(
    ("block", "signal"),
    [
        # the exitcode field lost in a transcription: the summary's message still names the signal
        (["Root Cause (first observed failure):", "[0]:", "rank 1 (local rank: 1) exit c0de: ?? (pid 77)",
          "traceback : Signal 9 (SIGKILL) received by PID 77", "====="], 9),
        # torch 1.9: ``Root Cause:`` and a quoted ``msg:``
        (["Root Cause:", "[0]:", "  time: 2021-07-01_07:37:24", "  rank: 0 (local_rank: 0)",
          '  msg: "Signal 11 (SIGSEGV) received by PID 26398"', "====="], 11),
    ],
)
def test_the_summarys_signal_message_alone(block: list[str], signal: int) -> None:
    child = training_log.child_failure(block)
    assert child is not None and (child.signal, child.exit_code) == (signal, -signal)
    assert report(block).verdict == BY_SIGNAL[signal]


def test_a_worker_that_exited_of_itself_is_no_signal() -> None:
    tail = (LOGS / "childfailed-summary.log").read_text().splitlines()
    child = training_log.child_failure(tail)
    assert child is not None and child.exit_code == 1 and child.signal is None
    assert training_log.child_signal(tail) is None


def test_the_sigkilled_worker_is_this_pods_own_cause_not_a_consequence_of_the_agents_sigterms() -> None:
    def facts(lines: tuple[str, ...], verdict: str | None) -> jrc.PodFacts:
        return jrc.PodFacts(pod="w", container="c", rank=0, exit_code=1, reason="Error", finished_at=None,
                            last_line_at=None, verdict=verdict, summary=None, last_lines=lines)

    assert jrc.peer_evidence(facts(tuple(corpus("139")), "sigkill-not-oom")) is None
    # a worker that exited 1 after the agent's SIGTERMs stays a consequence, as before
    sigterm = tuple((LOGS / "torchrun-sigterm.log").read_text().splitlines())
    assert jrc.peer_evidence(facts(sigterm, None)) is not None
    # an NCCL timeout is a peer's failure whatever the local worker died of
    nccl = tuple((LOGS / "nccl-watchdog-torch25.log").read_text().splitlines()) + tuple(corpus("139"))
    line = jrc.peer_evidence(facts(nccl, "sigkill-not-oom"))
    assert line is not None and "Watchdog caught collective operation timeout" in line


# -- more specific causes still win ----------------------------------------------------------------


def test_a_cuda_oom_wins_over_the_agents_signal() -> None:
    tail = (LOGS / "cuda-oom-expandable.log").read_text().splitlines() + corpus("137")
    assert report(tail).verdict == "cuda-oom"


def test_the_kubelets_oomkilled_and_exit_137_win_over_the_log() -> None:
    assert report(corpus("136"), 137, "OOMKilled").verdict == "memcg-limit"
    r = report(corpus("171"), 137)
    assert r.verdict == "sigkill-not-oom" and r.findings[0].evidence["exit_code"] == 137


def test_sigabrt_of_an_nccl_watchdog_is_no_signal_verdict() -> None:
    tail = [*(LOGS / "nccl-watchdog-torch25.log").read_text().splitlines(),
            "E0101 00:00:00.000000 1 torch/distributed/elastic/multiprocessing/api.py:869] failed "
            "(exitcode: -6) local_rank: 0 (pid: 42) of binary: /usr/bin/python3"]
    facts = training_log.read(tail)
    assert facts.child_signal is not None and facts.child_signal.signal == 6
    assert report(tail).verdict is None


# -- the formats, generated ------------------------------------------------------------------------

#: One-line text as a log holds it: no line breaks (Python's splitlines ones included).
_LINE_CHARS = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp"))
line_text = st.text(_LINE_CHARS, max_size=40)
pids = st.integers(1, 4_194_304)
ranks = st.integers(0, 1023)
#: What a worker ends with: killed by a signal (torchrun's negative exit code), or an exit of its own.
exits = st.one_of(st.sampled_from([-9, -11, -7, -6, -15, -1, -2, -4, -8, -13]), st.integers(1, 255))
binaries = st.one_of(
    st.sampled_from(["/usr/bin/python3", "/opt/conda/bin/python3.8", "/root/miniconda3/bin/python"]),
    line_text.map(lambda s: "/" + s.strip()),
)


@st.composite
def agent_prefixes(draw: st.DrawFn) -> str:
    """What stands before the agent's message: a logging or glog prefix, a redrawn progress bar, a label."""
    logger = draw(st.sampled_from([
        "",
        "ERROR:torch.distributed.elastic.multiprocessing.api:",
        "E0325 20:57:27.620000 2606 torch/distributed/elastic/multiprocessing/api.py:869] ",
        "E1119 08:26:02.715000 28705 site-packages/torch/distributed/elastic/multiprocessing/api.py:882] ",
        "[2024-05-01 12:00:00,000] torch.distributed.elastic.multiprocessing.api: [ERROR] ",
    ]))
    glued = draw(st.sampled_from([
        "",
        "Loading checkpoint shards:  57% 4/7 [00:40<00:29,  9.96s/it]",
        "\r 12%|#2        | 120/1000 [00:10<01:13, 12.0it/s]\r 13%|#3        | 130/1000",
        "错误信息：",
    ]))
    return draw(line_text) + glued + logger


def agent_line(prefix: str, code: int, local_rank: int, pid: int, binary: str) -> str:
    return f"{prefix}failed (exitcode: {code}) local_rank: {local_rank} (pid: {pid}) of binary: {binary}"


def process_failure(idx: int, code: int, rank: int, local_rank: int, pid: int, *, old: bool) -> list[str]:
    """``_FAILURE_FORMAT_TEMPLATE`` of torch >= 1.10, or 1.9's (``msg:`` quoted, no host)."""
    message = (f"Signal {-code} ({NAMES.get(-code, f'signal {-code}')}) received by PID {pid}" if code < 0
               else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    if old:
        return [f"[{idx}]:", "  time: 2021-07-01_07:37:24", f"  rank: {rank} (local_rank: {local_rank})",
                f"  exitcode: {code} (pid: {pid})", "  error_file: <N/A>", f'  msg: "{message}"']
    return [f"[{idx}]:", "  time      : 2025-05-21_15:43:03", "  host      : trainer-worker-0",
            f"  rank      : {rank} (local_rank: {local_rank})", f"  exitcode  : {code} (pid: {pid})",
            "  error_file: <N/A>", f"  traceback : {message}"]


def summary(root: list[str], others: list[list[str]], *, old: bool, width: int) -> list[str]:
    """``_MSG_FORMAT_TEMPLATE`` of torch >= 1.10 (Failures, then Root Cause), or 1.9's."""
    rest = [line for other in others for line in other] or ["  <NO_OTHER_FAILURES>"]
    if old:
        return ["*" * width, "train.py FAILED", "=" * width, "Root Cause:", *root, "=" * width,
                "Other Failures:", *rest, "*" * width]
    return ["=" * width, "train.py FAILED", "-" * width, "Failures:", *rest, "-" * width,
            "Root Cause (first observed failure):", *root, "=" * width]


TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/usr/local/bin/torchrun", line 8, in <module>',
    "    sys.exit(main())",
    '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 250, in '
    "launch_agent",
    "    raise ChildFailedError(",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
]


def expected(code: int, with_traceback: bool) -> str | None:
    if code < 0 and -code in BY_SIGNAL:
        return BY_SIGNAL[-code]
    return "python-exception" if with_traceback else None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=agent_prefixes(),
    code=exits,
    local_rank=ranks,
    rank=ranks,
    pid=pids,
    binary=binaries,
    siblings=st.lists(pids, max_size=3),
    others=st.lists(st.tuples(exits, ranks, pids), max_size=3),
    form=st.sampled_from(["agent", "summary", "summary-old", "summary-flat", "both"]),
    with_traceback=st.booleans(),
    rank_prefix=st.sampled_from(["", "[rank0]: ", "[default0]:"]),
)
def test_torchrun_agent_and_summary_generated(
    prefix: str, code: int, local_rank: int, rank: int, pid: int, binary: str, siblings: list[int],
    others: list[tuple[int, int, int]], form: str, with_traceback: bool, rank_prefix: str,
) -> None:
    agent = "WARNING:torch.distributed.elastic.multiprocessing.api:"
    lines = [f"{agent}Sending process {s} closing signal SIGTERM" for s in siblings]
    lines += [f"{agent}Unable to shutdown process {s} via 15, forcefully exitting via 9" for s in siblings]
    if form in ("agent", "both"):
        lines.append(agent_line(prefix, code, local_rank, pid, binary))
    if with_traceback:
        lines += TRACEBACK
    if form != "agent":
        old = form == "summary-old"
        # the other failures: ranks the agent stopped, or that failed after the root cause
        table = summary(
            process_failure(0, code, rank, local_rank, pid, old=old),
            [process_failure(i + 1, c, r, r, p, old=old) for i, (c, r, p) in enumerate(others)],
            old=old, width=60,
        )
        if form == "summary-flat":
            table = [" ".join(line.strip() for line in table)]
        lines += [rank_prefix + line for line in table]

    facts = training_log.read(lines)
    assert facts.child is not None
    assert (facts.child.exit_code, facts.child.pid, facts.child.local_rank) == (code, pid, local_rank)
    if form != "agent":
        assert facts.child.rank == rank and facts.child.source == "torchrun-summary"
    signal = facts.child_signal
    if code < 0:
        assert signal is not None
        assert (signal.signal, signal.pid, signal.local_rank) == (-code, pid, local_rank)
    else:
        assert signal is None
    r = report(lines)
    assert r.verdict == expected(code, with_traceback), (lines, r.findings)


def called_process_error(returncode: int, cmd: list[str]) -> str:
    """The exception line as CPython prints it (its own ``__str__``)."""
    return f"subprocess.CalledProcessError: {subprocess.CalledProcessError(returncode, cmd)}"


@settings(max_examples=200, deadline=None)
@given(
    returncode=st.one_of(st.sampled_from([-9, -11, -7, -6, -15]), st.integers(1, 255), st.integers(-64, -1)),
    args=st.lists(line_text, max_size=8),
    with_traceback=st.booleans(),
    banner=st.booleans(),
)
def test_called_process_error_generated(
    returncode: int, args: list[str], with_traceback: bool, banner: bool
) -> None:
    cmd = ["/opt/conda/bin/python3", "-u", "train.py", "--local_rank=7", *args]
    lines = ["Traceback (most recent call last):"] if with_traceback else []
    lines += [
        '  File "/opt/conda/lib/python3.7/site-packages/torch/distributed/launch.py", line 259, in main',
        "    cmd=cmd)",
        called_process_error(returncode, cmd),
    ]
    if banner:  # torch.distributed.launch's OMP_NUM_THREADS banner of the next attempt
        lines += ["*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in "
                  "default, to avoid your system being overloaded, please further tune the variable for "
                  "optimal performance in your application as needed.", "*" * 41]
    signal = training_log.read(lines).child_signal
    if returncode < 0:
        assert signal is not None and signal.signal == -returncode and signal.source == "subprocess"
    else:
        assert signal is None
    r = report(lines)
    assert r.verdict == expected(returncode, with_traceback)


@pytest.mark.parametrize(
    ("line", "verdict"),
    [
        # Python < 3.6's message, and a signal the enum does not know
        ("subprocess.CalledProcessError: Command '['python', 'a.py']' returned non-zero exit status -11",
         "segfault"),
        ("subprocess.CalledProcessError: Command '['python', 'a.py']' died with unknown signal 9.",
         "sigkill-not-oom"),
        # DeepSpeed's launcher (deepspeed/launcher/launch.py, sigkill_handler)
        ("[2023-06-08 03:14:09,612] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', "
         "'main.py', '--local_rank=1'] exits with return code = -9", "sigkill-not-oom"),
        ("[2023-06-08 03:14:09,612] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', "
         "'main.py', '--local_rank=1'] exits with return code = 1", None),
    ],
)
def test_other_launcher_forms(line: str, verdict: str | None) -> None:
    assert report([line]).verdict == verdict


# -- a genuine Python exception stays one ----------------------------------------------------------

_NAME = st.from_regex(r"[A-Z][A-Za-z]{0,20}(Error|Exception)", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(
    name=_NAME,
    message=line_text,
    module=st.sampled_from(["", "torch.", "ray.exceptions.", "builtins."]),
    rank_prefix=st.sampled_from(["", "[rank3]: "]),
    pids_seen=st.lists(pids, max_size=3),
)
def test_a_traceback_without_a_signal_is_a_python_exception(
    name: str, message: str, module: str, rank_prefix: str, pids_seen: list[int]
) -> None:
    lines = [f"step {p}: loss 0.{p}" for p in pids_seen] + [
        "Traceback (most recent call last):",
        '  File "/app/train.py", line 12, in <module>',
        "    main()",
        f"{module}{name}: {message}".rstrip(),
    ]
    lines = [rank_prefix + line for line in lines]
    facts = training_log.read(lines)
    assert facts.child_signal is None
    r = report(lines)
    assert r.verdict == "python-exception"
    assert r.findings[0].evidence["exception"] == f"{module}{name}"
