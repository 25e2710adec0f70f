"""``podmortem logs`` as a user runs it: a subprocess against the emulated cluster via a kubeconfig.

stdout must carry each line once, in order, exactly as the container wrote it
(without the timestamp prefix unless ``--timestamps``); everything else goes to
stderr. Exit codes: 0 when the containers ended and their tails were read, 0
with a note when the pod was deleted, 1 with a one-line reason otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.cli.entrypoints import free_port

from podmortem.logs.events import EndReason
from podmortem.logs.storage.store import LogStore
from podmortem_demo.emulated import Pod, PodLogsApi, awkward_text, faults, kubeconfig_for

from .exactly_once import check
from .stored import stored_events

#: Small timeouts so faults resolve in milliseconds.
FAST_FLAGS = ["--read-timeout", "0.3", "--backoff-min", "0.005", "--backoff-max", "0.02"]
#: A CLI run that takes longer than this (real seconds) is hung.
RUN_LIMIT_S = 60


@dataclass
class Run:
    rc: int
    out: bytes
    err: str

    @property
    def err_lines(self) -> list[str]:
        return self.err.strip().splitlines()


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
    }
    env.update(extra)
    return env


async def start(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "podmortem.cli.main",
        "logs",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env if env is not None else clean_env(),
    )


async def podmortem_logs(*args: str, env: dict[str, str] | None = None, limit_s: float = RUN_LIMIT_S) -> Run:
    proc = await start(*args, env=env)
    try:
        async with asyncio.timeout(limit_s):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        pytest.fail(f"podmortem logs {' '.join(args)} hung; stderr ends: ...{err[-300:].decode()!r}")
    assert proc.returncode is not None
    return Run(proc.returncode, out, err.decode("utf-8", "replace"))


@pytest.fixture
def kubeconfig(cluster: tuple[PodLogsApi, str], tmp_path: Path) -> Path:
    return kubeconfig_for(cluster[1], tmp_path / "kubeconfig")


def texts(pod: Pod, *, container: str = "main") -> bytes:
    """Every line the container wrote, as ``kubectl logs`` prints it."""
    instances = pod.containers[container].instances
    return b"".join(text + b"\n" for inst in instances for _, text in inst.log.lines())


def lines_of(block: bytes) -> list[bytes]:
    """Split printed output into lines on ``\n`` only (texts hold ``\r``; splitlines would cut there)."""
    assert block.endswith(b"\n") or not block
    return [line + b"\n" for line in block.split(b"\n")[:-1]]


closed_port = free_port  # one source of ports for every test: none handed out twice


def assert_one_line_error(run: Run, *fragments: str) -> None:
    assert run.rc == 1, run
    assert run.out == b""
    assert len(run.err_lines) == 1, f"expected a one-line reason, got: {run.err!r}"
    assert run.err_lines[0].startswith("podmortem logs: error:"), run.err
    for fragment in fragments:
        assert fragment in run.err_lines[0], run.err


# -- stdout and stderr ------------------------------------------------------------------------------


async def test_each_line_once_in_order_without_timestamps_and_reconnects_on_stderr(
    cluster: tuple[PodLogsApi, str],
    kubeconfig: Path,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p", text=awkward_text, max_burst=20, max_step_ns=300_000)
    main = pod.containers["main"]
    main.write(3000)
    main.faults.extend(
        [
            faults.EofAfter(700, extra_bytes=9),
            faults.Reset(500, extra_bytes=2),
            faults.HttpError(503, retry_after=0.01),
            faults.Stall(100, extra_bytes=5),
            faults.Write(400),
            faults.EofAfterSeconds(0.01),
        ]
    )
    main.terminate_when_faults_done = True
    run = await podmortem_logs("p", "--follow", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0, run.err
    assert run.out == texts(pod)  # bytes exactly: \r, ANSI, invalid UTF-8, 17 KiB lines included
    # Reconnects are reported, on stderr only; the clean end of the log needs no note.
    assert run.err.strip(), "reconnects were not reported on stderr"
    assert b"podmortem" not in run.out


async def test_timestamps_keep_the_prefix_exactly(cluster: tuple[PodLogsApi, str], kubeconfig: Path) -> None:
    api, _ = cluster
    pod = api.add_pod("p", text=awkward_text)
    main = pod.containers["main"]
    main.write(800)
    main.faults.append(faults.EofAfter(300, extra_bytes=12))
    main.terminate_when_faults_done = True
    run = await podmortem_logs("p", "-f", "--timestamps", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0, run.err
    assert run.out == bytes(main.current.log.data)


async def test_without_follow_prints_what_is_there_and_exits(
    cluster: tuple[PodLogsApi, str],
    kubeconfig: Path,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    pod.containers["main"].write(500)
    pod.containers["main"].faults.append(faults.EofAfter(200, extra_bytes=4))  # cut: read on to the end
    run = await podmortem_logs("p", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0, run.err
    assert run.out == texts(pod)
    assert pod.containers["main"].current.exit_code is None  # still running: we did not wait for it


async def test_gap_is_reported_on_stderr_and_lines_after_it_follow(
    cluster: tuple[PodLogsApi, str],
    kubeconfig: Path,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(100)
    main.faults.extend([faults.EofAfter(100), faults.Rotate(write_before=30), faults.Write(20)])
    main.terminate_when_faults_done = True
    run = await podmortem_logs("p", "-f", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0, run.err
    lines = lines_of(texts(pod))
    assert run.out == b"".join(lines[:100] + lines[130:])
    gap_notes = [line for line in run.err_lines if "gap" in line]
    assert len(gap_notes) == 1 and "rotation" in gap_notes[0], run.err


async def test_several_containers_are_prefixed_and_one_can_be_chosen(
    cluster: tuple[PodLogsApi, str],
    kubeconfig: Path,
) -> None:
    """As kubectl: the first container unless -c or --all-containers; several are prefixed as stern
    prefixes them (``pod container line``), one alone is not."""
    api, _ = cluster
    pod = api.add_pod("p", containers=("main", "sidecar"))
    for name, n in (("main", 50), ("sidecar", 20)):
        pod.containers[name].write(n)
    run = await podmortem_logs("p", "--all-containers", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0, run.err
    got = lines_of(run.out)
    for name in ("main", "sidecar"):
        tag = f"p {name} ".encode()
        mine = [line[len(tag) :] for line in got if line.startswith(tag)]
        assert b"".join(mine) == texts(pod, container=name)
    assert len(got) == 70
    run = await podmortem_logs("p", "-c", "sidecar", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0 and run.out == texts(pod, container="sidecar")
    run = await podmortem_logs("p", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0 and run.out == texts(pod, container="main")
    assert run.err_lines == ['podmortem: Defaulted container "main" out of: main, sidecar '
                             "(--all-containers prints them all)"], run.err


# -- exit codes ---------------------------------------------------------------------------------------


async def test_pod_deleted_exits_0_with_a_note(cluster: tuple[PodLogsApi, str], kubeconfig: Path) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    pod.containers["main"].write(120)
    pod.containers["main"].faults.extend([faults.EofAfter(40), faults.Delete(after_lines=80)])
    run = await podmortem_logs("p", "-f", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0, run.err
    # The reconnect replays the whole (first) second, so the response that deletes the pod
    # ends after line 80: lines after it were never served by anyone.
    assert run.out == b"".join(lines_of(texts(pod))[:80])
    assert any("deleted" in line for line in run.err_lines), run.err


async def test_unknown_pod_exits_1_with_one_line(cluster: tuple[PodLogsApi, str], kubeconfig: Path) -> None:
    run = await podmortem_logs("nope", "-f", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert_one_line_error(run, "nope")


async def test_unknown_container_exits_1_with_one_line(
    cluster: tuple[PodLogsApi, str],
    kubeconfig: Path,
) -> None:
    cluster[0].add_pod("p", containers=("main", "sidecar"))
    run = await podmortem_logs("p", "-c", "nope", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert_one_line_error(run, "'nope' is not in pod default/p; its containers: main, sidecar")
    assert "ApiFatal" not in run.err


async def test_unreachable_api_exits_1_with_one_line(tmp_path: Path) -> None:
    port = closed_port()
    config = kubeconfig_for(f"http://127.0.0.1:{port}", tmp_path / "kubeconfig")
    run = await podmortem_logs("p", "-f", "--kubeconfig", str(config), *FAST_FLAGS, limit_s=20)
    assert_one_line_error(run, str(port))


@pytest.mark.parametrize("content", ["not: [yaml", "apiVersion: v1\nkind: Config\n", ""])
async def test_bad_kubeconfig_exits_1_with_one_line(tmp_path: Path, content: str) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(content)
    run = await podmortem_logs("p", "--kubeconfig", str(config), *FAST_FLAGS)
    assert_one_line_error(run)


async def test_missing_kubeconfig_file_exits_1_with_one_line(tmp_path: Path) -> None:
    run = await podmortem_logs("p", "--kubeconfig", str(tmp_path / "absent"), *FAST_FLAGS)
    assert_one_line_error(run)


# -- kubeconfig resolution: --kubeconfig > KUBECONFIG > in-cluster ------------------------------------


async def test_flag_beats_env_and_env_is_used_without_flag(
    cluster: tuple[PodLogsApi, str],
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    pod.containers["main"].write(10)
    broken = kubeconfig_for(f"http://127.0.0.1:{closed_port()}", tmp_path / "broken")
    run = await podmortem_logs(
        "p", "--kubeconfig", str(kubeconfig), *FAST_FLAGS, env=clean_env(KUBECONFIG=str(broken))
    )
    assert run.rc == 0 and run.out == texts(pod), run.err
    run = await podmortem_logs("p", *FAST_FLAGS, env=clean_env(KUBECONFIG=str(kubeconfig)))
    assert run.rc == 0 and run.out == texts(pod), run.err
    # KUBECONFIG may list several files, like kubectl's; the first one is used.
    both = f"{kubeconfig}{os.pathsep}{broken}"
    run = await podmortem_logs("p", *FAST_FLAGS, env=clean_env(KUBECONFIG=both))
    assert run.rc == 0 and run.out == texts(pod), run.err


async def test_no_kubeconfig_and_not_in_a_pod_exits_1_saying_what_to_do() -> None:
    run = await podmortem_logs("p", *FAST_FLAGS)
    assert_one_line_error(run, "--kubeconfig", "KUBECONFIG")


async def test_in_cluster_config_is_used_without_kubeconfig(tmp_path: Path) -> None:
    """In a pod: KUBERNETES_SERVICE_HOST/PORT and the service account's files pick the API.

    The service-account files are where PODMORTEM_SERVICE_ACCOUNT_DIR says (tests only; a pod has
    them at the kubelet's fixed path). In-cluster is always HTTPS and the address refuses
    connections, so the proof that it was chosen is the error naming it.
    """
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("in-cluster-token")
    (account / "ca.crt").write_text(CA_PEM)
    port = closed_port()
    env = clean_env(
        KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(port), HOME=str(tmp_path),
        PODMORTEM_SERVICE_ACCOUNT_DIR=str(account),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "podmortem.cli.main",
        "logs",
        "p",
        "-n",
        "default",
        *FAST_FLAGS,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        async with asyncio.timeout(20):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        pytest.fail(f"the CLI hung on an in-cluster address that refuses connections: ...{err[-300:]!r}")
    run = Run(proc.returncode or 0, out, err.decode())
    assert_one_line_error(run, f"127.0.0.1:{port}")


#: A self-signed CA certificate (PEM), only parsed, never used to verify anything.
CA_PEM = """\
-----BEGIN CERTIFICATE-----
MIIBjzCCATWgAwIBAgIUfW/1u5NJG8Rcs7wHWb7t63XTGIYwCgYIKoZIzj0EAwIw
HDEaMBgGA1UEAwwRcG9kbW9ydGVtLXRlc3QtY2EwIBcNMjYxMjAyMTUyMjExWhgP
MjEyNjExMDgxNTIyMTFaMBwxGjAYBgNVBAMMEXBvZG1vcnRlbS10ZXN0LWNhMFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEvFRtsBS0ikqeDXG7TIA+ltDjxqvdZVyo
1VRAolxHnNu+stBqtWcwipzYDiiQCw4C00yXI7wfMpvFUljJ/upBIqNTMFEwHQYD
VR0OBBYEFDedDFt9qWd/7ISJ1a3l8CU5BJdaMB8GA1UdIwQYMBaAFDedDFt9qWd/
7ISJ1a3l8CU5BJdaMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIh
AK5sZ1A5bgqDwAn4zWEs6OJ/M97x0gAItORO74lD1qDOAiB5HJxZVTOfy4sepusH
OIk65xiCyOhSlgBZDCkradDaBw==
-----END CERTIFICATE-----
"""


async def test_help_describes_the_options() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "podmortem.cli.main",
        "logs",
        "--help",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_env(),
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err
    text = out.decode()
    for option in (
        "--namespace",
        "--container",
        "--follow",
        "--timestamps",
        "--kubeconfig",
        "--read-timeout",
        "--backoff-min",
        "--backoff-max",
        "--store",
        "KUBECONFIG",
        "--selector",
        "--tail",
        "--since",
        "--since-time",
        "--previous",
        "--all-containers",
        "--color",
        "--operator-namespace",
    ):
        assert option in text, f"--help does not mention {option}"


# -- SIGKILL and rerun with --store ----------------------------------------------------------------


@contextlib.asynccontextmanager
async def live_writer(container: object) -> AsyncIterator[None]:
    async def write() -> None:
        while True:
            container.write(50)  # type: ignore[attr-defined]
            await asyncio.sleep(0.002)

    task = asyncio.create_task(write())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_sigkill_mid_stream_then_rerun_with_store(
    cluster: tuple[PodLogsApi, str],
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    """What exactly-once means across ``kill -9`` of the CLI.

    The store is the record: it holds the log exactly once, and a rerun resumes
    after its last line. stdout cannot be made atomic with the store: a batch is
    stored, then printed, so a kill between the two (or before stdout's buffer
    reached the pipe) leaves stored lines unprinted, and the rerun does not print
    them again. The guarantee tested: stdout never repeats a line and never
    reorders; what it misses is exactly the stored-but-unprinted lines at the
    kill (run 1's output + those lines + run 2's output == the log); and the store
    holds all of it.
    """
    api, _ = cluster
    pod = api.add_pod("p", text=awkward_text, max_burst=25, max_step_ns=400_000)
    main = pod.containers["main"]
    main.write(5000)
    store_dir = tmp_path / "store"
    args = ("p", "-f", "--store", str(store_dir), "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    async with live_writer(main):
        proc = await start(*args)
        assert proc.stdout is not None
        first = b""
        async with asyncio.timeout(RUN_LIMIT_S):
            while len(first) < 200_000:
                chunk = await proc.stdout.read(65536)
                assert chunk, f"the CLI ended early: {(await proc.communicate())[1]!r}"
                first += chunk
        proc.send_signal(signal.SIGKILL)
        rest, _ = await proc.communicate()
        first += rest
        assert proc.returncode == -signal.SIGKILL
    async with LogStore(store_dir, read_only=True) as log_store:
        stored_first = [e.text + b"\n" for e in await stored_events(log_store) if hasattr(e, "text")]
    main.faults.append(faults.EofAfter(100, extra_bytes=3))
    main.terminate_when_faults_done = True
    run = await podmortem_logs(*args)
    assert run.rc == 0, run.err

    log = lines_of(texts(pod))
    # A write to a full pipe that SIGKILL interrupts leaves the start of a line on stdout.
    complete, _, torn = first.rpartition(b"\n")
    printed_first = lines_of(complete + b"\n") if complete or first.startswith(b"\n") else []
    assert stored_first == log[: len(stored_first)], "run 1 stored something other than the log's start"
    assert printed_first == stored_first[: len(printed_first)], "run 1 printed lines it had not stored"
    unprinted = stored_first[len(printed_first) :]
    assert not torn or (unprinted and unprinted[0].startswith(torn)), "a torn line that is not the next one"
    assert b"".join(printed_first + unprinted) + run.out == b"".join(log)
    async with LogStore(store_dir, read_only=True) as log_store:
        outcome = check(await stored_events(log_store), main)
    assert outcome.delivered == len(log)
    assert [e.reason for e in outcome.ends] == [EndReason.TERMINATED]
