"""``podmortem diagnose``: explain the kernel OOM-kill records in a log, for people or (``--json``) tools.

It also reads what ``kubectl`` gives about a failed training pod (a training log, the pod object,
``kubectl describe pod``), alone or together with kernel text, and reports them as the operator
does: that reading is `podmortem.cli.diagnose_inputs`; kernel text alone is reported here (its report
and text: `podmortem.cli.diagnose_kernel`).

Exit codes: 0 a report was printed; 2 the input could not be read (missing file,
bad arguments); 3 the input holds no OOM-kill record (nor a failure of another kind). Odd input
(binary, cut short, garbage) never ends in a traceback: it gives a partial report or exit 3.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING

from podmortem.cli import diagnose_cluster
from podmortem.cli.diagnose_exit import EXIT_INPUT, EXIT_NO_RECORD, EXIT_OK

if TYPE_CHECKING:
    from podmortem.reports.failure import FailureReport


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
            "file is told by its content (--kind forces one); several files are one report. "
            "Given pod/NAME, job/NAME or trainingjob/NAME instead, it reads the same from the cluster "
            "with your kubeconfig (the pods, their failed containers' logs, their Events), with "
            "nothing of podmortem installed there."
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
            "  podmortem diagnose dmesg.txt pod.yaml train.log     # one report from all three\n"
            "  podmortem diagnose pod/ddp-master-0 -n ml            # from the cluster, read-only\n"
            "  podmortem diagnose tj/pointgroup --node-kernel-log   # and the node's dmesg (writes a pod)\n\n"
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
        "for standard input (the default when piped); several are combined into one report. Or one "
        "pod/NAME, job/NAME or trainingjob/NAME (tj/NAME), read from the cluster",
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
        help="print the last report as a self-contained HTML page, the one podmortem report draws (no "
        "timeline: a record or a status holds none)",
    )
    parser.add_argument("--list-examples", action="store_true", help="list the bundled records and exit")
    diagnose_cluster.add_arguments(parser)
    parser.set_defaults(func=run)


# -- input -----------------------------------------------------------------------------------------


def _examples() -> dict[str, dict[str, str]]:
    index = resources.files("podmortem").joinpath("examples", "index.json")
    data: dict[str, dict[str, str]] = json.loads(index.read_text(encoding="utf-8"))
    return data


# -- command ---------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.list_examples:
        for name, meta in _examples().items():
            print(f"{name:24} {meta['title']}")
        return EXIT_OK

    targets = [t for t in map(diagnose_cluster.parse_target, args.files) if t is not None]
    if targets:
        if len(args.files) > 1 or args.example is not None:
            print("podmortem diagnose: pod/NAME is read from the cluster alone: give it without files "
                  "or --example (one target at a time)", file=sys.stderr)
            return EXIT_INPUT
        return diagnose_cluster.run(args, targets[0])

    # Loaded when the command runs, not when it is registered beside the others: they bring the
    # parsers, the rules and the report models.
    from podmortem.cli import diagnose_files, diagnose_kernel
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
    reports = diagnose_kernel.kernel_reports(read.records)

    if args.json:
        doc = {"reports": [r.model_dump(mode="json") for r in reports], "input": read.document()}
        print(json.dumps(doc, indent=2))
    elif args.html and reports:
        return _html(reports, label)
    if not reports:
        binary = diagnose_files.looks_binary(read.head)
        why = " (it looks like binary data, not a kernel log)" if binary else ""
        print(f"podmortem diagnose: no kernel OOM-kill record found in {label}{why}", file=sys.stderr)
        return EXIT_NO_RECORD
    if not args.json:
        sys.stdout.write(diagnose_kernel.render(reports))
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
