"""Which kernel the demo can show: a real OOM kill read from /dev/kmsg, or a recorded one.

A real kill needs a writable memory cgroup (for the pod's limit) and a readable
``/dev/kmsg`` (for the agent). Where either is missing the demo still runs
everything else, but the kernel record the agent serves is a real one recorded
earlier (``podmortem/examples/fork-cow-6.18.log``: a forked child holding the
parent's old pages at a cgroup limit, the same failure), and every place that
shows it says "recorded".
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from podmortem.errors import PodmortemError
from podmortem.kernel import kmsg, oom_parser
from podmortem.reports.oom_record import OomKillRecord
from podmortem_demo import sandbox

KernelMode = Literal["real", "recorded"]
KernelWish = Literal["auto", "real", "recorded"]
#: The bundled record shown in recorded mode, and where it came from.
RECORDED_EXAMPLE = "fork-cow-6.18.log"
RECORDED_SOURCE = (
    "captured by podmortem on kernel 6.18 (cgroup v1): a forked child keeps the parent's "
    "old pages while the parent rewrites its heap, at a 128 MiB cgroup limit"
)


class KernelUnavailable(PodmortemError, RuntimeError):
    """``--kernel real`` was asked for but this machine cannot do it; ``str(exc)`` says why."""


@dataclass(frozen=True)
class KernelChoice:
    """The mode the demo runs in, the cgroup root for real limits, and why (for the output)."""

    mode: KernelMode
    cgroup_root: sandbox.CgroupRoot | None
    #: Why the real kernel cannot be used (empty in real mode, or when recorded was asked for).
    reasons: list[str] = field(default_factory=list)


def _kmsg_problem(path: Path) -> str | None:
    try:
        with kmsg.KmsgReader(path=path):
            return None
    except OSError as exc:
        return f"{path} is not readable ({exc.strerror or exc}; it needs root or CAP_SYSLOG)"


def choose(wish: KernelWish, *, kmsg_path: Path = kmsg.DEFAULT_PATH) -> KernelChoice:
    """Real where the machine allows it (``auto``), or as asked; raise `KernelUnavailable` for a
    ``real`` wish the machine cannot meet."""
    if wish == "recorded":
        return KernelChoice("recorded", None, [])
    reasons: list[str] = []
    root: sandbox.CgroupRoot | None = None
    try:
        root = sandbox.find_root()
    except sandbox.CgroupUnavailable as exc:
        reasons.append(f"cannot create memory cgroups: {exc}")
    problem = _kmsg_problem(kmsg_path)
    if problem is not None:
        reasons.append(problem)
    if not reasons:
        return KernelChoice("real", root, [])
    if wish == "real":
        raise KernelUnavailable("; ".join(reasons))
    return KernelChoice("recorded", None, reasons)


def recorded_records() -> list[OomKillRecord]:
    """The bundled real record, parsed (one OOM kill)."""
    text = importlib.resources.files("podmortem.examples").joinpath(RECORDED_EXAMPLE).read_text()
    records = oom_parser.parse_text(text)
    if not records:  # pragma: no cover - the file is part of the package
        raise RuntimeError(f"no OOM record in podmortem/examples/{RECORDED_EXAMPLE}")
    return records


def recorded_cgroup_path() -> str:
    """The memory cgroup the recorded kill happened in: the agent is told it is the pod's."""
    record = recorded_records()[0]
    path = record.task_memcg or record.oom_memcg
    if not path:  # pragma: no cover - the bundled record names its cgroup
        raise RuntimeError("the recorded OOM record names no cgroup")
    return path
