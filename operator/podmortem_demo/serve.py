"""``podmortem demo --serve``: after the story, the cluster stays up for kubectl, a browser and more.

The emulated API, the operator (with its log server) and the node agent keep
running after the summary; a kubeconfig for the API is written to the work
directory (the temporary one, removed at the end, or ``--keep-dir``), and the
commands of the README's quick start are printed with the real names filled in.
SIGINT (Ctrl-C) or SIGTERM ends it: `serve` returns and `runner.Demo.run` stops
everything as it does after any story.

kubectl's ``get`` asks for a server-side Table; the emulated API answers one for
TrainingJobs from `TRAININGJOB_PRINTER_COLUMNS`, the CRD's printer columns
(``tests/demo/test_demo_serve.py`` checks they are the chart's), so ``kubectl get tj``
shows Phase, Epoch, Peak/Limit and Verdict as on a real cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from podmortem.operator import jobs, log_links
from podmortem.operator.settings import TRAININGJOB_GROUP, TRAININGJOB_PLURAL, TRAININGJOB_VERSION
from podmortem_demo import stored as stored_reports
from podmortem_demo.emulated import write_kubeconfig
from podmortem_demo.runner import DemoSettings, RunResult, Serving

#: The TrainingJob CRD's ``additionalPrinterColumns`` (charts/podmortem/crds/trainingjob.yaml), for
#: the emulated API's Tables: a wheel does not carry the chart, so the demo carries its columns.
TRAININGJOB_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Epoch", "type": "integer", "description": "Epoch of the last per-epoch memory line.",
     "jsonPath": ".status.memory.epoch"},
    {"name": "Peak/Limit", "type": "string",
     "description": "The pod's memory peak against its limit and where it came from: the last epoch's "
                    "memory line, or the kernel's usage at an OOM kill.",
     "jsonPath": ".status.memory.peakOfLimit"},
    {"name": "Verdict", "type": "string", "description": "What killed the pod, from the failure report.",
     "jsonPath": ".status.failureReport.verdict"},
    {"name": "Root-Cause-Pod", "type": "string",
     "description": "The pod the failure report names: the one that failed of its own (for a multi-pod "
                    "job, the first rank to do so; the others are its consequences).",
     "jsonPath": ".status.failureReport.pod.name"},
    {"name": "Pod", "type": "string", "priority": 1, "jsonPath": ".status.podName"},
    {"name": "Last-Log", "type": "date", "priority": 1, "description": "Time of the last log line kept.",
     "jsonPath": ".status.lastLogLineAt"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

#: The line `serve` prints last, once everything above it is true: scripts wait for it.
SERVING = "serving until Ctrl-C or SIGTERM"
KUBECONFIG_NAME = "kubeconfig"


def settings(base: DemoSettings) -> DemoSettings:
    """``base`` with the log server on a port chosen now, so the report links in the status are URLs."""
    port = free_port()
    return dataclasses.replace(base, log_http_port=port, log_base_url=f"http://127.0.0.1:{port}")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the log server binds it a moment later, reusing the address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def shown_job(results: list[RunResult]) -> RunResult | None:
    """The run to poke at: the one that failed with a report, else the first."""
    failed = [r for r in results if (r.training_job.get("status") or {}).get("failureReport")]
    shown = failed or results
    return shown[0] if shown else None


def podmortem_command() -> str:
    """How to run ``podmortem`` again from this shell: by name when on PATH, else as it was started."""
    found = shutil.which("podmortem")
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if started is not None and started.name == "podmortem":
        if found is not None and Path(found).resolve() == started.resolve():
            return "podmortem"
        return shlex.quote(str(started.resolve()))
    return "podmortem"


def instructions(serving: Serving, kubeconfig: Path, *, kept: bool, podmortem: str = "podmortem") -> str:
    """What runs, where, and the commands to try, with the real names, paths and URLs."""
    lines = [
        "",
        f"--serve: the emulated cluster, the operator and its log server keep running (pid {_pid()}).",
        f"  kubeconfig:  {kubeconfig}"
        + (" (kept in --keep-dir; its server is gone after exit)" if kept else " (removed at exit)"),
        f"  API server:  {serving.api_url} (emulated, plain HTTP, accepts any token)",
        f"  log server:  {serving.log_url} (the operator's; listens on 127.0.0.1 only, with auth off "
        "in the demo: no token needed)",
        "try:",
        f"  export KUBECONFIG={shlex.quote(str(kubeconfig))}",
        "  kubectl get tj                 # TrainingJobs, with the CRD's printer columns",
        "  kubectl get tj -o wide",
    ]
    run = shown_job(serving.results)
    if run is not None:
        meta = run.training_job.get("metadata") or {}
        status = run.training_job.get("status") or {}
        name = str(meta.get("name") or "")
        namespace = str(meta.get("namespace") or serving.namespace)
        pod = str(status.get("podName") or jobs.pod_name(name))
        report = stored_reports.read(run.training_job)
        page = (report.report_url if report is not None else None) or ""
        if not page.startswith(("http://", "https://")):
            page = log_links.report_url(serving.log_url, namespace=namespace, job=name)
        ns = "" if namespace == "default" else f" -n {namespace}"
        lines += [
            f"  kubectl describe tj {name}{ns}   # the report in its status, and its Events",
            f"  kubectl get tj {name}{ns} -o jsonpath='{{.status.failureReport.verdict}}{{\"\\n\"}}'",
            f"  kubectl get tj {name}{ns} -o jsonpath='{{.status.failureReport.reportUrl}}{{\"\\n\"}}'",
            f"  {podmortem} logs {pod} -n {namespace}   # the pod's log from the API, every line once",
            f"  curl -s {serving.log_url}/logs/{namespace}/{pod} | tail -3   # the copy the operator kept",
            f"  open in a browser: {page}",
        ]
    lines += [
        f"stop: Ctrl-C, or kill -TERM {_pid()}; everything shuts down and the demo exits "
        "with the story's status (0: it held)",
        f"{SERVING} (pid {_pid()})",
    ]
    return "\n".join(lines)


def serve(serving: Serving, *, stream: TextIO, keep: bool, podmortem: str | None = None) -> str | None:
    """Write the kubeconfig, print `instructions`, and wait for SIGINT or SIGTERM (or a crash).

    Returns None after a signal, or what stopped; the kubeconfig is removed unless ``keep``.
    """
    serving.cluster.sync(lambda: serving.api.printer_columns.update(
        {f"{TRAININGJOB_GROUP}/{TRAININGJOB_VERSION}/{TRAININGJOB_PLURAL}": TRAININGJOB_PRINTER_COLUMNS}))
    kubeconfig = write_kubeconfig(serving.workdir / KUBECONFIG_NAME, server=serving.api_url,
                                  namespace=serving.namespace)
    try:
        with _signals() as signalled:
            print(instructions(serving, kubeconfig, kept=keep, podmortem=podmortem or podmortem_command()),
                  file=stream, flush=True)
            while not signalled.wait(0.2):
                problem = serving.stopped()
                if problem is not None:
                    print(f"podmortem demo --serve: {problem}", file=stream, flush=True)
                    return problem
            print(f"\n{signalled.name}: stopping the operator and the emulated cluster", file=stream,
                  flush=True)
            return None
    finally:
        if not keep:
            kubeconfig.unlink(missing_ok=True)


class _Signalled(threading.Event):
    name = ""


@contextlib.contextmanager
def _signals() -> Iterator[_Signalled]:
    """SIGINT and SIGTERM set the event (and name themselves) instead of ending the process."""
    signalled = _Signalled()

    def handler(signum: int, _frame: FrameType | None) -> None:
        signalled.name = signal.Signals(signum).name
        signalled.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield signalled
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _pid() -> int:
    return os.getpid()
