"""``podmortem report``: a stored failure report as the same HTML page the operator serves.

For a ticket or a laptop: the JSON of ``kubectl get tj NAME -o json`` (its
``status.failureReport``), of the report alone, of the ``podmortem.io/failure-report``
annotation, or of ``podmortem diagnose --json`` becomes one self-contained HTML file;
``--from-status`` reads the object through the API with the kubeconfig the other commands use. The
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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podmortem.kube.config import ClusterAccess

EXIT_OK = 0
EXIT_API = 1
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
            "  podmortem report --from-status pointgroup -n ml -o report.html\n"
            "  podmortem report --from-status /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/ddp\n"
            "  kubectl get pytorchjob ddp -o jsonpath='{.metadata.annotations.podmortem\\.io/failure-report}'"
            " | podmortem report --json -\n\n"
            "exit codes: 0 page written, 1 the API unusable (kubeconfig, connection, access), "
            "2 input unreadable, not found or not a report"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--json", dest="json_file", metavar="FILE", help="the report's JSON ('-' for standard input)"
    )
    source.add_argument(
        "--from-status",
        metavar="JOB",
        help="a TrainingJob's name, or the API path of another kind's object (/apis/...), read from the API",
    )
    parser.add_argument("-n", "--namespace", help="the TrainingJob's namespace (default: the kubeconfig's)")
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, then the pod's service account, then ~/.kube/config)",
    )
    parser.add_argument(
        "-o", "--output", metavar="OUT", help="write the page here (default: standard output)"
    )
    parser.set_defaults(func=run)


def find_report(doc: object) -> tuple[str | None, dict[str, Any]] | None:
    """The report inside what ``kubectl`` or ``diagnose --json`` prints, and a title for it (None: the
    report's own pod names it)."""
    if not isinstance(doc, Mapping):
        return None
    from podmortem.kube.bodies import Body
    from podmortem.reports.stored_report import StoredReport

    if isinstance(doc.get("metadata"), Mapping):  # a whole object: where the operator stores its report
        obj = Body(doc)
        stored = StoredReport.locate(doc)  # Unreadable: the caller says why
        return (f"{obj.namespace}/{obj.name}", stored.raw) if stored is not None else None
    reports = doc.get("reports")
    if isinstance(reports, list) and reports and isinstance(reports[-1], dict):
        return "kernel OOM record", reports[-1]
    if "verdict" in doc or "findings" in doc:
        return None, dict(doc)
    return None


class ApiUnusable(Exception):
    """The kubeconfig, the connection or the access failed: exit 1."""


def object_path(job: str, namespace: str) -> str:
    """The API path of ``job``: a TrainingJob by name, or an object's path as given."""
    if job.startswith("/"):
        return job
    from podmortem.operator import jobs

    return jobs.trainingjob_path(namespace, job)


async def fetch(access: ClusterAccess, path: str) -> object:
    """The object at ``path`` (JSON), read with the kubeconfig's credentials; None when it does not exist."""
    import aiohttp

    from podmortem.kube import clients
    from podmortem.kube.api import KubeError
    from podmortem.kube.session import ApiSession

    try:
        async with ApiSession(access, timeout_s=30.0) as api:
            return await api.request("GET", path)
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise ApiUnusable(f"GET {path}: HTTP {exc.status}: {exc.body.strip()[:300]}") from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ApiUnusable(clients.describe_connection_error(exc, access)) from exc


def read_from_api(args: argparse.Namespace) -> object:
    import asyncio

    from podmortem.kube import config as kubeconfig

    try:
        access = kubeconfig.load(args.kubeconfig)
    except kubeconfig.KubeconfigError as exc:
        raise ApiUnusable(str(exc)) from exc
    path = object_path(args.from_status, args.namespace or access.namespace or "default")
    doc = asyncio.run(fetch(access, path))
    if doc is None:
        raise LookupError(f"{path} not found")
    return doc


def run(args: argparse.Namespace) -> int:
    source = args.json_file or args.from_status
    try:
        if args.from_status:
            doc = read_from_api(args)
        else:
            text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
            doc = json.loads(text)
    except ApiUnusable as exc:
        print(f"podmortem report: error: {exc}", file=sys.stderr)
        return EXIT_API
    except RecursionError:
        print(f"podmortem report: cannot read {source}: JSON nested deeper than Python parses",
              file=sys.stderr)
        return EXIT_INPUT
    except (OSError, ValueError, LookupError) as exc:
        print(f"podmortem report: cannot read {source}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    return render_document(doc, source, output=args.output)


def render_document(
    doc: object,
    source: str,
    *,
    output: str | None,
    title: str | None = None,
    log_note: str = "a stored report holds no log lines; the operator's page adds them from its log store",
    command: str = "podmortem report",
) -> int:
    """Write the page of the report in ``doc`` (what `find_report` takes); the exit code.

    Also `podmortem diagnose --html`'s page for a pod status or a training log: the same document its
    ``--json`` prints, drawn by the same code, so the two pages cannot differ."""
    from podmortem.render import page
    from podmortem.reports import stored_bounds
    from podmortem.reports.document import ReportDocument

    try:
        found = find_report(doc)
    except stored_bounds.Unreadable as exc:
        print(f"{command}: cannot read the report in {source}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if found is None:
        print(
            f"{command}: {source} holds no failure report (expected a TrainingJob with "
            "status.failureReport, an object with the podmortem.io/failure-report annotation, a report, "
            "or podmortem diagnose --json)",
            file=sys.stderr,
        )
        return EXIT_INPUT
    found_title, stored = found
    try:
        report = ReportDocument.parse(stored_bounds.checked(stored))
    except stored_bounds.Unreadable as exc:
        print(f"{command}: cannot read the report in {source}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    title = title or found_title
    if title is None:
        title = "/".join(p for p in (report.pod.namespace, report.pod.name) if p) or "failure report"
    if isinstance(doc, Mapping) and isinstance(doc.get("reports"), list) and len(doc["reports"]) > 1:
        print(f"{command}: {len(doc['reports'])} reports; the page shows the last", file=sys.stderr)
    now = datetime.now(UTC)
    html = page.render(page.PageInput(title=title, report=report, log_note=log_note, generated_at=now))
    return write(html, output)


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
