"""``podmortem diagnose``: explain the kernel OOM-kill records in a log, for people or (``--json``) tools.

It also reads what ``kubectl`` gives about a failed training pod (a training log, the pod object,
``kubectl describe pod``), alone or together with kernel text, and reports them as the operator
does: that reading is `podmortem.cli.diagnose_inputs`; kernel text alone is reported here.

Exit codes: 0 a report was printed; 2 the input could not be read (missing file,
bad arguments); 3 the input holds no OOM-kill record (nor a failure of another kind). Odd input
(binary, cut short, garbage) never ends in a traceback: it gives a partial report or exit 3.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import resources
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from podmortem.reports.failure import FailureReport
    from podmortem.reports.oom_record import OomKillRecord

#: Bytes looked at to tell a binary file from a log, for the error message.
_SNIFF_BYTES = 8192
#: Task rows shown in the human table; ``--json`` always has them all.
_TABLE_ROWS = 12

EXIT_OK = 0
EXIT_INPUT = 2
EXIT_NO_RECORD = 3


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="explain kernel OOM-kill records (dmesg, journalctl -k, syslog) and training-pod deaths",
        description=(
            "Read kernel log text and explain every OOM kill in it: which limit was hit, which kind "
            "of memory filled it, which processes held it, whether forked workers doubled it, and "
            "what to do. Accepts dmesg, dmesg -T, raw /dev/kmsg, journalctl -k, syslog files "
            "(also .gz) and text quoted in mail. It also reads a training log (kubectl logs "
            "[--previous]), the pod (kubectl get pod -o yaml|json) and kubectl describe pod, and "
            "names the failure as the operator does (cuda-oom, shm-full, python-exception, "
            "eviction, preempted, an NCCL failure that followed a peer's, ...). The kind of each "
            "file is told by its content (--kind forces one); several files are one report."
        ),
        epilog=(
            "examples:\n"
            "  dmesg | podmortem diagnose                     # as root\n"
            "  journalctl -k --since '1 hour ago' | podmortem diagnose --json\n"
            "  podmortem diagnose /var/log/messages\n"
            "  podmortem diagnose --example k3s-stress\n"
            "  kubectl logs --previous POD > train.log; podmortem diagnose train.log\n"
            "  kubectl get pod POD -o yaml | podmortem diagnose\n"
            "  kubectl describe pod POD > describe.txt; podmortem diagnose describe.txt train.log\n"
            "  podmortem diagnose dmesg.txt pod.yaml train.log     # one report from all three\n\n"
            "exit codes: 0 report printed, 2 input unreadable, 3 no OOM-kill record (nor any other\n"
            "failure) in the input; the message says what was looked for in which file"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="kernel log, training log, pod YAML/JSON or kubectl describe pod output (also .gz), or '-' "
        "for standard input (the default when piped); several are combined into one report",
    )
    parser.add_argument(
        "--kind", choices=("auto", "kernel", "pod", "describe", "log"), default="auto",
        help="read every FILE as this kind instead of telling it by its content",
    )
    parser.add_argument(
        "--exit-code", type=int, metavar="N",
        help="the container's exit code, for a training log given without its pod status "
        "(default: taken as 1, what Python exits with on an uncaught exception)",
    )
    parser.add_argument(
        "--json", action="store_true",
        help='print {"reports": [...], "input": {...}} (one report per kill or failed container)',
    )
    parser.add_argument(
        "--example", metavar="NAME", help="diagnose a bundled real record (see --list-examples)"
    )
    parser.add_argument(
        "--html", action="store_true",
        help="print the last kill's report as a self-contained HTML page (no timeline: a record has none)",
    )
    parser.add_argument("--list-examples", action="store_true", help="list the bundled records and exit")
    parser.set_defaults(func=run)


# -- input -----------------------------------------------------------------------------------------


def _examples() -> dict[str, dict[str, str]]:
    index = resources.files("podmortem").joinpath("examples", "index.json")
    data: dict[str, dict[str, str]] = json.loads(index.read_text(encoding="utf-8"))
    return data


#: Bytes of one line handed to the kernel parser; the rest of a longer line is skipped unread into
#: memory (the parser keeps 8 KiB of a line: `podmortem.kernel.log_lines.MAX_LINE`).
LINE_MAX = 64 * 1024


def _lines(stream: IO[bytes]) -> Iterator[str]:
    """The stream's lines, each cut at `LINE_MAX` bytes: a line without end costs bounded memory (read
    whole, 256 MiB of one line took 566 MiB, issue 36)."""
    while raw := stream.readline(LINE_MAX):
        if len(raw) == LINE_MAX and not raw.endswith(b"\n"):
            while (rest := stream.readline(LINE_MAX)) and not rest.endswith(b"\n"):
                pass
            raw += b"\n"
        yield raw.decode("utf-8", errors="replace")


def _looks_binary(head: bytes) -> bool:
    if not head:
        return False
    if b"\x00" in head:
        return True
    text = head.decode("utf-8", errors="replace")
    odd = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\r\n\f"))
    return odd > len(text) * 0.1


def _open(path: str | None) -> tuple[IO[bytes], list[IO[bytes]]]:
    """The byte stream to read, and what to close afterwards (stdin is left open)."""
    if path is None:
        return sys.stdin.buffer, []
    raw = open(path, "rb")  # noqa: SIM115 (closed by the caller)
    if raw.peek(2)[:2] == b"\x1f\x8b":
        packed: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]  # messages.1.gz
        return packed, [packed, raw]
    return raw, [raw]


# -- command ---------------------------------------------------------------------------------------


def kernel_reports(records: list[OomKillRecord]) -> list[FailureReport]:
    """One report per kernel record, the pod read off its cgroup paths, kills close together related."""
    from podmortem.cgroups import paths
    from podmortem.diagnosis import diagnose, sequence

    reports = []
    for record in records:
        cpuset = record.oom_kill.cpuset if record.oom_kill is not None else record.cpuset
        # With the oom-kill line cut, the memory.oom.group line still names the victim's (container's)
        # cgroup, also when the limit that filled is a node or QoS level one that names no pod.
        group = record.oom_group_memcg
        pod = paths.pod_ref(
            task_memcg=record.task_memcg or group, oom_memcg=record.oom_memcg or group, cpuset=cpuset
        )
        reports.append(diagnose(record, pod=pod))
    return sequence.relate(records, reports)


def run(args: argparse.Namespace) -> int:
    if args.list_examples:
        for name, meta in _examples().items():
            print(f"{name:24} {meta['title']}")
        return EXIT_OK

    from podmortem.cli import diagnose_inputs as inputs

    kind = None if args.kind == "auto" else args.kind
    if args.example is not None:
        examples = _examples()
        if args.example not in examples:
            print(
                f"podmortem diagnose: no example named {args.example!r}; "
                f"choose one of: {', '.join(examples)}",
                file=sys.stderr,
            )
            return EXIT_INPUT
        path = str(resources.files("podmortem").joinpath("examples", examples[args.example]["file"]))
        sources = [inputs.Source(f"example {args.example}", path, "kernel")]
    elif not args.files or args.files == ["-"]:
        if not args.files and sys.stdin.isatty():
            print(
                "podmortem diagnose: give a FILE, '-' for standard input, or --example NAME "
                "(try, as root: dmesg | podmortem diagnose)",
                file=sys.stderr,
            )
            return EXIT_INPUT
        sources = [inputs.Source("standard input", None, kind)]
    elif args.files.count("-") > 1:
        print("podmortem diagnose: '-' (standard input) can be given once", file=sys.stderr)
        return EXIT_INPUT
    else:
        sources = [
            inputs.Source("standard input", None, kind) if f == "-" else inputs.Source(f, f, kind)
            for f in args.files
        ]

    try:
        read = inputs.read_all(sources)
    except inputs.InputError as exc:
        print(f"podmortem diagnose: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if not read.kernel_only:
        return inputs.run(read, args)
    label = read.label
    reports = kernel_reports(read.records)

    if args.json:
        doc = {"reports": [r.model_dump(mode="json") for r in reports], "input": read.document()}
        print(json.dumps(doc, indent=2))
    elif args.html and reports:
        return _html(reports, label)
    if not reports:
        why = " (it looks like binary data, not a kernel log)" if _looks_binary(read.head) else ""
        print(f"podmortem diagnose: no kernel OOM-kill record found in {label}{why}", file=sys.stderr)
        return EXIT_NO_RECORD
    if not args.json:
        sys.stdout.write(render(reports))
    return EXIT_OK


def _html(reports: list[FailureReport], label: str) -> int:
    from podmortem.render import page
    from podmortem.reports.document import Evidence, KernelRecordEvidence, KernelRecordState, ReportDocument

    if len(reports) > 1:
        print(f"podmortem diagnose: {len(reports)} kills; the page shows the last (--json has all)",
              file=sys.stderr)
    # The record is the page's input: it is there, not "unknown" (the header's pod uid, container,
    # host and time come from its kill line: `page.details`).
    record = KernelRecordEvidence(state=KernelRecordState.ATTACHED, note=f"the record is the input: {label}")
    report = ReportDocument(report=reports[-1], evidence=Evidence(kernel_record=record))
    doc = page.render(
        page.PageInput(
            title=f"OOM kill in {label}",
            report=report,
            no_timeline_reason=(
                "no timeline: a kernel record holds one moment, the kill; the operator's page draws the "
                "pod's memory over time from its samples"
            ),
            log_note="a kernel record carries no application log",
            generated_at=datetime.now(UTC),
        )
    )
    sys.stdout.write(doc)
    return EXIT_OK


# -- human output ----------------------------------------------------------------------------------

#: ``missing`` codes in words.
_MISSING = {
    "header": "the header (who asked for memory)",
    "kill": "the kill line (who was killed)",
    "cgroup-stats": "the cgroup's memory.stat",
    "task-rows": "the task table's rows",
    "elided": "lines left out ('--', '...')",
    "truncated-line": "the end of a cut line",
    "kmsg-gap": "kernel records lost from /dev/kmsg",
}
#: The memcg-limit finding's level in words.
_LEVELS = {
    "container": "the container's own memory limit",
    "pod": "the pod's memory limit",
    "qos": "a QoS class cgroup shared by many pods (not this pod's limit)",
    "node": "the node's allocatable memory for all pods (not this pod's limit)",
    "system": "the memory limit of a cgroup outside the pods",
}


def render(reports: list[FailureReport]) -> str:
    """The reports as text for a person: what killed it, what filled it, who held it, what to do."""
    out: list[str] = []
    for index, report in enumerate(reports, 1):
        if index > 1:
            out.append("")
        out.extend(_render_one(report, index, len(reports)))
    return "\n".join(out) + "\n"


def _render_one(report: FailureReport, index: int, count: int) -> list[str]:
    from podmortem.reports.units import human_bytes as hb

    kill = report.kill
    cg = report.cgroup
    lines: list[str] = []
    when = []
    if kill is not None:
        if kill.time_text:
            when.append(kill.time_text)
        if kill.monotonic_s is not None:
            when.append(f"{kill.monotonic_s:.3f} s after boot")
        if kill.host:
            when.append(f"host {kill.host}")
        if kill.kernel_version:
            when.append(f"kernel {kill.kernel_version}")
    head = f"OOM kill {index} of {count}"
    lines.append(head + (f"  ({', '.join(when)})" if when else ""))
    if report.partial:
        lacks = [_MISSING.get(m, m) for m in report.missing]
        lines.append(f"  PARTIAL record: the text lacks {', '.join(lacks)}; what they would tell is unknown")
    no_victim = any(f.code == "no-killable-process" for f in report.findings)
    if kill is not None and kill.pid is None:
        if no_victim:
            lines.append("  killed    nothing: the kernel found no process it could kill")
        elif kill.chosen_pid is not None:
            who = f"{kill.chosen_comm or '?'} (pid {kill.chosen_pid})"
            lines.append(f"  killed    {who} or a child of it: the kernel chose it, and the Killed line "
                         "that names the victim is not in the text")
        else:
            lines.append("  killed    unknown: the record has no kill line (it is cut before it)")
    if kill is not None and kill.pid is not None:
        who = f"{kill.comm or '?'} (pid {kill.pid})"
        sizes = ""
        if kill.anon_rss_kb is not None:
            sizes = (
                f": anon {hb((kill.anon_rss_kb or 0) * 1024)}, file {hb((kill.file_rss_kb or 0) * 1024)},"
                f" shmem {hb((kill.shmem_rss_kb or 0) * 1024)}"
            )
        lines.append(f"  killed    {who}{sizes}")
    if kill is not None:
        if len(kill.killed_pids) > 1:
            lines.append(f"            with the whole group (memory.oom.group): pids {kill.killed_pids}")
        if kill.trigger_comm and (kill.trigger_pid is None or kill.trigger_pid != kill.pid):
            trig = f"{kill.trigger_comm}" + (f" (pid {kill.trigger_pid})" if kill.trigger_pid else "")
            lines.append(f"  trigger   {trig} asked for memory and set off the OOM killer")
        constraint = kill.constraint_effective or "unknown"
        cause = next((f for f in report.findings if f.code == "memcg-limit"), None)
        level = cause.evidence.get("limit_level") if cause is not None else None
        if constraint == "CONSTRAINT_MEMCG":
            what = _LEVELS.get(str(level), "memory cgroup limit")
        elif constraint == "CONSTRAINT_NONE":
            what = "the whole node ran out of memory (global OOM)"
        elif constraint == "unknown":
            what = "unknown: the record does not say whether a cgroup limit or the whole node ran out"
        else:
            what = constraint
        lines.append(
            f"  limit     {what}" + (f" [{constraint}]" if constraint.startswith("CONSTRAINT") else "")
        )
        if kill.constraint_note:
            lines.append(f"            {kill.constraint_note}")
        if kill.oom_memcg:
            lines.append(f"  cgroup    {kill.oom_memcg}")
        if kill.pod_uid:
            pod = f"pod uid {kill.pod_uid}"
            if kill.container_id:
                pod += f", container {kill.container_id[:12]}"
            if kill.qos:
                pod += f", QoS {kill.qos}"
            lines.append(f"  pod       {pod}")
    if cg is not None:
        if cg.limit_bytes is not None or cg.usage_bytes is not None:
            extra = f", failcnt {cg.failcnt}" if cg.failcnt is not None else ""
            lines.append(
                f"  usage     {hb(cg.usage_bytes)} of a {hb(cg.limit_bytes)} "
                + (f"{cg.limit_counter} " if cg.limit_counter not in (None, "memory") else "")
                + f"limit{extra}"
                + (f" (cgroup v{cg.version})" if cg.version else "")
            )
        if cg.breakdown is not None and cg.breakdown.categories():
            total = cg.breakdown.total_bytes() or 1
            parts = [
                f"{name} {hb(value)} ({value / total:.0%})"
                for name, value in cg.breakdown.categories().items()
            ]
            verdict = f" -> {cg.dominant} dominates" if cg.dominant else " -> no single category dominates"
            lines.append(f"  memory    {', '.join(parts)}{verdict}")
            lines.append(f"            from {cg.breakdown.source}")
    if report.tasks:
        lines.append("")
        lines.extend(_task_table(report))
    if report.findings:
        lines.append("")
        lines.append("  Findings")
        for finding in report.findings:
            lines.append(f"  [{finding.severity.value}] {finding.code}")
            lines.extend(_wrap(finding.message, "    "))
            if finding.action:
                lines.extend(_wrap("what to do: " + finding.action, "    "))
    return lines


def _task_table(report: FailureReport) -> list[str]:
    from podmortem.reports.units import human_bytes as hb

    page = report.page_size_bytes
    rows = sorted(report.tasks, key=lambda t: t.rss_pages or 0, reverse=True)
    shown = rows[:_TABLE_ROWS]
    shown += [t for t in rows[_TABLE_ROWS:] if t.killed]
    has_anon = any(t.rss_anon_pages is not None for t in shown)

    def size(pages: int | None) -> str:
        return hb(pages * page) if pages is not None else "-"

    header = (
        ["PID", "NAME", "RSS"] + (["ANON", "FILE", "SHMEM"] if has_anon else []) + ["SWAP", "ADJ", "HOLDS"]
    )
    table = [header]
    for t in shown:
        holds = {"owned": "owned", "shared": "shared (fork)", "unknown": "-"}[t.sharing]
        row = [f"{t.pid}{'*' if t.killed else ''}", t.name[:20], size(t.rss_pages)]
        if has_anon:
            row += [size(t.rss_anon_pages), size(t.rss_file_pages), size(t.rss_shmem_pages)]
        row += [size(t.swapents_pages), str(t.oom_score_adj) if t.oom_score_adj is not None else "-", holds]
        table.append(row)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    out = [f"  Processes ({len(report.tasks)} in the task table; * = killed; pages x {page} B)"]
    for r in table:
        out.append("    " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip())
    if len(rows) > len(shown):
        out.append(f"    ... {len(rows) - len(shown)} smaller processes not shown (--json has them all)")
    return out


def _wrap(text: str, indent: str, width: int = 100) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent) or [indent]
