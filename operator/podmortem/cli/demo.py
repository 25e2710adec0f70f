"""``podmortem demo``: the whole chain on this machine, twice: the job that dies, then the one that doesn't.

Registration imports nothing heavy; the demo itself needs the ``demo`` extra
(``pip install 'podmortem[demo]'``: the operator, the runtime patch and kmock).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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

Run 2: the same job with the runtime patch's validation-loader policy completes under
the same limit.

Without permission to create memory cgroups or read /dev/kmsg (run as root for the real
kernel), the demo says so and shows a recorded real kernel record instead, labelled
"recorded" everywhere. Takes about 15 seconds."""

EPILOG = """\
output:
  progress and the `kubectl describe` views go to stderr; with --json, stdout carries only
  {"runs": [{"policy": ..., "trainingJob": {...}, "log": {"produced": N, "delivered": N,
  "lost": 0, "duplicated": 0, "cuts": K}, "kernel": "real"|"recorded"}]}

exit codes:
  0  everything happened as it should: the baseline was OOM-killed and reported, the
     patched run succeeded, every log line was delivered exactly once
  1  something else happened (the summary says what)
  2  bad options, or the demo extra is not installed
  3  --kernel real, but this machine cannot create memory cgroups or read /dev/kmsg

examples:
  sudo podmortem demo
  podmortem demo --kernel recorded --json | jq '.runs[0].trainingJob.status.failureReport.verdict'
  podmortem demo --limit 384Mi --epochs 6 --val-policy none --keep-dir /tmp/podmortem-demo"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run the whole chain on this machine: a pod OOM-killed and reported, then fixed",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--json", action="store_true", help="print the runs as JSON on stdout (progress stays on stderr)"
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
        help="trainer epochs; each adds about 40 MiB of kept masks (default: %(default)s)",
    )
    p.add_argument(
        "--keep-dir",
        type=Path,
        metavar="DIR",
        help="keep the log store and agent state here (default: a temporary directory)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="give up on a run after this long (default: %(default)s)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr, only the result")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="also show the operator's, agent's and kopf's own logs"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    try:
        from podmortem.demo import kernel, quantity, runner, summary, trainer
    except ImportError as exc:
        print(f"podmortem demo: needs the demo extra (pip install 'podmortem[demo]'): {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        limit = quantity.parse_bytes(args.limit)
    except quantity.BadQuantity as exc:
        print(f"podmortem demo: --limit: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.epochs < 1:
        print("podmortem demo: --epochs must be at least 1", file=sys.stderr)
        return EXIT_USAGE

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        # kopf warns that it ignores OS signals in a thread: true, and the demo handles Ctrl-C itself.
        logging.getLogger("kopf").setLevel(logging.ERROR)

    settings = runner.DemoSettings(
        limit_bytes=limit,
        policies=(trainer.FRESH_FORK, args.val_policy),
        kernel=args.kernel,
        epochs=args.epochs,
        keep_dir=args.keep_dir,
        run_timeout_s=args.timeout,
    )
    progress = None if args.quiet else sys.stderr
    try:
        _choice, results = runner.Demo(settings, progress=progress).run()
    except kernel.KernelUnavailable as exc:
        print(f"podmortem demo: --kernel real is not possible here: {exc}", file=sys.stderr)
        return EXIT_NO_KERNEL
    except runner.DemoFailed as exc:
        print(f"podmortem demo: {exc}", file=sys.stderr)
        return EXIT_UNEXPECTED
    problems = summary.problems(results)
    if progress is not None or problems:
        print(summary.table(results, limit_bytes=limit), file=sys.stderr)
        for problem in problems:
            print(f"unexpected: {problem}", file=sys.stderr)
    if args.json:
        json.dump({"runs": [r.to_json() for r in results]}, sys.stdout)
        sys.stdout.write("\n")
    return EXIT_UNEXPECTED if problems else EXIT_OK
