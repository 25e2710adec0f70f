"""``podmortem sidecar``: OOM evidence for the trainer container, from a sidecar in the training pod.

Every option also reads an environment variable (``PODMORTEM_SIDECAR_*``, for a
pod spec's ``env``); the command line wins, then the variable (empty counts as
unset), then the default. Values are checked first thing in `run`, so a bad one
gives one line naming the flag and the variable and exit 2. The sidecar itself
(`podmortem.sidecar`) is imported in `run`: registering the subcommand costs nothing.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from podmortem.cli import options as o

EXIT_USAGE = 2

logger = logging.getLogger("podmortem.sidecar")


def _cgroup_path(text: str) -> str | None:
    if not text.strip():
        return None
    if not text.startswith("/"):
        raise ValueError("expected a cgroup path as /proc/<pid>/cgroup shows it, starting with '/'")
    return text.rstrip("/") or "/"


INTERVAL = o.Option(
    ("--interval",), "PODMORTEM_SIDECAR_INTERVAL_SECONDS", o.seconds(above=0, high=3600), "2",
    "seconds between two samples of the trainer container; exits are noticed at once regardless; "
    "above 0, at most 3600", "SECONDS",
)
TERMINATION_LOG = o.Option(
    ("--termination-log",), "PODMORTEM_SIDECAR_TERMINATION_LOG", o.path, "/dev/termination-log",
    "file the evidence JSON (at most 4096 bytes) is written to: the container's terminationMessagePath",
    "PATH",
)
CONTAINER_CGROUP = o.Option(
    ("--container-cgroup",), "PODMORTEM_SIDECAR_CONTAINER_CGROUP", _cgroup_path, None,
    "the trainer container's memory cgroup exactly as /proc/<pid>/cgroup shows it to the sidecar "
    "(its processes are those in it or below it)", "PATH",
    shown_default="found by --comm, else the cgroup of the lowest pid outside the sidecar's own "
    "cgroup (pid 1 'pause' left out)",
)
COMM = o.Option(
    ("--comm",), "PODMORTEM_SIDECAR_COMM", o.regex, None,
    "regular expression one of the trainer's process names (comm, 15 characters) matches as a whole; "
    "the trainer container is that process's cgroup (e.g. 'python.*|torchrun')", "REGEX",
    shown_default="any process",
)
RING_SIZE = o.Option(
    ("--ring-size",), "PODMORTEM_SIDECAR_RING_SIZE",
    o.whole("a whole number of samples", low=1, high=100_000), "64",
    "samples kept (64 x 2 s = two minutes of trend); 1..100000", "N",
)
TOP = o.Option(
    ("--top",), "PODMORTEM_SIDECAR_TOP", o.whole("a number of processes", low=0, high=16), "8",
    "processes listed in the evidence, largest PSS first; 0..16", "N",
)
PROC_ROOT = o.Option(
    ("--proc-root",), "PODMORTEM_SIDECAR_PROC_ROOT", o.path, "/proc",
    "the pod's shared /proc (tests point it at a recorded tree)", "DIR",
)
LOG_LEVEL = o.Option(
    ("--log-level",), "PODMORTEM_LOG_LEVEL", o.choice(*o.LOG_LEVELS), "info", "log verbosity",
    "{" + ",".join(o.LOG_LEVELS) + "}",
)

OPTIONS: tuple[o.Option[Any], ...] = (
    INTERVAL, TERMINATION_LOG, CONTAINER_CGROUP, COMM, RING_SIZE, TOP, PROC_ROOT, LOG_LEVEL,
)

DESCRIPTION = """\
Run in a training pod as a native sidecar (an init container with restartPolicy: Always) of a
pod with shareProcessNamespace: true, as the trainer's user, with no capability. It finds the
trainer container's processes in the shared /proc, reads that container's own memory cgroup
through /proc/<pid>/root (cgroup v1 and v2: usage, limit, peak, memory.stat, the OOM-kill
counter) and every process's PSS (smaps_rollup), every --interval seconds. An OOM kill is the
counter rising as a process vanishes; the victim is the largest one (by its last PSS) of those gone.

When every process of the trainer container has exited, or on SIGTERM, it writes a JSON evidence
document (at most 4096 bytes: the numbers at the kill, the top processes, the counter, the
victim, the trend) to --termination-log, which the kubelet copies into the pod's
containerStatuses[].state.terminated.message for the operator, and exits.

Every option reads the environment variable shown in [brackets]; the command line wins over the
variable, and an empty variable counts as unset."""

EPILOG = """\
permissions: none beyond running as the trainer's user (reading another process's smaps_rollup
and /proc/<pid>/root needs the same user and no capability the sidecar lacks). No host mount,
no network, no Kubernetes API.

examples:
  podmortem sidecar
  podmortem sidecar --comm 'python.*' --termination-log /dev/termination-log
  podmortem sidecar --container-cgroup /podmortem-test/trainer --termination-log /tmp/evidence.json

exit codes: 0 evidence written (the trainer's processes all exited, or SIGTERM/SIGINT); 1 the
termination log could not be written; 2 a bad option or environment variable (one line on stderr)"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sidecar",
        help="run in a training pod (shared PID namespace, no host access): OOM evidence in the "
        "termination message",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    o.add_all(parser, OPTIONS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    v = o.Values(args)
    try:
        level = v.value(LOG_LEVEL)
        values: dict[str, Any] = dict(
            proc_root=v.value(PROC_ROOT),
            termination_log=v.value(TERMINATION_LOG),
            interval_s=v.value(INTERVAL),
            ring_size=v.value(RING_SIZE),
            top=v.value(TOP),
            container_cgroup=v.optional(CONTAINER_CGROUP),
            comm=v.optional(COMM),
        )
    except o.SettingError as exc:
        print(f"podmortem sidecar: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from podmortem.sidecar.main import run_sidecar
    from podmortem.sidecar.settings import SidecarSettings

    return run_sidecar(SidecarSettings(**values))
