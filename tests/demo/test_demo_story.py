"""One `podmortem demo` run tells one story: every figure for the pod's memory agrees, says what it is,
in the same units, and what came from a recorded kernel record says so.

Each mode runs the demo once (real kernel where this machine allows it, and
recorded) and collects every place a figure shows: the per-epoch memory lines,
the MemoryPressure condition and its Event, ``status.memory``, the progress line
at the container's exit, the summary, the report's working set.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import pytest

from podmortem import memory_line
from podmortem.memory_line.status import peak_of_limit, short_size
from podmortem_demo import kernel, runner, summary
from podmortem_demo.runner import DemoSettings, RunResult

MIB = 2**20
LIMIT = 256 * MIB
PRESSURE = re.compile(
    r"epoch (?P<epoch>\d+): epoch peak (?P<epoch_peak>\S+) of the (?P<limit>\S+) limit \((?P<share>\d+%)\), "
    r"pod peak so far (?P<pod_peak>\S+) \((?P<pod_share>\d+%)\)"
)


@dataclass
class Story:
    mode: kernel.KernelMode
    results: list[RunResult]
    progress: str
    summary: str


@pytest.fixture(scope="module", params=["real", "recorded"])
def story(request: pytest.FixtureRequest) -> Story:
    mode: kernel.KernelMode = request.param
    if mode == "real":
        choice = kernel.choose("auto")
        if choice.mode != "real":
            pytest.skip(
                "needs a writable memory cgroup and a readable /dev/kmsg: " + "; ".join(choice.reasons)
            )
    out = io.StringIO()
    choice, results = runner.Demo(DemoSettings(kernel=mode), progress=out).run()
    assert choice.mode == mode
    assert summary.problems(results) == []
    return Story(mode, results, out.getvalue(), summary.table(results, limit_bytes=LIMIT))


def run_section(story: Story, index: int) -> str:
    """The progress (describe included) of the index-th run."""
    parts = re.split(r"^== run \d+/\d+: .*$", story.progress, flags=re.MULTILINE)
    return parts[index + 1]


def parsed_lines(result: RunResult) -> dict[int, memory_line.MemoryLine]:
    found = {}
    for text in result.memory_lines:
        line = memory_line.parse(text)
        assert line is not None and line.pod is not None
        found[line.epoch] = line
    return found


def conditions(result: RunResult) -> dict[str, dict[str, str]]:
    return {c["type"]: c for c in result.training_job["status"].get("conditions") or []}


def test_memory_pressure_quotes_the_memory_line_and_status_memory_figures(story: Story) -> None:
    baseline = story.results[0]
    pressure = conditions(baseline).get("MemoryPressure")
    assert pressure is not None, "the baseline grows 80 MiB an epoch: the early warning must fire"
    match = PRESSURE.search(pressure["message"])
    assert match is not None, pressure["message"]
    line = parsed_lines(baseline)[int(match["epoch"])]
    assert line.pod is not None and line.pod.epoch_peak_bytes is not None
    # The figure the projection is fitted to, named "epoch peak", is that epoch's line's epoch peak...
    assert match["epoch_peak"] == short_size(line.pod.epoch_peak_bytes)
    # ...and the pod peak it quotes is that line's, exactly as status.memory.peakOfLimit shows it.
    assert f"{match['pod_peak']}/{match['limit']} ({match['pod_share']})" == peak_of_limit(
        line.pod.peak_bytes, line.pod.limit_bytes
    )
    assert match["limit"] == "256Mi"
    events = [e["message"] for e in baseline.events if e["reason"] == "MemoryPressure"]
    assert events == [pressure["message"]]


def test_status_memory_is_the_last_memory_line_until_the_kernels_record_names_the_peak(story: Story) -> None:
    for result in story.results:
        memory = result.training_job["status"]["memory"]
        line = parsed_lines(result)[memory["epoch"]]
        assert line.epoch == max(parsed_lines(result)) and line.pod is not None
        assert memory["podLimitBytes"] == LIMIT == line.pod.limit_bytes  # the pod's limit, not the host's
        report = result.training_job["status"].get("failureReport")
        if report is None:  # the run that succeeded: the last memory line's peak, named so
            assert memory["podPeakBytes"] == line.pod.peak_bytes
            assert memory["peakOfLimit"] == peak_of_limit(line.pod.peak_bytes, LIMIT, source="memory line")
            assert memory["peakSource"] == f"the trainer's memory line (epoch {line.epoch})"
            continue
        # The run the kernel killed: its usage at the kill is the peak, above every line's.
        usage = report["cgroup"]["usage_bytes"]
        assert usage >= line.pod.peak_bytes * 0.99
        assert memory["podPeakBytes"] == usage == report["evidence"]["peak"]["peakBytes"]
        word = "recorded kernel" if story.mode == "recorded" else "kernel"
        assert memory["peakOfLimit"] == peak_of_limit(usage, LIMIT, source=word)
        assert memory["peakSource"] == report["evidence"]["peak"]["source"]
        assert memory["peakSource"].startswith("the kernel's OOM record at the kill")


def test_the_summary_and_the_progress_name_the_trainingjobs_one_peak(story: Story) -> None:
    summary_lines = story.summary.splitlines()[1:]
    for i, result in enumerate(story.results):
        words = runner.pod_peak_words(result.training_job)
        memory = result.training_job["status"]["memory"]
        assert words == f"{memory['peakOfLimit']} from {memory['peakSource']}"
        assert f"pod peak {words}" in summary_lines[i]
        section = run_section(story, i)
        assert f"pod peak {words} (the same in status.memory and the Peak/Limit column" in section
        # No other peak figure of the pod: the exit line names none.
        exit_line = next(line for line in section.splitlines() if "container exited" in line)
        assert "peak" not in exit_line


def test_the_killed_runs_peak_is_the_kernel_records_usage(story: Story) -> None:
    baseline = story.results[0]
    cgroup = baseline.training_job["status"]["failureReport"]["cgroup"]
    assert cgroup["limit_bytes"] == LIMIT  # the recorded record too: scaled to the pod's limit
    word = "recorded kernel" if story.mode == "recorded" else "kernel"
    assert f"pod peak {peak_of_limit(cgroup['usage_bytes'], LIMIT, source=word)} from the kernel's" in (
        story.summary.splitlines()[1]
    )


def test_the_working_set_is_named_as_such_and_in_the_same_units(story: Story) -> None:
    baseline = story.results[0]
    ws = baseline.training_job["status"]["failureReport"]["evidence"]["workingSet"]
    section = run_section(story, 0)
    if not ws.get("peakBytes"):
        assert "working set in the report" not in section
        return
    # Samples, under the one peak, called what they are.
    assert ws["peakBytes"] <= baseline.training_job["status"]["memory"]["podPeakBytes"]
    assert f"the highest {short_size(ws['peakBytes'])} (usage less inactive file, sampled" in section
    assert f"Peak Bytes:  {ws['peakBytes']} ({short_size(ws['peakBytes'])})" in section


def test_no_figure_is_in_the_old_units(story: Story) -> None:
    # The memory lines (the runtime's format) print MiB with two decimals; nothing else prints GiB.
    text = "\n".join(line for line in story.progress.splitlines() if "-> memory epoch" not in line)
    assert not re.search(r"\d+\.\d\d GiB", text)
    assert not re.search(r"peak \d+Mi(?![/ ])", story.summary)


def test_the_run_that_succeeded_does_not_keep_memory_pressure(story: Story) -> None:
    patched = story.results[1]
    assert patched.training_job["status"]["phase"] == "Succeeded"
    pressure = conditions(patched).get("MemoryPressure")
    if pressure is not None:
        assert (pressure["status"], pressure["reason"]) == ("False", "JobSucceeded")


def test_the_pending_record_is_explained(story: Story) -> None:
    section = run_section(story, 0)
    if "kernel record pending" in section:
        assert "not at the node agent yet: the report and its Event say so" in section
        # The first report's Event, in describe: pending, not "not available".
        assert "The kernel's own record is not in yet" in section
        assert "kernel's own record was not available" not in section


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip())


def _labelled(lines: list[str], index: int) -> bool:
    """The line, or a line it is nested under (less indented, above it), carries the RECORDED label."""
    if runner.RECORDED_LABEL in lines[index]:
        return True
    indent = _depth(lines[index])
    for line in reversed(lines[:index]):
        if line.strip() and _depth(line) < indent:
            if runner.RECORDED_LABEL in line:
                return True
            indent = _depth(line)
            if indent == 0:
                break
    return False


def test_everything_from_the_recorded_record_is_labelled(story: Story) -> None:
    record = kernel.recorded_records()[0]
    text = story.progress + "\n" + story.summary
    if story.mode == "real":
        assert "RECORDED" not in text
        return
    lines = text.splitlines()
    markers = [f"pid {record.victim_pid}", f"Pid:  {record.victim_pid}", str(record.oom_memcg), "128.0 MiB",
               "kernel's OOM record at the kill"]
    hits = [i for i, line in enumerate(lines) if any(m in line for m in markers)]
    assert hits
    unlabelled = [lines[i] for i in hits if not _labelled(lines, i)]
    assert unlabelled == []
    baseline_summary = story.summary.splitlines()[1]
    assert baseline_summary.startswith("  fresh-fork") and runner.RECORDED_LABEL in baseline_summary
    for reason in ("KernelRecordAttached",):
        assert any(reason in line and runner.RECORDED_LABEL in line for line in lines)


def test_without_a_cgroup_the_memory_lines_are_the_pods_not_the_hosts(story: Story) -> None:
    for result in story.results:
        assert result.memory_lines and all(" of 256.00MiB " in line for line in result.memory_lines)
    if story.mode == "recorded":
        assert "pod memory: no memory cgroup holds this pod" in story.progress
        assert "Memory:  [summed charged PSS of the pod's processes" in story.progress
