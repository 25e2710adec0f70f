"""Pure control logic: option parsing, the early-warning projection, termination spotting, report sizing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from podmortem.diagnosis import termination, verdicts
from podmortem.kernel import oom_parser
from podmortem.memory_line import projection
from podmortem.operator import jobs, watch_options
from podmortem.reports.document import Evidence, PodContext, ReportDocument, WorkingSetEvidence

DEFAULTS = watch_options.WatchOptions()
GIB = 2**30
RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"


def test_good_annotations_are_taken() -> None:
    options, problems = watch_options.from_annotations(
        {
            "podmortem.io/follow-logs": "false",
            "podmortem.io/containers": "trainer, sidecar",
            "podmortem.io/log-retention": "3d,2Gi",
            "podmortem.io/memory-warning-ratio": "0.8",
        },
        defaults=DEFAULTS,
    )
    assert problems == []
    assert options.follow_logs is False and options.containers == ("trainer", "sidecar")
    assert options.log_retention == watch_options.Retention(max_age_s=3 * 86400, max_bytes=2 * GIB)
    assert options.memory_warning_ratio == 0.8


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("podmortem.io/follow-logs", "maybe", "expected true or false"),
        ("podmortem.io/containers", "Trainer_1", "not container names"),
        ("podmortem.io/log-retention", "forever", "neither an age"),
        ("podmortem.io/memory-warning-ratio", "1.5", "at most 1"),
        ("podmortem.io/memory-warning-ratio", "nan", "at most 1"),
        ("podmortem.io/early-warning-epochs", "0", "at least 1"),
    ],
)
def test_bad_annotation_names_itself_and_keeps_the_default(key: str, value: str, words: str) -> None:
    options, problems = watch_options.from_annotations({key: value}, defaults=DEFAULTS)
    assert options == DEFAULTS
    [problem] = problems
    assert problem.option == key and words in problem.reason
    assert (
        problem.message().startswith(f"{key}={value!r} is invalid")
        and "using the default" in problem.message()
    )


def test_spec_options_use_spec_field_names() -> None:
    _, problems = watch_options.from_spec(
        {"memoryWarningRatio": 3, "earlyWarningEpochs": True}, defaults=DEFAULTS
    )
    assert [p.option for p in problems] == ["spec.memoryWarningRatio", "spec.earlyWarningEpochs"]


def test_watch_annotation_must_say_true() -> None:
    assert watch_options.is_watched({"podmortem.io/watch": "True"})
    assert not watch_options.is_watched({"podmortem.io/watch": "yes"})
    assert not watch_options.is_watched(None)


def peaks(values_gib: list[float]) -> list[projection.EpochPeak]:
    return [projection.EpochPeak(epoch=i, peak_bytes=int(v * GIB)) for i, v in enumerate(values_gib)]


def test_steady_growth_projected_to_cross_within_k_warns() -> None:
    pressure = projection.assess(
        peaks([20, 22, 24, 26]), limit_bytes=32 * GIB, within_epochs=3, warning_ratio=0.95
    )
    assert pressure is not None and not pressure.over_ratio
    assert pressure.epochs_to_limit == pytest.approx(3.0)
    assert pressure.crossing_epoch == 6
    assert "projected to cross the limit at epoch 6" in pressure.message()


def test_growth_crossing_later_than_k_or_not_steady_does_not_warn() -> None:
    assert (
        projection.assess(
            peaks([10, 11, 12, 13]), limit_bytes=32 * GIB, within_epochs=3, warning_ratio=0.95
        )
        is None
    )
    assert (
        projection.assess(
            peaks([20, 26, 25, 26]), limit_bytes=32 * GIB, within_epochs=3, warning_ratio=0.95
        )
        is None
    )
    assert (
        projection.assess(peaks([20, 22]), limit_bytes=32 * GIB, within_epochs=3, warning_ratio=0.95)
        is None
    )
    assert (
        projection.assess(peaks([20, 22, 24]), limit_bytes=None, within_epochs=3, warning_ratio=0.9)
        is None
    )


def test_flat_peak_above_ratio_warns_without_projection() -> None:
    pressure = projection.assess(
        peaks([30, 30, 30]), limit_bytes=32 * GIB, within_epochs=3, warning_ratio=0.9
    )
    assert pressure is not None and pressure.over_ratio and pressure.epochs_to_limit is None


def pod(**status: object) -> dict[str, object]:
    return {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u1"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": status,
    }


def test_termination_found_for_every_failed_exit_oomkilled_and_evicted() -> None:
    oom = pod(
        containerStatuses=[
            {
                "name": "c",
                "state": {
                    "terminated": {"exitCode": 137, "reason": "OOMKilled", "containerID": "containerd://ab"}
                },
            }
        ]
    )
    [found] = termination.find(oom)
    assert (found.container, found.container_id, found.reason, found.node) == (
        "c",
        "containerd://ab",
        "OOMKilled",
        "n1",
    )
    restarted = pod(
        containerStatuses=[
            {
                "name": "c",
                "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 137, "containerID": "x://1"}},
            }
        ]
    )
    assert [t.container_id for t in termination.find(restarted)] == ["x://1"]
    assert (
        termination.find(pod(containerStatuses=[{"name": "c", "state": {"terminated": {"exitCode": 0}}}]))
        == []
    )
    exit_1 = pod(containerStatuses=[{"name": "c", "state": {"terminated": {"exitCode": 1}}}])
    [failed] = termination.find(exit_1)
    assert failed.exit_code == 1
    [evicted] = termination.find(pod(reason="Evicted", message="The node was low on resource: memory."))
    assert evicted.pod_reason == "Evicted" and evicted.container == "c"


def test_verdict_from_a_real_record_and_stale_log() -> None:
    record = oom_parser.parse_text((RECORDS / "12-fedora-global-journal-newtable-lkml.log").read_text())[0]
    [t] = termination.find(
        pod(
            containerStatuses=[
                {
                    "name": "c",
                    "state": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "OOMKilled",
                            "containerID": "containerd://ab",
                            "finishedAt": "2024-05-01T12:00:00Z",
                        }
                    },
                }
            ]
        )
    )
    from podmortem.reports.evidence import PodEvidence

    report = verdicts.diagnose_termination(
        termination=t,
        evidence=PodEvidence(pod_uid="u1", kernel_records=[record]),
        last_line_ns=int(1714557600 * 1e9),  # 10:00, two hours before the kill
        stale_after_s=600,
    )
    assert report.verdict == "global-oom"
    assert report.finding("stale-log") is not None


def test_sizes_of_status_report_and_annotation_summary() -> None:
    record = oom_parser.parse_text((RECORDS / "02-k8s-v1-syslog-kmem-runc-el7.log").read_text())[0]
    from podmortem import diagnosis

    report = diagnosis.diagnose(record)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    document = ReportDocument(
        report=report,
        pod=PodContext(name="p"),
        evidence=Evidence(
            working_set=WorkingSetEvidence(points=[(start + timedelta(seconds=i), i) for i in range(2000)]),
            errors=["x" * 500] * 5,
        ),
    )
    doc = document.to_status(max_bytes=16 * 1024)
    assert len(json.dumps(doc, separators=(",", ":"))) <= 16 * 1024
    assert doc["verdict"] == "memcg-limit" and doc["findings"]
    small = document.to_annotation(max_bytes=1024)
    assert len(json.dumps(small, separators=(",", ":"))) <= 1024 and small["verdict"] == "memcg-limit"


def test_pod_of_a_trainingjob_is_owned_and_never_restarts_by_default() -> None:
    tj = {
        "metadata": {"name": "t", "namespace": "ns", "uid": "u"},
        "spec": {
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }
        },
    }
    built = jobs.build_pod(tj)
    assert built["metadata"]["name"] == "t-train" and built["spec"]["restartPolicy"] == "Never"
    assert built["metadata"]["ownerReferences"][0]["uid"] == "u"
    assert built["metadata"]["labels"] == {
        "a": "b",
        jobs.TRAININGJOB_LABEL: "t",
        jobs.TRAININGJOB_UID_LABEL: "u",
    }
    assert jobs.template_problems(tj["spec"]) == []
    assert (
        "has no image" in jobs.template_problems({"template": {"spec": {"containers": [{"name": "c"}]}}})[0]
    )


def test_a_huge_bad_value_is_quoted_in_part() -> None:
    problem = watch_options.OptionProblem(option="podmortem.io/log-retention", value="x" * 100_000,
                                        reason="expected AGE[,SIZE]", default="7d")
    message = problem.message()
    assert len(message) < 400 and "... (100000 characters)" in message
