"""``podmortem report``: a stored failure report as the same HTML page the operator serves.

For a ticket or a laptop: the JSON of ``kubectl get tj NAME -o json`` (its
``status.failureReport``), of the report alone, of the ``podmortem.io/failure-report``
annotation, or of ``podmortem diagnose --json`` becomes one self-contained HTML file. The
log lines and per-epoch peaks the operator adds from its log store are not in a stored
report, and the page says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_INPUT = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "report",
        help="render a stored failure report as an HTML page",
        description=(
            "Render a stored failure report as one self-contained HTML page (no JavaScript, no external "
            "files): the verdict, findings, memory timeline, kernel record, processes and log facts."
        ),
        epilog=(
            "examples:\n"
            "  kubectl get tj pointgroup -o json > tj.json\n"
            "  podmortem report --json tj.json -o report.html\n"
            "  kubectl get pytorchjob ddp -o jsonpath='{.metadata.annotations.podmortem\\.io/failure-report}'"
            " | podmortem report --json -\n\n"
            "exit codes: 0 page written, 2 input unreadable or not a report"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--json",
        dest="json_file",
        metavar="FILE",
        required=True,
        help="the report's JSON ('-' for standard input)",
    )
    parser.add_argument(
        "-o", "--output", metavar="OUT", help="write the page here (default: standard output)"
    )
    parser.set_defaults(func=run)


def find_report(doc: object) -> tuple[str, dict[str, Any]] | None:
    """The report inside what ``kubectl`` or ``diagnose --json`` prints, and a title for it."""
    if not isinstance(doc, Mapping):
        return None
    meta = doc.get("metadata")
    if isinstance(meta, Mapping):  # a whole object: TrainingJob status, or another kind's annotation
        title = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        report = (doc.get("status") or {}).get("failureReport")
        if isinstance(report, dict):
            return title, report
        text = (meta.get("annotations") or {}).get("podmortem.io/failure-report")
        if isinstance(text, str):
            try:
                summary = json.loads(text)
            except ValueError:
                return None
            return (title, summary) if isinstance(summary, dict) else None
        return None
    reports = doc.get("reports")
    if isinstance(reports, list) and reports and isinstance(reports[-1], dict):
        return "kernel OOM record", reports[-1]
    if "verdict" in doc or "findings" in doc:
        pod = doc.get("pod") if isinstance(doc.get("pod"), Mapping) else {}
        assert isinstance(pod, Mapping)
        return f"{pod.get('namespace', '')}/{pod.get('name', '')}".strip("/") or "failure report", dict(doc)
    return None


def run(args: argparse.Namespace) -> int:
    from podmortem.reports import page

    try:
        text = sys.stdin.read() if args.json_file == "-" else Path(args.json_file).read_text(encoding="utf-8")
        doc = json.loads(text)
    except (OSError, ValueError) as exc:
        print(f"podmortem report: cannot read {args.json_file}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    found = find_report(doc)
    if found is None:
        print(
            f"podmortem report: {args.json_file} holds no failure report (expected a TrainingJob with "
            "status.failureReport, an object with the podmortem.io/failure-report annotation, a report, "
            "or podmortem diagnose --json)",
            file=sys.stderr,
        )
        return EXIT_INPUT
    title, report = found
    if isinstance(doc, Mapping) and isinstance(doc.get("reports"), list) and len(doc["reports"]) > 1:
        print(f"podmortem report: {len(doc['reports'])} reports; the page shows the last", file=sys.stderr)
    html = page.render(
        page.PageInput(
            title=title,
            report=report,
            log_note="a stored report holds no log lines; the operator's page adds them from its log store",
            generated_at=datetime.now(UTC),
        )
    )
    return write(html, args.output)


def write(html: str, output: str | None) -> int:
    if output is None:
        sys.stdout.write(html)
        return EXIT_OK
    try:
        Path(output).write_text(html, encoding="utf-8")
    except OSError as exc:
        print(f"podmortem report: cannot write {output}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    print(f"podmortem report: wrote {output} ({len(html.encode()):,} bytes)", file=sys.stderr)
    return EXIT_OK
