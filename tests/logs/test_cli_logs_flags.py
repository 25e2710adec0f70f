"""``podmortem logs``'s kubectl flags, as a user runs them: a subprocess against the emulated cluster.

``--tail``, ``--since``, ``--since-time``, ``--previous``, ``--all-containers``, ``-c``, ``--color``
behave as ``kubectl logs``'s; several logs on one stdout are prefixed as stern prefixes them; a bad
value or a bad combination is exit 2 with one line naming the flags, an unknown flag the ``logs``
usage. ``-l``, the stored copy and the kubectl plugin run against the real control plane
(tests/controlplane/test_logs_cli_real.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from podmortem.cli import logs_output
from podmortem.logs import timestamps
from podmortem_demo.emulated import PodLogsApi, kubeconfig_for

from .test_cli_logs import FAST_FLAGS, lines_of, podmortem_logs, texts


@pytest.fixture
def kubeconfig(cluster: tuple[PodLogsApi, str], tmp_path: Path) -> Path:
    return kubeconfig_for(cluster[1], tmp_path / "kubeconfig")


async def test_tail_prints_the_last_lines_and_minus_one_all(cluster: tuple[PodLogsApi, str],
                                                            kubeconfig: Path) -> None:
    pod = cluster[0].add_pod("p")
    pod.containers["main"].write(300)
    every = lines_of(texts(pod))
    for tail, want in (("25", every[-25:]), ("0", []), ("-1", every)):
        run = await podmortem_logs("p", "--tail", tail, "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
        assert run.rc == 0, run.err
        assert run.out == b"".join(want), tail


async def test_tail_with_follow_then_every_new_line(cluster: tuple[PodLogsApi, str],
                                                    kubeconfig: Path) -> None:
    """``--tail`` chooses where the first read starts; what comes after (here a reconnect and a container
    that ends) is read whole."""
    from podmortem_demo.emulated import faults

    pod = cluster[0].add_pod("p")
    main = pod.containers["main"]
    main.write(100)
    main.faults.extend([faults.EofAfter(5), faults.Write(30)])
    main.terminate_when_faults_done = True
    run = await podmortem_logs("p", "-f", "--tail", "10", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0, run.err
    every = lines_of(texts(pod))
    assert len(every) == 130
    assert run.out == b"".join(every[90:])


async def test_since_time_and_since(cluster: tuple[PodLogsApi, str], kubeconfig: Path) -> None:
    """``--since-time``: lines from that second on (the API server passes whole seconds to the kubelet,
    as for kubectl); ``--since 1h``: nothing of a log written in 2024."""
    pod = cluster[0].add_pod("p", max_step_ns=500_000_000)
    pod.containers["main"].write(200)
    stamped = [line.split(b" ", 1) for line in lines_of(bytes(pod.containers["main"].current.log.data))]
    cut_ns = timestamps.parse_ns(stamped[100][0]) // timestamps.NS_PER_SECOND * timestamps.NS_PER_SECOND
    want = [text for stamp, text in stamped if timestamps.parse_ns(stamp) >= cut_ns]
    assert 0 < len(want) < 200
    run = await podmortem_logs("p", "--since-time", timestamps.format_seconds(cut_ns),
                               "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0, run.err
    assert run.out == b"".join(want)
    run = await podmortem_logs("p", "--since", "1h", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0 and run.out == b"", run


async def test_previous_prints_the_instance_before_the_restart(cluster: tuple[PodLogsApi, str],
                                                               kubeconfig: Path) -> None:
    pod = cluster[0].add_pod("p")
    main = pod.containers["main"]
    main.write(40)
    first = bytes(main.current.log.data)
    main.restart(new_lines=7)
    run = await podmortem_logs("p", "--previous", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 0, run.err
    assert run.out == b"".join(line.split(b" ", 1)[1] for line in lines_of(first))
    run = await podmortem_logs("p", "-p", "--tail", "3", "--timestamps", "--kubeconfig", str(kubeconfig),
                               *FAST_FLAGS)
    assert run.out == b"".join(lines_of(first)[-3:])


async def test_previous_the_kubelet_lacks_goes_to_the_stored_copy(cluster: tuple[PodLogsApi, str],
                                                                   kubeconfig: Path) -> None:
    """No earlier instance at the kubelet: the operator's copy is asked for; with no operator here, one
    line says both."""
    cluster[0].add_pod("p").containers["main"].write(5)
    run = await podmortem_logs("p", "--previous", "--operator-namespace", "podmortem",
                               "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    assert run.rc == 1 and run.out == b"", run
    (line,) = run.err_lines
    assert line.startswith("podmortem logs: error: the kubelet has no previous instance of "
                           "default/p/main"), line
    assert ("the operator's stored copy cannot be read: cannot look for the podmortem operator in "
            "namespace podmortem") in line, line


async def test_several_containers_chosen_are_prefixed_and_coloured_when_asked(
    cluster: tuple[PodLogsApi, str], kubeconfig: Path,
) -> None:
    pod = cluster[0].add_pod("p", containers=("main", "sidecar", "third"))
    for name in pod.containers:
        pod.containers[name].write(10)
    base = ("p", "-c", "main", "-c", "third", "--kubeconfig", str(kubeconfig), *FAST_FLAGS)
    plain = await podmortem_logs(*base)  # stdout is a pipe: auto means no colour
    assert plain.rc == 0, plain.err
    got = lines_of(plain.out)
    assert len(got) == 20 and b"\x1b[" not in plain.out
    assert b"".join(x[len(b"p main "):] for x in got if x.startswith(b"p main ")) == texts(pod)
    assert not any(x.startswith(b"p sidecar ") for x in got)
    coloured = await podmortem_logs(*base, "--color", "always")
    tag = (f"{logs_output.paint('p', logs_output.colour_of('p'))} "
           f"{logs_output.paint('third', logs_output.colour_of('p/third'))} ").encode()
    mine = [x[len(tag):] for x in lines_of(coloured.out) if x.startswith(tag)]
    assert b"".join(mine) == texts(pod, container="third")
    never = await podmortem_logs(*base, "--color", "never")
    assert never.out == plain.out
    alone = await podmortem_logs("p", "-c", "third", "--color", "always", "--kubeconfig", str(kubeconfig),
                                 *FAST_FLAGS)
    assert alone.out == texts(pod, container="third")  # one log alone: bare, as kubectl prints it
    forced = await podmortem_logs("p", "-c", "third", "--prefix", "--kubeconfig", str(kubeconfig),
                                  *FAST_FLAGS)
    assert forced.out == b"".join(b"p third " + x for x in lines_of(texts(pod, container="third")))


def test_colour_auto_follows_the_terminal_and_no_color() -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    assert logs_output.use_colour("auto", Tty(), environ={})
    assert not logs_output.use_colour("auto", Tty(), environ={"NO_COLOR": "1"})
    assert not logs_output.use_colour("auto", Tty(), environ={"TERM": "dumb"})
    assert not logs_output.use_colour("auto", object(), environ={})
    assert logs_output.use_colour("always", object(), environ={"NO_COLOR": "1"})
    assert not logs_output.use_colour("never", Tty(), environ={})


@pytest.mark.parametrize(("args", "fragment"), [
    (("p", "--since", "5m", "--since-time", "2024-05-01T00:00:00Z"), "--since='5m' and --since-time="),
    (("p", "--since", "5x"), "--since='5x': expected a duration"),
    (("p", "--since", "0s"), "--since='0s': must be greater than 0"),
    (("p", "--since-time", "yesterday"), "--since-time='yesterday': expected an RFC3339 time"),
    (("p", "--tail", "-2"), "--tail='-2'"),
    (("p", "-c", "main", "--all-containers"), "--all-containers: give one of them"),
    (("p", "-l", "app=x"), "give one of them, not both"),
    ((), "give a POD name, or -l SELECTOR"),
    (("p", "--color", "sometimes"), "--color='sometimes': must be one of auto, always, never"),
])
async def test_bad_values_exit_2_with_one_line(args: tuple[str, ...], fragment: str) -> None:
    run = await podmortem_logs(*args, "--kubeconfig", "/nonexistent")
    assert run.rc == 2, run
    (line,) = run.err_lines
    assert line.startswith("podmortem logs: ") and fragment in line, line


@pytest.mark.parametrize("command", ["logs", "diagnose", "report", "operator", "agent"])
async def test_an_unknown_flag_shows_the_subcommands_usage(command: str) -> None:
    import asyncio
    import sys

    from .test_cli_logs import clean_env

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podmortem.cli.main", command, "--bogus-flag",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=clean_env())
    out, err = await proc.communicate()
    assert proc.returncode == 2 and out == b""
    text = err.decode()
    assert text.startswith(f"usage: podmortem {command} "), text
    # `report` requires one of two options: argparse says that first, with report's usage too.
    assert f"\npodmortem {command}: error: " in text, text


async def test_colour_by_default_on_a_terminal(cluster: tuple[PodLogsApi, str], kubeconfig: Path) -> None:
    """``--color auto``: stdout a terminal (a pty here), the prefixes are coloured; a pipe, they are not
    (test above)."""
    import asyncio
    import os
    import pty
    import sys

    from .test_cli_logs import clean_env

    pod = cluster[0].add_pod("p", containers=("main", "sidecar"))
    for name in pod.containers:
        pod.containers[name].write(3)
    leader, follower = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podmortem.cli.main", "logs", "p", "--all-containers",
        "--kubeconfig", str(kubeconfig), *FAST_FLAGS, stdout=follower, stderr=asyncio.subprocess.PIPE,
        env=clean_env())
    os.close(follower)
    _, err = await proc.communicate()
    assert proc.returncode == 0, err
    seen = b""
    while True:
        try:
            piece = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other end closed, everything read
            break
        if not piece:
            break
        seen += piece
    os.close(leader)
    tag = f"{logs_output.paint('p', logs_output.colour_of('p'))} ".encode()
    assert seen.count(tag) == 6, seen
