"""``podmortem demo``: the whole chain on this machine, twice: the job that dies, then the one that doesn't.

Registration imports nothing heavy; the demo itself needs the ``demo`` extra
(``pip install 'podmortem[demo]'``: the operator, the runtime patch and kmock).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from podmortem_demo import runner

#: Policies the second run may use (podmortem_runtime.val_loader's; "fresh-fork" is the baseline).
PATCHED_POLICIES = ("none", "persistent", "forkserver", "spawn", "auto")

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_NO_KERNEL = 3

DESCRIPTION = """\
Run podmortem's whole chain on this machine, with nothing else installed: an emulated
Kubernetes API, the operator, the node agent, and a small kubelet that runs a real
trainer-like Python process as the pod's container in a real memory cgroup.

Run 1: the trainer's evaluation keeps a mask per proposal (memory grows each epoch) and
its validation loader forks fresh workers at every evaluation, leaving copy-on-write
copies of the grown heap. The kernel OOM-kills the pod at its limit. You see the log
followed through a stream cut with no line lost, the per-epoch memory lines, the kernel's
OOM record as the agent read it from /dev/kmsg, and the failure report the operator
writes into the TrainingJob status, printed like `kubectl describe`.

Run 2: the same job with the runtime patch's whole fix, its lean evaluator (no kept masks)
and its validation-loader policy, completes under the same limit with a flat heap, at any
--epochs.

Memory figures are in binary units (Mi, Gi) everywhere. Each job has one peak, named with
where it came from in the summary, status.memory (its Peak/Limit column), the report and
its page: the last per-epoch memory line's pod peak, or, once the kernel's record of an OOM
kill is in, the kernel's usage at the kill. The MemoryPressure projection is fitted to each
epoch's own peak (its message quotes both); the agent's working-set samples are called
samples. The summary lists each job's MemoryPressure warnings. A job that succeeds ends
with MemoryPressure False (JobSucceeded).

Without permission to create memory cgroups or read /dev/kmsg (run as root for the real
kernel), the demo says so and shows a recorded real kernel record instead, its sizes scaled
to the pod's limit; its label ("RECORDED, not from this run: ...; sizes scaled ...") is in
the TrainingJob itself (failureReport.record_source, the Failed condition, the Event, the
peak's source) and on the page, so kubectl, the page and --json show it; the demo kubelet
then enforces the limit on the pod's summed charged PSS, and the pod's memory figures are
that sum, not the host's cgroup. Takes about 15 seconds."""

EPILOG = """\
output:
  stdout: the summary, one line per run (with -q, that is all that is printed).
  stderr: progress and the `kubectl describe` views (none with -q), and anything unexpected.
  --json: stdout carries only {"runs": [{"policy": ..., "trainingJob": {...}, "log":
  {"produced": N, "delivered": N, "lost": 0, "duplicated": 0, "cuts": K}, "kernel":
  "real"|"recorded", "events": [{"type", "reason", "message"}, ...]}]}, and the summary goes
  to stderr (not with -q, unless unexpected)

exit codes:
  0  everything happened as it should: the baseline was OOM-killed and reported, the
     patched run succeeded without a MemoryPressure warning, every log line was delivered
     exactly once
  1  something else happened (the summary says what)
  2  bad options (checked before anything starts), or the demo extra is not installed
  3  --kernel real, but this machine cannot create memory cgroups or read /dev/kmsg
  with --serve, the same, once Ctrl-C or SIGTERM has stopped it (1 also if the cluster or the
  operator stopped while serving)

--serve:
  after the summary (or the JSON), the emulated cluster, the operator and its log server keep
  running; stderr then names a kubeconfig, the log server's URL (127.0.0.1 only, no auth) and
  commands to try (kubectl get tj, kubectl describe tj NAME, podmortem logs POD, the report
  page), and ends with a line "serving until Ctrl-C or SIGTERM (pid N)"

examples:
  sudo podmortem demo
  podmortem demo --kernel recorded --json | jq '.runs[0].trainingJob.status.failureReport.verdict'
  podmortem demo --limit 384Mi --epochs 6 --val-policy none --keep-dir /tmp/podmortem-demo
  podmortem demo --serve    # then, in another shell, the commands it prints"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run the whole chain on this machine: a pod OOM-killed and reported, then fixed",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--distributed",
        action="store_true",
        help="instead: a 4-rank PyTorchJob whose rank 2 is OOM-killed and whose other ranks fail after "
        "it (NCCL watchdog, remote error, torchrun SIGTERM); prints the job report naming the root "
        "cause. Uses --kernel, --limit (each rank's), --timeout, --keep-dir, --json, -q, -v, --kind",
    )
    p.add_argument(
        "--kind",
        choices=("pytorchjob", "jobset"),
        default="pytorchjob",
        help="with --distributed: what owns the 4 ranks' pods, a Kubeflow PyTorchJob (default) or a "
        "JobSet (jobset.x-k8s.io/v1alpha2; one child Job per rank, ranks from the JobSet's labels)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the runs as JSON on stdout instead of the summary (which goes to stderr)",
    )
    p.add_argument(
        "--kernel",
        choices=("auto", "real", "recorded"),
        default="auto",
        help="real OOM kills and /dev/kmsg, a recorded kernel record, or auto: real where "
        "permitted (default: %(default)s)",
    )
    p.add_argument(
        "--limit",
        default="256Mi",
        metavar="QUANTITY",
        help="the training pod's memory limit, e.g. 256Mi, 1Gi (default: %(default)s); the "
        "trainer's sizes are tuned for 256Mi",
    )
    p.add_argument(
        "--val-policy",
        choices=PATCHED_POLICIES,
        default="auto",
        help="the runtime patch's validation-loader policy for the second run (default: %(default)s)",
    )
    p.add_argument(
        "--epochs",
        type=int,
        default=4,
        metavar="N",
        help="trainer epochs; each adds about 40 MiB of kept masks to the baseline run (the patched "
        "run's lean evaluator keeps none) (default: %(default)s)",
    )
    p.add_argument(
        "--keep-dir",
        type=Path,
        metavar="DIR",
        help="keep the log store and agent state here; created if missing, must be writable "
        "(default: a temporary directory, removed at the end)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="give up on a run after this long; more than 0 (default: %(default)s)",
    )
    p.add_argument(
        "--serve",
        action="store_true",
        help="after the story, keep the emulated cluster, the operator and its log server running and "
        "print a kubeconfig and commands to try (kubectl get tj, kubectl describe tj, podmortem logs, the "
        "report page), until Ctrl-C or SIGTERM; the kubeconfig is written to --keep-dir, else to the "
        "temporary work directory and removed at exit. Not with --distributed",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress or describe on stderr: only the summary on stdout (with --json, only the JSON)",
    )
    p.add_argument(
        "-v", "--verbose", action="store_true",
        help="also show the operator's, agent's and kopf's own logs, and each job's whole describe",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    try:
        from podmortem import quantity
        from podmortem_demo import kernel, runner, summary, trainer
    except ImportError as exc:
        print(f"podmortem demo: needs the demo extra (pip install 'podmortem[demo]'): {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        limit = quantity.parse_bytes(args.limit)
    except quantity.BadQuantity as exc:
        return _usage(f"--limit: {exc}")
    if limit <= 0:
        return _usage(f"--limit must be more than 0, not {args.limit!r}")
    if args.epochs < 1:
        return _usage("--epochs must be at least 1")
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        return _usage(f"--timeout must be a number of seconds more than 0, not {args.timeout:g}")
    if args.serve and args.distributed:
        return _usage("--serve is for the single-job demo, not with --distributed")
    if args.kind != "pytorchjob" and not args.distributed:
        return _usage("--kind needs --distributed")
    if args.keep_dir is not None:
        problem = keep_dir_problem(args.keep_dir)
        if problem is not None:
            return _usage(f"--keep-dir {args.keep_dir}: {problem}")

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        # kopf warns that it ignores OS signals in a thread: true, and the demo handles Ctrl-C itself.
        logging.getLogger("kopf").setLevel(logging.ERROR)

    if args.distributed:
        return _run_distributed(args, limit)
    settings = runner.DemoSettings(
        limit_bytes=limit,
        policies=(trainer.FRESH_FORK, args.val_policy),
        kernel=args.kernel,
        epochs=args.epochs,
        keep_dir=args.keep_dir,
        run_timeout_s=args.timeout,
        full_describe=args.verbose,
    )
    progress = None if args.quiet else sys.stderr

    def finish(results: list[runner.RunResult]) -> int:
        return _finish(args, progress, table=summary.table(results, limit_bytes=limit),
                       document={"runs": [r.to_json() for r in results]}, problems=summary.problems(results))

    try:
        if args.serve:
            return _serve(args, settings, progress, finish)
        _choice, results = runner.Demo(settings, progress=progress).run()
    except kernel.KernelUnavailable as exc:
        print(f"podmortem demo: --kernel real is not possible here: {exc}", file=sys.stderr)
        return EXIT_NO_KERNEL
    except runner.DemoFailed as exc:
        print(f"podmortem demo: {exc}", file=sys.stderr)
        return EXIT_UNEXPECTED
    return finish(results)


def _serve(args: argparse.Namespace, settings: runner.DemoSettings, progress: TextIO | None,
           finish: Callable[[list[runner.RunResult]], int]) -> int:
    """``--serve``: the story and its summary (or JSON), then everything kept running until a signal.

    The exit status is the story's (0: it held), or 1 if the cluster or the operator stopped while
    serving."""
    from podmortem_demo import runner, serve

    code: list[int] = []

    def then(serving: runner.Serving) -> None:
        code.append(finish(serving.results))
        sys.stdout.flush()
        if serve.serve(serving, stream=sys.stderr, keep=args.keep_dir is not None) is not None:
            code.append(EXIT_UNEXPECTED)

    runner.Demo(serve.settings(settings), progress=progress).run(then=then)
    print("podmortem demo --serve: stopped"
          + ("" if args.keep_dir is not None else "; the work directory and its kubeconfig are removed"),
          file=sys.stderr, flush=True)
    return max(code, default=EXIT_UNEXPECTED)


def _run_distributed(args: argparse.Namespace, limit: int) -> int:
    """``--distributed``: the job report on stdout (or the PyTorchJob/JobSet as JSON), progress on stderr."""
    from podmortem_demo import distributed, kernel, runner

    settings = distributed.DistributedSettings(
        limit_bytes=limit, kernel=args.kernel, keep_dir=args.keep_dir, timeout_s=args.timeout, kind=args.kind
    )
    progress = None if args.quiet else sys.stderr
    try:
        result = distributed.DistributedDemo(settings, progress=progress).run()
    except kernel.KernelUnavailable as exc:
        print(f"podmortem demo: --kernel real is not possible here: {exc}", file=sys.stderr)
        return EXIT_NO_KERNEL
    except runner.DemoFailed as exc:
        print(f"podmortem demo: {exc}", file=sys.stderr)
        return EXIT_UNEXPECTED
    return _finish(args, progress, table=distributed.table(result), document=result.to_json(),
                   problems=distributed.problems(result))


def _finish(args: argparse.Namespace, progress: TextIO | None, *, table: str, document: object,
            problems: list[str]) -> int:
    """The table on stdout (or the JSON document, the table then on stderr); what went wrong; the exit."""
    if progress is not None:
        print(file=progress, flush=True)
    if args.json:
        json.dump(document, sys.stdout)
        sys.stdout.write("\n")
        if progress is not None or problems:
            print(table, file=sys.stderr)
    else:
        print(table, file=sys.stdout, flush=True)
    for problem in problems:
        print(f"unexpected: {problem}", file=sys.stderr)
    return EXIT_UNEXPECTED if problems else EXIT_OK


def _usage(message: str) -> int:
    print(f"podmortem demo: {message}", file=sys.stderr)
    return EXIT_USAGE


def keep_dir_problem(path: Path) -> str | None:
    """Why ``--keep-dir`` cannot hold the demo's files (created if missing), or None if it can."""
    if path.exists() and not path.is_dir():
        return "not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create it ({exc.strerror or exc})"
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        return f"cannot write there ({exc.strerror or exc})"
    return None
