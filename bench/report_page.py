"""Benchmark: the report page for a job of 8 pods with 360 samples each, against a baseline.

The input is a real diagnosis (the bundled fork-cow record) with its context as the operator
stores it, a job section of 8 rows, 40 log lines and 5 epoch peaks; each pod has 360 agent
samples (an hour at 10 s) with 4 processes' PSS (the trainer and 3 workers appearing later).
Measured: `reports.page.render` of the root-cause pod's page (its 360 samples drawn, stacked
PSS bands, the 8 job rows), and the 8 pods' pages one after another (as if every pod were
opened). Baseline, in the same run: ``json.dumps`` of the same input (the report and the
samples), the least any server must do to send the same data. Goals: under 100 ms per page,
under 500 KB.

Usage: python bench/report_page.py [--pods 8] [--samples 360] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from podmortem.diagnosis import from_record
from podmortem.kernel import oom_parser
from podmortem.render import page
from podmortem.reports import timeline_model as tm
from podmortem.reports.document import ReportDocument
from podmortem.reports.memory import MemorySample, ProcessMemory
from podmortem.reports.units import GIB, MIB

EXAMPLE = Path(oom_parser.__file__).resolve().parents[1] / "examples" / "fork-cow-6.18.log"
T0 = datetime(2024, 5, 1, 11, 0, 0, tzinfo=UTC)


def report(pods: int) -> dict[str, object]:
    record = oom_parser.parse_text(EXAMPLE.read_text(encoding="utf-8"))[0]
    doc = from_record.diagnose(record).model_dump(mode="json")
    kill = T0 + timedelta(hours=1)
    doc |= {
        "pod": {
            "namespace": "ml",
            "name": "ddp-worker-2",
            "container": "trainer",
            "exitCode": 137,
            "reason": "OOMKilled",
            "finishedAt": kill.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "reportedAt": kill.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "evidence": {
            "kernelRecord": {"state": "attached"},
            "errors": [],
            "log": {
                "url": "/logs/ml/ddp-worker-2?container=trainer",
                "lines": 123456,
                "lastLineAt": (kill - timedelta(seconds=40)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        },
        "job": {
            "pods": pods,
            "rows": [
                {
                    "pod": f"ddp-worker-{i}",
                    "rank": i,
                    "role": "root-cause" if i == 2 else "consequence",
                    "exitCode": 137 if i == 2 else 1,
                    "line": "Watchdog caught collective operation timeout " * 3,
                    "logUrl": f"/logs/ml/ddp-worker-{i}",
                }
                for i in range(pods)
            ],
        },
    }
    return doc


def samples(n: int) -> list[MemorySample]:
    out = []
    for i in range(n):
        procs = [ProcessMemory(pid=100, name="python3", pss_bytes=int(8 * GIB + i * 20 * MIB))]
        procs += [
            ProcessMemory(pid=200 + w, name="pt_worker", pss_bytes=int(1.5 * GIB))
            for w in range(3)
            if i > n // 3 * (w + 1) - 40
        ]
        out.append(
            MemorySample(
                at=T0 + timedelta(seconds=10 * i),
                usage_bytes=sum(p.pss_bytes or 0 for p in procs),
                limit_bytes=32 * GIB,
                processes=procs,
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=8)
    ap.add_argument("--samples", type=int, default=360)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    doc = report(args.pods)
    per_pod = [samples(args.samples) for _ in range(args.pods)]
    epochs = [
        tm.EpochPeak(at=T0 + timedelta(minutes=12 * e), epoch=e, peak_bytes=(20 + 2 * e) * GIB)
        for e in range(5)
    ]
    lines = [
        page.LogLine(at=T0 + timedelta(minutes=59, seconds=i), text=f"step {i} loss=0.{i:04d}")
        for i in range(40)
    ]

    def page_of(s: list[MemorySample]) -> str:
        return page.render(
            page.PageInput(
                title="ml/ddp", report=ReportDocument.parse(doc), samples=s, epochs=epochs, log_lines=lines
            )
        )

    def baseline(s: list[MemorySample]) -> str:
        return json.dumps({"report": doc, "samples": [x.model_dump(mode="json") for x in s]})

    def timed(fn: object, s: list[MemorySample]) -> float:
        best = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            fn(s)  # type: ignore[operator]
            best.append(time.perf_counter() - t)
        return statistics.median(best)

    page_of(per_pod[0]), baseline(per_pod[0])  # warm
    one = timed(page_of, per_pod[0])
    base = timed(baseline, per_pod[0])
    t = time.perf_counter()
    sizes = [len(page_of(s).encode()) for s in per_pod]
    all_pods = time.perf_counter() - t
    size = sizes[0]
    base_size = len(baseline(per_pod[0]).encode())
    print(
        f"pods {args.pods}, samples per pod {args.samples}, processes per sample up to 4, "
        f"repeat {args.repeat}"
    )
    print(f"page render (root pod, median): {one * 1e3:.1f} ms   goal < 100 ms")
    print(
        f"baseline json.dumps of the same report + samples (median): {base * 1e3:.1f} ms   "
        f"page/baseline {one / base:.2f}x"
    )
    print(f"all {args.pods} pods' pages, one after another: {all_pods * 1e3:.1f} ms")
    print(f"page size: {size / 1024:.1f} KiB   goal < 500 KB; the JSON baseline: {base_size / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
