"""Which kernel the demo can show: a real OOM kill read from /dev/kmsg, or a recorded one.

A real kill needs a writable memory cgroup (for the pod's limit) and a readable
``/dev/kmsg`` (for the agent). Where either is missing the demo still runs
everything else, but the kernel record the agent serves is a real one recorded
earlier (``podmortem/examples/fork-cow-6.18.log``: a forked child holding the
parent's old pages at a cgroup limit, the same failure), and every place that
shows it says "recorded".

The recorded kill happened at a 128 MiB limit; the demo pod's is 256 MiB by
default. So that no surface shows a 128 MiB limit beside a pod whose spec says
256Mi, `recorded_records` scales every size in the record (the cgroup's usage
and limit, its memory.stat, the task table's pages, the killed process's RSS) by
the pod's limit over the recorded one, and says so: the record's ``source``, which
the report carries as ``recordSource`` and prefixes to its headline, reads
``RECORDED, not from this run: fork-cow-6.18.log; sizes scaled ×2 from its 128Mi
limit to this pod's 256Mi``. Pids, names, counts and paths are left as recorded.
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from podmortem import quantity
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
#: What everything taken from the recorded record is labelled with (`record_source` adds the scale).
RECORDED_LABEL = f"RECORDED, not from this run: {RECORDED_EXAMPLE}"
#: The recorded cgroup's limit (``memory: ... limit 131072kB``).
RECORDED_LIMIT_BYTES = 128 * 1024**2
#: A printed size at or above this is "no limit" (v1 prints 9007199254740988kB): never scaled.
_UNLIMITED = 1 << 50
#: memory.stat keys that are byte sizes (the rest are event counts, left as recorded).
_STAT_BYTES = re.compile(
    r"^(total_)?(cache|rss|rss_huge|shmem|mapped_file|dirty|writeback|swap|swapcached|inactive_anon|"
    r"active_anon|inactive_file|active_file|unevictable|hierarchical_memory_limit|"
    r"hierarchical_memsw_limit) (\d+)$"
)
_COUNTER = re.compile(r"(usage|limit) (\d+)kB")
_KILLED_KB = re.compile(r"(total-vm|anon-rss|file-rss|shmem-rss):(\d+)kB")
#: Task table row: ``[ pid ] uid tgid total_vm rss rss_anon rss_file rss_shmem pgtables_bytes ...``.
_TASK_ROW = re.compile(r"^(\[\s*\d+\]\s+\d+\s+\d+)((?:\s+\d+){6})(.*)$")


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


def recorded_text() -> str:
    """The bundled record's kernel log text, as captured."""
    return importlib.resources.files("podmortem.examples").joinpath(RECORDED_EXAMPLE).read_text()


def scale_factor(limit_bytes: int | None) -> float:
    """The pod's limit over the recorded one (1 where the pod has none)."""
    return limit_bytes / RECORDED_LIMIT_BYTES if limit_bytes else 1.0


def record_source(limit_bytes: int | None) -> str:
    """The label every surface shows for the recorded record, with the scale when there is one."""
    factor = scale_factor(limit_bytes)
    if factor == 1.0 or limit_bytes is None:
        return RECORDED_LABEL
    return (
        f"{RECORDED_LABEL}; sizes scaled ×{factor:g} from its {quantity.format_mib(RECORDED_LIMIT_BYTES)} "
        f"limit to this pod's {quantity.format_mib(limit_bytes)}"
    )


def scaled_text(text: str, factor: float) -> str:
    """``text`` (a kmsg record) with every size multiplied by ``factor``: the counters' usage and
    limit, byte-sized memory.stat keys (to whole pages), the task table's page and byte columns and
    the killed process's kB. Counts (failcnt, pgfault...), pids, names and limits that mean "none"
    stay as printed."""
    if factor == 1.0:
        return text

    def size(value: str, *, page: int = 1) -> str:
        n = int(value)
        if n >= _UNLIMITED:
            return value
        return str(round(n * factor / page) * page)

    out: list[str] = []
    for line in text.splitlines(keepends=True):
        prefix, sep, message = line.partition(";")
        if not sep:
            out.append(line)
            continue
        body = message.rstrip("\n")
        end = message[len(body):]
        if body.startswith(("memory:", "memory+swap:", "kmem:", "swap:")):
            body = _COUNTER.sub(lambda m: f"{m[1]} {size(m[2])}kB", body)
        elif (stat := _STAT_BYTES.match(body)) is not None:
            body = f"{stat[1] or ''}{stat[2]} {size(stat[3], page=4096)}"
        elif (row := _TASK_ROW.match(body)) is not None:
            cols = row[2].split()
            widths = re.findall(r"\s+\d+", row[2])
            scaled = [size(c) for c in cols]
            spaced = (w[: len(w) - len(w.lstrip())] + v for w, v in zip(widths, scaled, strict=True))
            body = row[1] + "".join(spaced) + row[3]
        elif "Killed process" in body:
            body = _KILLED_KB.sub(lambda m: f"{m[1]}:{size(m[2])}kB", body)
        out.append(prefix + sep + body + end)
    return "".join(out)


def recorded_records(limit_bytes: int | None = None) -> list[OomKillRecord]:
    """The bundled real record, parsed (one OOM kill): its sizes scaled to ``limit_bytes`` (the pod's
    limit; None: as recorded), and its ``source`` saying both that it is recorded and how it was scaled."""
    text = scaled_text(recorded_text(), scale_factor(limit_bytes))
    records = oom_parser.parse_text(text)
    if not records:  # pragma: no cover - the file is part of the package
        raise RuntimeError(f"no OOM record in podmortem/examples/{RECORDED_EXAMPLE}")
    source = record_source(limit_bytes)
    return [r.model_copy(update={"source": source}) for r in records]


def recorded_cgroup_path() -> str:
    """The memory cgroup the recorded kill happened in: the agent is told it is the pod's."""
    record = recorded_records()[0]
    path = record.task_memcg or record.oom_memcg
    if not path:  # pragma: no cover - the bundled record names its cgroup
        raise RuntimeError("the recorded OOM record names no cgroup")
    return path
