"""``podmortem diagnose``'s inputs besides kernel text: pod objects, ``kubectl describe pod``, training logs.

Each file is read once, as a stream, and its kind told by its content (`detect`) unless ``--kind``
forces one: a pod object (YAML or JSON) or ``kubectl describe pod`` text is read whole, up to
`offline.DOCUMENT_MAX_BYTES`; kernel text goes through the kernel parser line by line;
a training log is read in 1 MiB chunks keeping only its last `log_tail.TAIL_LINES` lines (what the
operator keeps), so a log of any size costs the same memory. Kernel OOM lines inside a training
log (a console capture) are noticed by a substring test per chunk and only from there parsed.

Several files are combined into one report per failed container, as the operator combines them
(`offline.combine`); kernel text alone keeps its own report (`podmortem.cli.diagnose`).
"""

from __future__ import annotations

import argparse
import gzip
import io
import itertools
import json
import re
import sys
import textwrap
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from podmortem.cli import diagnose_files, diagnose_kernel
from podmortem.cli.diagnose_exit import EXIT_NO_RECORD, EXIT_OK
from podmortem.diagnosis import catalogue, job_root_cause, job_section, offline
from podmortem.diagnosis.offline import Kind
from podmortem.kernel import log_lines, oom_parser
from podmortem.kube.bodies import PodBody
from podmortem.reports import log_tail
from podmortem.reports.document import JobSection
from podmortem.reports.failure import FailureReport
from podmortem.reports.oom_record import OomKillRecord

#: Bytes looked at to tell the kind of a file.
HEAD_BYTES = 64 * 1024
#: Bytes read at a time from a training log.
CHUNK_BYTES = 1 << 20
#: A line longer than this is cut before the kernel parser sees it (a progress bar redrawn with ``\r``).
KERNEL_LINE_MAX = 64 * 1024
#: Texts only the kernel's OOM records print (mm/oom_kill.c, mm/memcontrol.c): one of them in a
#: training log means kernel lines are in it too (a console capture).
KERNEL_MARKERS: tuple[bytes, ...] = (
    b" invoked oom-killer:",
    b"oom-kill:constraint=",
    b"Memory cgroup out of memory",
    b"Memory cgroup stats for",
    b"Tasks state (memory values in pages)",
    b"] Killed process ",
    b"kernel: Killed process ",
    b"oom_reaper: reaped process",
    b"Out of memory and no killable processes",
)
_MARKER_SPAN = max(len(m) for m in KERNEL_MARKERS)
_KERNEL_FORMATS = frozenset({"dmesg", "dmesg-T", "kmsg", "syslog"})
#: A syslog or ``journalctl`` line of any program: ``Jun 17 03:18:17 host prog[123]: ``.
_SYSLOG = re.compile(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w./@:-]+(?:\[\d+\])?: ")
_JOURNAL_HEAD = ("-- Logs begin at", "-- Journal begins at", "-- No entries --")


class InputError(Exception):
    """An input that cannot be read; the message names it (exit 2)."""


@dataclass(frozen=True)
class Source:
    label: str
    #: None: standard input.
    path: str | None
    #: A kind forced for this source (``--kind``, or ``kernel`` for ``--example``); None: by content.
    kind: Kind | None = None


@dataclass
class FileRead:
    """What one file held."""

    label: str
    kinds: list[Kind] = field(default_factory=list)
    records: list[OomKillRecord] = field(default_factory=list)
    pods: list[offline.PodInput] = field(default_factory=list)
    log: offline.LogTail | None = None
    head: bytes = b""
    note: str = ""
    #: The kinds this file was searched for (a log read by content is searched for kernel lines too).
    looked: list[Kind] = field(default_factory=list)


@dataclass
class Inputs:
    files: list[FileRead]

    @property
    def kernel_only(self) -> bool:
        return all(f.kinds == ["kernel"] for f in self.files)

    @property
    def label(self) -> str:
        return ", ".join(f.label for f in self.files)

    @property
    def records(self) -> list[OomKillRecord]:
        return [r for f in self.files for r in f.records]

    @property
    def head(self) -> bytes:
        return self.files[0].head if len(self.files) == 1 else b""

    def document(self, unused: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
        """The ``input`` section of ``--json``: the kinds read, and each file with its kinds."""
        kinds = {k for f in self.files for k in f.kinds}
        doc: dict[str, Any] = {
            "kinds": [k for k in offline.KINDS if k in kinds],
            "files": [
                {"file": f.label, "kinds": list(f.kinds)} | ({"note": f.note} if f.note else {})
                for f in self.files
            ],
        }
        left = [{"file": name, "why": why} for name, why in unused]
        if left:
            doc["unused"] = left
        return doc


# -- reading ---------------------------------------------------------------------------------------


class _Chain(io.RawIOBase):
    """A byte stream whose first bytes were read ahead (to tell its kind) and are given back first."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner = inner
        self.ahead = b""
        self.pos = 0

    def head(self, size: int) -> bytes:
        while len(self.ahead) < size:
            data = self.inner.read(size - len(self.ahead))
            if not data:
                break
            self.ahead += data
        return self.ahead

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.pos < len(self.ahead):
            data = self.ahead[self.pos : self.pos + len(buffer)]
            self.pos += len(data)
        else:
            data = self.inner.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _chunks(stream: io.RawIOBase) -> Iterator[bytes]:
    while True:
        chunk = stream.read(CHUNK_BYTES)
        if not chunk:
            return
        yield chunk


class Tail:
    """The last lines of a byte stream fed in chunks, bounded as the operator's tail is.

    At most `log_tail.TAIL_LINES` lines and `log_tail.TAIL_BYTES` bytes are kept, each line clipped
    to `log_tail.TAIL_LINE_BYTES` (`log_tail.clip`); of a line still being read only its first bytes
    and its length are held, so a line of a gigabyte costs 4 KiB.
    """

    def __init__(self) -> None:
        self.lines: deque[bytes] = deque()
        self.held = 0
        self.count = 0
        self._part = b""
        self._part_len = 0

    def _push(self, text: bytes) -> None:
        self.lines.append(text)
        self.held += len(text)
        self.count += 1
        while len(self.lines) > log_tail.TAIL_LINES or self.held > log_tail.TAIL_BYTES:
            self.held -= len(self.lines.popleft())

    def _extend(self, piece: bytes) -> None:
        keep = log_tail.TAIL_LINE_BYTES + 1 - len(self._part)
        if keep > 0:
            self._part += piece[:keep]
        self._part_len += len(piece)

    def _end_line(self) -> None:
        self._push(log_tail.clip(self._part, self._part_len))
        self._part, self._part_len = b"", 0

    def feed(self, chunk: bytes) -> None:
        pieces = chunk.split(b"\n")
        self._extend(pieces[0])
        if len(pieces) == 1:
            return
        self._end_line()
        middle = pieces[1:-1]
        self.count += max(0, len(middle) - log_tail.TAIL_LINES)
        for piece in middle[-log_tail.TAIL_LINES :]:
            self._push(log_tail.clip(piece, len(piece)))
        self._extend(pieces[-1])

    def finish(self) -> None:
        if self._part_len:
            self._end_line()


def _has_marker(window: bytes) -> bool:
    return any(marker in window for marker in KERNEL_MARKERS)


def kernel_shaped(head: bytes) -> bool:
    """Whether a text's beginning is kernel log text: an OOM record's own lines, ``journalctl``'s
    header, a line the catalogue knows for the kernel's (``Task in … killed as a result of limit
    of …`` or a memcg counter line, with no stamp or behind any prefix), or a third of its lines
    stamped as ``dmesg``, ``/dev/kmsg``, syslog or journal lines are."""
    if not head.strip() or diagnose_files.looks_binary(head) or _has_marker(head):
        return True  # empty or binary: the kernel reading says which, in its own message
    lines = [line for line in head.decode("utf-8", "replace").splitlines() if line.strip()][:200]
    if lines[0].startswith(_JOURNAL_HEAD):
        return True
    if any((found := catalogue.find(line, catalogue.KERNEL)) is not None and found.entry.verdict is not None
           for line in lines):
        return True
    stamped = 0
    for line in lines:
        parsed = log_lines.split(line, None)
        if (parsed is not None and parsed.fmt in _KERNEL_FORMATS) or _SYSLOG.match(line):
            stamped += 1
    return stamped * 3 >= len(lines)


def detect(head: bytes) -> Kind:
    """The kind of a text from its first bytes: ``pod``, ``describe``, ``kernel`` or ``log``.

    A pod object and ``kubectl describe`` output name themselves in their first lines (a describe's
    Events may quote the kernel: it is still a describe), and so does a part of one pasted alone
    (describe's ``State:`` lines, a grep'ed ``lastState:``, describe that lost its indentation:
    `offline.fragment_kind`); the rest is kernel text when it is shaped like it (`kernel_shaped`),
    else a training log. A part that then holds no pod is read as kernel text or a log after all.
    """
    sniffed = offline.sniff(head.decode("utf-8", "replace"))
    if sniffed is not None:
        return sniffed
    return "kernel" if kernel_shaped(head) else "log"


def _kernel_lines(chunks: Iterable[bytes], tail: Tail) -> Iterator[str]:
    """Lines for the kernel parser from chunks, each chunk fed to ``tail`` on the way (the first is not)."""
    pending = b""
    first = True
    for chunk in chunks:
        if not first:
            tail.feed(chunk)
        first = False
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line[:KERNEL_LINE_MAX].decode("utf-8", "replace") + "\n"
        if len(pending) > KERNEL_LINE_MAX:  # a line with no end in sight: what the parser could use of it
            yield pending[:KERNEL_LINE_MAX].decode("utf-8", "replace") + "\n"
            pending = b""
    if pending:
        yield pending.decode("utf-8", "replace")


def read_log(
    chain: io.RawIOBase, label: str, *, look_for_kernel: bool
) -> tuple[offline.LogTail, list[OomKillRecord]]:
    """A training log's tail, streaming; and kernel OOM records in it, when ``look_for_kernel``."""
    tail = Tail()
    records: list[OomKillRecord] = []
    before, edge = b"", b""
    chunks = _chunks(chain)
    for chunk in chunks:
        if look_for_kernel and _has_marker(edge + chunk):
            tail.feed(chunk)
            # The chunk before gives the record's lines before its first marker, if any were cut there.
            records = oom_parser.parse_lines(_kernel_lines(itertools.chain([before + chunk], chunks), tail))
            break
        tail.feed(chunk)
        before, edge = chunk, chunk[-_MARKER_SPAN:]
    tail.finish()
    return offline.tail_of(label, tail.lines, total_lines=tail.count), records


def read_one(source: Source) -> FileRead:
    """One input file (or standard input) read as its kind. Raises `InputError`."""
    path = source.path
    try:
        stream, to_close = diagnose_files.open_input(path)
    except FileNotFoundError as exc:
        raise InputError(f"no such file: {path}") from exc
    except IsADirectoryError as exc:
        raise InputError(f"{path} is a directory, not a log file") from exc
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    out = FileRead(label=source.label)
    try:
        chain = _Chain(stream)
        out.head = chain.head(HEAD_BYTES)[: diagnose_files.SNIFF_BYTES]
        kind: Kind = detect(chain.ahead) if source.kind is None else source.kind
        if kind in ("pod", "describe"):
            data = chain.head(offline.DOCUMENT_MAX_BYTES + 1)
            if len(data) > offline.DOCUMENT_MAX_BYTES:
                raise InputError(
                    f"{source.label} is over {offline.DOCUMENT_MAX_BYTES // 2**20} MiB: too big for "
                    f"{'a pod object' if kind == 'pod' else 'kubectl describe pod output'} (a log? "
                    "--kind log or --kind kernel reads it as one)"
                )
            text = data.decode("utf-8", "replace")
            try:
                pods = offline.pods_from_document(text) if kind == "pod" else offline.pods_from_describe(text)
            except offline.BadInput as exc:
                if source.kind is not None or offline.whole_kind(text) is not None:
                    raise InputError(f"{source.label}: {exc}") from exc  # it names itself one, but is broken
                pods = []  # it only looked like a part of one
            if pods or source.kind is not None:
                out.kinds = out.looked = [kind]
                out.pods = [offline.PodInput(pod=p, label=source.label, kind=kind) for p in pods]
                if not pods:
                    out.note = "no pod in it"
                return out
            kind = "kernel" if kernel_shaped(data) else "log"  # it only looked like one
        if kind == "kernel":
            with io.BufferedReader(chain) as buffered:
                out.records = oom_parser.parse_lines(diagnose_files.lines(buffered))
            out.kinds = out.looked = ["kernel"]
            return out
        out.log, out.records = read_log(chain, source.label, look_for_kernel=source.kind is None)
        out.kinds = ["log", "kernel"] if out.records else ["log"]
        out.looked = ["log"] if source.kind is not None else ["kernel", "log"]
        return out
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"cannot read {source.label}: {exc}") from exc
    finally:
        for opened in to_close:
            opened.close()


def read_all(sources: Iterable[Source]) -> Inputs:
    return Inputs(files=[read_one(s) for s in sources])


# -- the combined report ---------------------------------------------------------------------------

#: Large enough for any job given on a command line; the operator's cap is for an annotation.
JOB_SECTION_MAX_BYTES = 1 << 20


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _ns_iso(ns: int | None) -> str | None:
    return _iso(datetime.fromtimestamp(ns / 1e9, UTC)) if ns is not None else None


def _kernel_files(inputs: Inputs) -> list[str]:
    return [f.label for f in inputs.files if "kernel" in f.kinds]


def case_document(case: offline.Case, inputs: Inputs) -> dict[str, Any]:
    """One report as ``--json`` prints it: the operator's report, and its ``pod`` and ``evidence`` context
    under the same names as the operator's ``podmortem.io/failure-report`` annotation."""
    t = case.termination
    pod: dict[str, Any] = {
        "namespace": t.namespace or None, "name": t.pod or None, "uid": t.pod_uid or None, "node": t.node,
        "container": t.container or None, "containerID": t.container_id, "exitCode": t.exit_code,
        "reason": t.reason, "podReason": t.pod_reason, "podMessage": t.pod_message,
        "startedAt": _iso(t.started_at), "finishedAt": _iso(t.finished_at),
    }
    if case.exit_assumed:
        pod["exitCodeAssumed"] = True
    kernel: dict[str, Any] = {"state": case.kernel_state, "files": _kernel_files(inputs)}
    if case.kernel_state == "not-found":
        kernel["note"] = "the kernel text given holds no OOM-kill record of this pod"
    elif case.kernel_state == "not-sought":
        kernel["note"] = "no kernel text given (the node's dmesg or journalctl -k holds the record)"
    log: dict[str, Any]
    if case.log is not None:
        log = {"file": case.log.label, "lines": case.log.total_lines, "tailLines": len(case.log.lines),
               "lastLineAt": _ns_iso(case.log.last_line_ns)}
    else:
        log = {"note": "no log given for this container (kubectl logs --previous POD -c CONTAINER)"}
    status = {"file": case.source.label, "kind": case.source.kind} if case.source.kind != "log" else {
        "note": "no pod status given: a log alone, its container taken as failed"
    }
    doc = case.report.model_dump(mode="json") | {
        "pod": pod, "evidence": {"podStatus": status, "kernelRecord": kernel, "log": log},
    }
    if case.role is not None:
        doc["job"] = {"role": case.role, "line": case.role_line}
    return doc


def _found(case: offline.Case) -> bool:
    """A report worth printing: the pod status shows a failure, or a log alone shows a cause."""
    return case.source.kind != "log" or case.report.verdict is not None or case.role is not None


def run(inputs: Inputs, args: argparse.Namespace) -> int:
    """Combine the inputs into reports and print them; the exit code."""
    pods = [p for f in inputs.files for p in f.pods]
    logs = [f.log for f in inputs.files if f.log is not None]
    combined = offline.combine(
        pods, logs, inputs.records, kernel_given=any("kernel" in f.kinds for f in inputs.files),
        exit_code=args.exit_code,
    )
    cases = [c for c in combined.cases if _found(c)]
    leftover = diagnose_kernel.kernel_reports(combined.leftover)
    unused = [(log.label, why) for log, why in combined.unused_logs]
    if args.exit_code is not None and pods:
        unused.append(("--exit-code", "not used: the pod status gives the exit code"))
    job: JobSection | None = None
    if len({id(c.source) for c in cases}) > 1:
        result = job_root_cause.root_cause(offline.first_failures(cases))
        job = job_section.section(result, max_bytes=JOB_SECTION_MAX_BYTES)
    if args.html and (cases or leftover):
        return _html(cases, leftover, inputs)
    if args.json:
        doc: dict[str, Any] = {
            "reports": [case_document(c, inputs) for c in cases]
            + [r.model_dump(mode="json") for r in leftover],
            "input": inputs.document(unused),
        }
        if job is not None:
            doc["job"] = job.to_json()
        print(json.dumps(doc, indent=2))
    if not cases and not leftover:
        print(f"podmortem diagnose: {nothing_found(inputs, combined)}", file=sys.stderr)
        return EXIT_NO_RECORD
    if not args.json:
        sys.stdout.write(render(cases, leftover, inputs, job, unused))
    return EXIT_OK


def _html(cases: list[offline.Case], leftover: list[FailureReport], inputs: Inputs) -> int:
    """The last report as the page `podmortem report` draws from this command's ``--json``."""
    from podmortem.cli import report as report_cli

    documents = [case_document(c, inputs) for c in cases] + [r.model_dump(mode="json") for r in leftover]
    last = cases[-1] if not leftover and cases else None
    named = "/".join(p for p in (last.termination.namespace, last.termination.pod) if p) if last else ""
    title = named or ", ".join(f.label for f in inputs.files) or "failure report"
    return report_cli.render_document(
        {"reports": documents}, "the inputs", output=None, title=title, command="podmortem diagnose",
        log_note="the page holds no log lines; without --html, podmortem diagnose prints the log's facts",
    )


def nothing_found(inputs: Inputs, combined: offline.Combined) -> str:
    """Why there is no report, naming what was looked for in which file (the kernel text alone keeps
    its message: `podmortem.cli.diagnose.run`)."""
    parts = []
    for f in inputs.files:
        if f.kinds and f.kinds[0] in ("pod", "describe"):
            what = "pod object" if f.kinds[0] == "pod" else "kubectl describe pod output"
            if f.pods:
                names = ", ".join(PodBody(p.pod).name or "?" for p in f.pods)
                parts.append(f"no failed container in {f.label} ({what} of {names})")
            else:
                parts.append(f"no pod in {f.label} (read as a {what})")
            continue
        said = []
        if "kernel" in f.looked:
            said.append(f"no kernel OOM-kill record found in {f.label}")
        if "log" in f.looked:
            said.append(f"read as a training log, the last {log_tail.TAIL_LINES} lines of {f.label} show no "
                        "death podmortem knows (CUDA OOM, full /dev/shm, segfault, Python traceback, NCCL or "
                        "torchrun failure)")
        parts.append("; ".join(said))
    for log, why in combined.unused_logs:
        parts.append(f"{log.label} not read: {why}")
    looked = {k for f in inputs.files for k in f.looked}
    kinds = ", ".join(_KIND_WORDS[k] for k in offline.KINDS if k in looked)
    return f"{'; '.join(parts)} (looked for: {kinds})"


_KIND_WORDS = {"kernel": "kernel OOM-kill records", "pod": "failed containers in pod objects",
               "describe": "failed containers in kubectl describe pod", "log": "training-log deaths"}


# -- text output -----------------------------------------------------------------------------------


def render(
    cases: list[offline.Case],
    leftover: list[FailureReport],
    inputs: Inputs,
    job: JobSection | None,
    unused: list[tuple[str, str]],
) -> str:
    out: list[str] = []
    total = len(cases) + len(leftover)
    for index, case in enumerate(cases, 1):
        if out:
            out.append("")
        out.extend(_render_case(case, index, total))
    for index, report in enumerate(leftover, len(cases) + 1):
        out.append("")
        out.append("  (a kernel record no pod given claims)")
        out.extend(diagnose_kernel.render_one(report, index, total))
    if job is not None:
        out.append("")
        out.extend(_render_job(job))
    for name, why in unused:
        out.append("")
        out.append(f"  note: {name}: {why}")
    return "\n".join(out) + "\n"


def _render_case(case: offline.Case, index: int, count: int) -> list[str]:
    t = case.termination
    report = case.report
    if case.source.kind == "log":
        head = f"Failure {index} of {count}: training log {case.source.label}"
        if case.exit_assumed:
            head += f" (no pod status given: exit code taken as {t.exit_code}; --exit-code sets it)"
        else:
            head += f" (exit {t.exit_code}, from --exit-code)"
        lines = [head]
    else:
        pod = "/".join(x for x in (t.namespace, t.pod) if x)
        who = f"container {t.container!r}" + (f" of pod {pod}" if pod else "")
        end = [f"exit {t.exit_code}" if t.exit_code is not None else "no exit code"]
        if t.reason:
            end.append(t.reason)
        if t.pod_reason:
            end.append(f"pod {t.pod_reason}")
        if t.finished_at is not None:
            end.append(f"ended {_iso(t.finished_at)}")
        lines = [f"Failure {index} of {count}: {who} ({', '.join(end)})"]
        how = "kubectl describe" if case.source.kind == "describe" else "pod object"
        lines.append(f"  status    {case.source.label} ({how})")
    if case.log is not None:
        read = f"last {len(case.log.lines)} of {case.log.total_lines} lines read"
        lines.append(f"  log       {case.log.label} ({read})")
    kernel = {"attached": "attached", "not-found": "none of this pod in the kernel text given",
              "not-sought": "none given (add the node's dmesg or journalctl -k)"}[case.kernel_state]
    lines.append(f"  kernel    {kernel}")
    lines.append(f"  verdict   {report.verdict or 'unknown: no cause found'}")
    if case.role is not None:
        lines.extend(textwrap.wrap(
            f"{case.role}: a peer failed first (as the job report reads it); look at the pod that "
            "failed first",
            width=100, initial_indent="  job role  ", subsequent_indent=" " * 12,
        ))
        lines.extend(diagnose_kernel.wrap(f"line: {case.role_line}", "            "))
    if report.kill is not None and case.records:  # the kernel record: the kill, its cgroup, the processes
        lines.append("")
        lines.extend(diagnose_kernel.render_one(report, 1, 1))
        return lines
    if report.findings:
        lines.append("")
        lines.append("  Findings")
        for finding in report.findings:
            lines.append(f"  [{finding.severity.value}] {finding.code}")
            lines.extend(diagnose_kernel.wrap(finding.message, "    "))
            if finding.action:
                lines.extend(diagnose_kernel.wrap("what to do: " + finding.action, "    "))
    return lines


def _render_job(job: JobSection) -> list[str]:
    roles = ", ".join(f"{n} {role}" for role, n in sorted(job.roles.items()))
    lines = [f"Job: {job.pods} pods ({roles}), as the operator's job report reads them"]
    root = job.root_cause
    if root is not None:
        guess = " (a guess: every failed pod names a peer)" if job.guessed else ""
        who = f"{root.pod} (rank {root.rank})"
        lines.append(f"  root cause   {who}, {root.verdict or 'no verdict'}{guess}")
    for row in job.rows:
        if row.role == "root-cause":
            continue
        text = f"{row.role:<12} {row.pod} (rank {row.rank})"
        text += f": {row.line}" if row.line else ""
        lines.extend(textwrap.wrap(text, width=100, initial_indent="  ", subsequent_indent=" " * 15))
    return lines
