"""Coverage-guided fuzzing (atheris, libFuzzer) of every parser of outside input, for a CPU budget each.

The targets are in ``bench/fuzz/``, one per parser: kernel text (``diagnose``'s reader and a
``/dev/kmsg`` record), a training log, a pod object, ``kubectl describe`` text, a sidecar's
termination message, an AdmissionReview body, watch stream lines and the log server's query
string. Each starts from its seeds (the tests' real inputs, and ``tests/fixtures/fuzz/<target>/``)
and runs until it has spent its CPU seconds, one after another, each in a process of its own.

A finding is an exception the parser does not document (libFuzzer writes the input as ``crash-*``),
an input that takes over ``--timeout`` seconds (``timeout-*``) or memory over 2 GiB (``oom-*``), or
the slowest input a target met when it still takes over ``--slow-ms`` of CPU time here, timed again
(best of 3) so that a pause of the machine is not one (``slow-*``). Every target's slowest input is
printed with its size and time. ``--save`` copies findings into ``tests/fixtures/fuzz/<target>/``,
where ``tests/diagnosis/test_fuzz_regressions.py`` replays them. Exit 1 when anything was found.

    python bench/fuzz.py [--cpu-s 20] [--only NAME] [--max-len 16384] [--timeout 5] [--slow-ms 100]
                         [--work DIR] [--save]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import importlib.util
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("kernel", "training_log", "pod_documents", "pod_describe", "sidecar_evidence",
           "admission_review", "watch_lines", "http_params")
FIXTURES = ROOT / "tests" / "fixtures" / "fuzz"


@dataclass
class Outcome:
    name: str
    cpu_s: float
    execs: int
    corpus: int
    coverage: str
    findings: list[Path]
    slowest_bytes: int
    slowest_s: float
    exit_code: int


def _target(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"fuzz_{name}", ROOT / "bench" / "fuzz" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _seeds(name: str) -> list[Path]:
    module = _target(name)
    found = {Path(p) for pattern in module.SEEDS for p in glob.glob(str(ROOT / pattern))}
    found |= set((FIXTURES / name).glob("*"))
    return sorted(p for p in found if p.is_file())


def _retimed(name: str, data: bytes, seeds: list[Path]) -> float:
    """CPU seconds of one input through the target's check, best of 3, after a seed warmed it up."""
    check = _target(name).check
    if seeds:
        check(seeds[0].read_bytes())
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        check(data)
        best = min(best, time.process_time() - t0)
    return best


def run(name: str, *, cpu_s: float, max_len: int, timeout: int, slow_ms: float, work: Path) -> Outcome:
    home = work / name
    shutil.rmtree(home, ignore_errors=True)
    corpus, findings = home / "corpus", home / "findings"
    corpus.mkdir(parents=True)
    findings.mkdir()
    seeds = _seeds(name)
    for i, seed in enumerate(seeds):
        (corpus / f"seed-{i:03d}").write_bytes(seed.read_bytes()[:max_len])
    env = dict(os.environ, PODMORTEM_FUZZ_CPU_S=str(cpu_s), PODMORTEM_FUZZ_SLOWEST=str(home / "slowest"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fuzz" / f"{name}.py"), f"-max_len={max_len}",
         f"-timeout={timeout}", "-rss_limit_mb=2048", f"-max_total_time={int(cpu_s * 4 + 60)}",
         f"-artifact_prefix={findings}/", "-print_final_stats=1", str(corpus)],
        env=env, capture_output=True, text=True, errors="replace", check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    (home / "stderr.txt").write_text(done.stderr)
    execs = [int(n) for n in re.findall(r"^#(\d+)\s", done.stderr, re.MULTILINE)]
    coverage = re.findall(r"\bcov: (\d+) ft: (\d+)", done.stderr)
    slowest = home / "slowest"
    if slowest.exists() and _retimed(name, slowest.read_bytes(), seeds) * 1000 > slow_ms:
        data = slowest.read_bytes()
        (findings / f"slow-{hashlib.sha1(data).hexdigest()}").write_bytes(data)
    return Outcome(
        name=name,
        cpu_s=(after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        execs=max(execs, default=0),
        corpus=len(list(corpus.iterdir())),
        coverage=f"{coverage[-1][0]}/{coverage[-1][1]}" if coverage else "?",
        findings=sorted(findings.iterdir()),
        slowest_bytes=len(slowest.read_bytes()) if slowest.exists() else 0,
        slowest_s=float((home / "slowest.s").read_text()) if slowest.exists() else 0.0,
        exit_code=done.returncode,
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpu-s", type=float, default=20.0, help="CPU seconds per target (default 20)")
    parser.add_argument("--only", action="append", choices=TARGETS, help="a target; repeat for several")
    parser.add_argument("--max-len", type=int, default=16384, help="longest input tried, bytes")
    parser.add_argument("--timeout", type=int, default=5, help="seconds after which an input is a finding")
    parser.add_argument("--slow-ms", type=float, default=100.0,
                        help="CPU milliseconds over which the slowest input, timed again, is a finding")
    parser.add_argument("--work", type=Path, default=Path("/tmp/podmortem-fuzz"),
                        help="corpora and findings")
    parser.add_argument("--save", action="store_true",
                        help="copy findings into tests/fixtures/fuzz/<target>/")
    args = parser.parse_args()
    print(f"{'target':<18} {'CPU s':>6} {'inputs':>9} {'corpus':>7} {'cov/ft':>11} {'findings':>8}  "
          "slowest input")
    total_cpu, found = 0.0, 0
    for name in args.only or TARGETS:
        out = run(name, cpu_s=args.cpu_s, max_len=args.max_len, timeout=args.timeout, slow_ms=args.slow_ms,
                  work=args.work)
        total_cpu += out.cpu_s
        found += len(out.findings)
        slowest = f"{out.slowest_bytes:,} bytes in {out.slowest_s * 1000:.1f} ms"
        print(f"{name:<18} {out.cpu_s:6.1f} {out.execs:9,} {out.corpus:7} {out.coverage:>11} "
              f"{len(out.findings):8}  {slowest}", flush=True)
        for finding in out.findings:
            log = args.work / name / "stderr.txt"
            print(f"    {finding.name} ({finding.stat().st_size} bytes); log: {log}")
            if args.save:
                (FIXTURES / name).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(finding, FIXTURES / name / finding.name)
        if not out.findings and out.exit_code != 0:
            log = args.work / name / "stderr.txt"
            print(f"    exited {out.exit_code} with no finding written; log: {log}")
    print(f"{total_cpu:.0f} CPU seconds in all; {found} finding(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
