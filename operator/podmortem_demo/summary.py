"""The demo's closing table, and what did not go as the story says it should.

The demo is also a check: the baseline must be OOM-killed and reported with a
verdict, the patched run must succeed, and every log line must arrive exactly
once, in order, through at least one stream cut. Anything else is named, and
``podmortem demo`` exits 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from podmortem_demo import stored as stored_reports
from podmortem_demo import trainer
from podmortem_demo.runner import RECORDED_LABEL, RunResult, pod_peak_words


def problems(results: Sequence[RunResult]) -> list[str]:
    """Each way the runs differ from the expected story, in words; empty when all went right."""
    out: list[str] = []
    for r in results:
        status = r.training_job.get("status") or {}
        phase = status.get("phase")
        report = stored_reports.read(r.training_job)
        if r.policy == trainer.FRESH_FORK:
            if phase != "Failed" or r.reason != "OOMKilled":
                out.append(
                    f"{r.policy}: expected an OOM kill, got phase {phase}, exit {r.exit_code} ({r.reason})"
                )
            elif report is None or not report.report.verdict:
                out.append(f"{r.policy}: the failure report has no verdict")
        elif phase != "Succeeded":
            out.append(
                f"{r.policy}: expected the job to succeed, got phase {phase}, exit {r.exit_code} ({r.reason})"
            )
        elif warnings(r):
            # The fix removes the growth: a projection to the limit means it did not.
            out.append(f"{r.policy}: succeeded, but was warned: {warnings(r)[-1]}")
        if phase == "Succeeded" and any(
            c.get("type") == "MemoryPressure" and c.get("status") == "True"
            for c in status.get("conditions") or []
        ):
            out.append(f"{r.policy}: the job succeeded but still shows MemoryPressure True")
        log = r.log
        if log.lost or log.duplicated or not log.in_order:
            out.append(
                f"{r.policy}: log lost {log.lost}, duplicated {log.duplicated} line(s)"
                + ("" if log.in_order else ", out of order")
            )
        if log.cuts < 1:
            out.append(f"{r.policy}: no stream cut was served, so reconnecting was not shown")
    return out


def warnings(result: RunResult) -> list[str]:
    """The job's own ``MemoryPressure`` warnings (its Events), oldest first: the summary shows them for
    every run, the one that succeeded too."""
    return [
        str(e.get("message", ""))
        for e in result.events
        if e.get("reason") == "MemoryPressure" and e.get("type") == "Warning"
    ]


def warnings_text(result: RunResult) -> str:
    found = warnings(result)
    if not found:
        return "no MemoryPressure warning"
    return f"{len(found)} MemoryPressure warning(s), the last: {found[-1]}"


def table(results: Sequence[RunResult], *, limit_bytes: int) -> str:
    """One line per run: outcome, the pod's peak against its limit (and what measured it), verdict and
    findings, log delivery, kernel.

    The peak is printed as ``status.memory.peakOfLimit`` prints one (``256Mi/256Mi (100%)``); in
    recorded mode the verdict is marked as coming from the recorded kernel record.
    """
    lines = ["summary:"]
    for r in results:
        status = r.training_job.get("status") or {}
        report = stored_reports.read(r.training_job)
        peak = pod_peak_words(r.training_job)
        verdict = "no failure report"
        if report is not None:
            verdict = f"verdict {report.report.verdict} ({stored_reports.finding_codes(report)})"
        if report and r.kernel == "recorded" and r.kernel_record is not None:
            verdict += f" [{report.report.record_source or RECORDED_LABEL}]"
        lines.append(
            f"  {r.policy:<11} {status.get('phase', '?'):<9} exit {r.exit_code} {r.reason:<10} "
            f"pod peak {peak}  {verdict}; {warnings_text(r)}; "
            f"log {r.log.delivered}/{r.log.produced} lines, "
            f"lost {r.log.lost}, duplicated {r.log.duplicated}, cuts {r.log.cuts}; kernel {r.kernel}; "
            f"{r.seconds:.1f} s"
        )
    return "\n".join(lines)
