"""End to end on kmock: TrainingJobs and annotated Jobs, from creation to the report after exit 137.

One emulated cluster and one operator serve the whole module (kopf's start and
stop have fixed delays). Prometheus is configured at a closed port throughout,
so every report also shows the fallback to the agent's samples.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.entrypoints import free_port

from podmortem.kernel import oom_parser
from podmortem.logs.storage.retention import JOB_OVERRIDE
from podmortem.memory_line import status as memory_status
from podmortem.operator.settings import PrometheusSettings
from podmortem.reports.evidence import PodEvidence
from podmortem_demo import harness as harness_mod
from podmortem_demo.emulated.kubelet import LineText
from podmortem_demo.harness import Harness, harness, kill, run_pod

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"
LOG_BASE = "http://podmortem.podmortem.svc:8080"
GIB = 2**30


closed_port = free_port  # one source of ports for every test: none handed out twice


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    tmp = tmp_path_factory.mktemp("operator")
    with harness(tmp) as h:
        h.add_agent_pod()
        settings = h.settings(
            prometheus=PrometheusSettings(
                url=f"http://127.0.0.1:{closed_port()}", timeout_s=1.0, inline_wait_s=0.5
            ),
            log_http_auth=False,  # kmock has no TokenReview; auth itself is tested in tests/logs
            log_base_url=LOG_BASE,
            last_log_line_interval_s=0.2,
        )
        h.start_operator(settings)
        yield h
        assert h.operator_error is None, h.operator_error


def training_text(peaks_gib: list[float]) -> Callable[[str, int], LineText]:
    """Every 10th line is the per-epoch memory line; the pod peak grows by the given steps."""

    def factory(container: str, instance: int) -> LineText:
        def text(seq: int) -> bytes:
            if seq % 10 == 9 and seq // 10 < len(peaks_gib):
                epoch = seq // 10
                peak = peaks_gib[epoch]
                return (
                    f"-> memory epoch {epoch}: rss 3.00GiB (peak 3.50GiB), pod {peak - 0.5:.2f}GiB "
                    f"of 32.00GiB (peak {peak:.2f}GiB), workers 2 pss 1.20GiB"
                ).encode()
            return b"step %d loss=0.%04d" % (seq, seq % 9973)

        return text

    return factory


def evidence_for(uid: str, record_file: str) -> PodEvidence:
    """The agent's evidence with the first real kernel record of ``record_file`` and rising samples."""
    return harness_mod.evidence_for(uid, oom_parser.parse_text((RECORDS / record_file).read_text())[0])


def trainingjob(name: str, **spec: object) -> dict[str, object]:
    template = spec.pop("template", {"spec": {"containers": [{"name": "trainer", "image": "pointgroup:1"}]}})
    return {
        "apiVersion": "podmortem.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": template, **spec},
    }


TJ_PATH = "/apis/podmortem.io/v1alpha1/namespaces/default/trainingjobs"


def test_trainingjob_oom_kill_reported_in_status(cluster: Harness) -> None:
    h = cluster
    tj = h.create(TJ_PATH, trainingjob("pointgroup", earlyWarningEpochs=3))
    pod = h.wait(lambda: h.get("/api/v1/namespaces/default/pods/pointgroup-train"), what="the training pod")
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("TrainingJob", tj["metadata"]["uid"], True)
    assert pod["spec"]["restartPolicy"] == "Never"

    uid = run_pod(h, name="pointgroup-train", text=training_text([20.0, 22.0, 24.0, 26.0, 28.0]))
    emulated = h.sync(lambda: h.api.pods["default", "pointgroup-train"])
    h.sync(lambda: emulated.containers["trainer"].write(50))

    def memory_at_epoch_4() -> dict[str, object] | None:
        status = (h.get(f"{TJ_PATH}/pointgroup") or {}).get("status", {})
        return status if status.get("memory", {}).get("epoch") == 4 else None

    status = h.wait(memory_at_epoch_4, what="status.memory of epoch 4")
    memory = status["memory"]
    assert memory["podPeakBytes"] == 28 * GIB and memory["podLimitBytes"] == 32 * GIB
    assert memory["peakOfLimit"] == "28Gi/32Gi (88%, memory line)"
    assert memory["peakSource"] == "the trainer's memory line (epoch 4)"
    assert memory["workers"] == 2
    pressure = h.wait(
        lambda: next(
            (
                c
                for c in (h.get(f"{TJ_PATH}/pointgroup") or {}).get("status", {}).get("conditions", [])
                if c["type"] == "MemoryPressure"
            ),
            None,
        ),
        what="the MemoryPressure condition",
    )
    assert pressure["status"] == "True" and "projected to cross the limit at epoch 6" in pressure["message"]
    # Events are posted after the status is written: wait for each, it may not be there at once.
    h.wait(lambda: any(e["reason"] == "MemoryPressure" and e["type"] == "Warning"
                       for e in h.events_for("pointgroup")) or None, what="the MemoryPressure Event")

    h.sync(lambda: h.agent.evidence.__setitem__(uid, evidence_for(uid, "01-k3s-v1-dmesgT-stress-4.15.log")))
    kill(h, name="pointgroup-train")
    # The agent has the record at once; only an agent too slow for the report's budget (a loaded
    # machine) would leave it pending, and then the follow-up attaches it within moments.
    report = h.wait(lambda: attached_report(h, "pointgroup"), what="status.failureReport with the record")
    assert report["verdict"] == "memcg-limit"
    assert report["findings"][0]["code"] == "memcg-limit"
    assert report["pod"]["containerID"].startswith("containerd://")
    assert report["evidence"]["agent"] == "ok" and report["evidence"]["kernelRecords"] == 1
    ws = report["evidence"]["workingSet"]
    assert ws["source"] == "agent" and ws["peakBytes"] > 0  # Prometheus is down: the agent's samples
    assert any("Prometheus" in e for e in report["evidence"]["errors"])
    assert report["evidence"]["log"]["lastLineAt"] is not None
    assert len(json.dumps(report)) <= h.running[0].service.settings.status_report_max_bytes
    assert uid in h.agent.requests
    final = h.wait(
        lambda: (lambda s: s if s.get("phase") == "Failed" and s.get("exitCode") == 137 else None)(
            (h.get(f"{TJ_PATH}/pointgroup") or {}).get("status", {})
        ),
        what="phase Failed",
    )
    assert final["lastLogLineAt"]
    # One peak: the kernel's usage at the kill replaces the memory line's 28Gi, in status.memory (the
    # Peak/Limit column) and in the report, each saying where it came from.
    cgroup = report["cgroup"]
    assert report["evidence"]["peak"] == {
        "peakBytes": cgroup["usage_bytes"], "limitBytes": cgroup["limit_bytes"],
        "source": "the kernel's OOM record at the kill", "kind": "kernel",
    }
    assert final["memory"]["podPeakBytes"] == cgroup["usage_bytes"]
    assert final["memory"]["peakOfLimit"] == memory_status.peak_of_limit(
        cgroup["usage_bytes"], cgroup["limit_bytes"], source="kernel"
    )
    assert final["memory"]["peakSource"] == "the kernel's OOM record at the kill"
    assert final["memory"]["epoch"] == 4  # the memory line's other figures stay
    page = f"{LOG_BASE}/reports/default/pointgroup"
    assert report["reportUrl"] == page == final["failureReport"]["reportUrl"]
    event = h.wait(lambda: next((e for e in h.events_for("pointgroup") if e["reason"] == "MemcgLimit"), None),
                   what="the MemcgLimit Event")
    assert f"status.failureReport, page {page}" in event["message"]


def attached_report(h: Harness, tj: str) -> dict[str, Any] | None:
    report = (h.get(f"{TJ_PATH}/{tj}") or {}).get("status", {}).get("failureReport")
    return report if report and report["evidence"]["kernelRecord"]["state"] == "attached" else None


def kill_with_the_record_held(h: Harness, tj: str) -> tuple[str, dict[str, Any]]:
    """A TrainingJob's pod killed while the agent still withholds its kernel record: (uid, first report)."""
    h.create(TJ_PATH, trainingjob(tj))
    h.wait(lambda: h.get(f"/api/v1/namespaces/default/pods/{tj}-train"), what="the training pod")
    uid = run_pod(h, name=f"{tj}-train")

    def hold() -> None:
        h.agent.evidence[uid] = evidence_for(uid, "01-k3s-v1-dmesgT-stress-4.15.log")
        h.agent.held.add(uid)

    h.sync(hold)
    kill(h, name=f"{tj}-train")
    first: dict[str, Any] = h.wait(
        lambda: (h.get(f"{TJ_PATH}/{tj}") or {}).get("status", {}).get("failureReport"),
        what="the first report",
    )
    assert first["evidence"]["kernelRecord"]["state"] == "pending"
    return uid, first


def test_kernel_record_arriving_after_the_termination_is_patched_in(cluster: Harness) -> None:
    """The kubelet reports the kill before the agent holds the record: report first, then the record."""
    h = cluster
    uid, first = kill_with_the_record_held(h, "late-record")
    assert first["verdict"] == "memcg-limit"  # from the OOMKilled reason alone
    assert [f["code"] for f in first["findings"]] == ["memcg-limit"]
    assert "kernel's own record is not in yet" in first["findings"][0]["message"]
    assert first.get("kill") is None
    h.wait(lambda: h.agent.requests.count(uid) >= 2, what="the agent asked again")

    h.sync(lambda: h.agent.held.discard(uid))  # the kernel log went quiet: the agent hands it over
    report = h.wait(lambda: attached_report(h, "late-record"), what="the report with the kernel record")
    codes = [f["code"] for f in report["findings"]]
    assert codes[0] == "memcg-limit" and "anon-dominant" in codes  # only the record can tell
    assert "kernel's own record is not in yet" not in report["findings"][0]["message"]
    assert report["kill"]["pid"] > 0 and report["evidence"]["kernelRecords"] == 1
    assert report["evidence"]["kernelRecord"]["requests"] >= 2 and report["updatedAt"]
    assert report["evidence"]["kernelRecord"].get("note") is None  # the "pending" note went with it
    event = h.wait(
        lambda: next((e for e in h.events_for("late-record") if e["reason"] == "KernelRecordAttached"), None),
        what="the KernelRecordAttached event",
    )
    assert "anon-dominant" in event["message"]
    failed = next(
        c for c in (h.get(f"{TJ_PATH}/late-record") or {})["status"]["conditions"] if c["type"] == "Failed"
    )
    assert failed["reason"] == "MemcgLimit" and "kernel's own record" not in failed["message"]


def test_a_jobs_own_log_retention_reaches_the_store(cluster: Harness) -> None:
    h = cluster
    h.create(TJ_PATH, trainingjob("short-lived", logRetention="2d"))
    h.wait(lambda: h.get("/api/v1/namespaces/default/pods/short-lived-train"), what="the training pod")
    run_pod(h, name="short-lived-train", text=training_text([]))
    override = h.tmp / "store" / "default" / "short-lived" / JOB_OVERRIDE
    saved = h.wait(lambda: json.loads(override.read_text()) if override.exists() else None,
                   what="the job's retention in the store")
    # The age it asked for; the size it left out is the operator's default.
    assert saved == {"max_age_s": 2 * 86400, "max_job_bytes": 1 << 30}


def test_annotated_batch_job_gets_annotation_and_event(cluster: Harness) -> None:
    h = cluster
    job = h.create(
        "/apis/batch/v1/namespaces/default/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "nightly",
                "namespace": "default",
                "annotations": {
                    "podmortem.io/watch": "true",
                    "podmortem.io/memory-warning-ratio": "1.5",
                    "podmortem.io/log-retention": "forever",
                },
            },
            "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}},
        },
    )
    warnings = h.wait(
        lambda: (
            [e for e in h.events_for("nightly") if e["reason"] == "InvalidOption"] or None
            if len([e for e in h.events_for("nightly") if e["reason"] == "InvalidOption"]) >= 2
            else None
        ),
        what="two InvalidOption events",
    )
    messages = " | ".join(e["message"] for e in warnings)
    assert "podmortem.io/memory-warning-ratio='1.5'" in messages and "using the default (0.9)" in messages
    assert "podmortem.io/log-retention='forever'" in messages
    h.create(
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "nightly-abcde",
                "namespace": "default",
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": "nightly",
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {"containers": [{"name": "trainer", "image": "x"}]},
        },
    )
    uid = run_pod(h, name="nightly-abcde")
    h.sync(lambda: h.api.pods["default", "nightly-abcde"].containers["trainer"].write(20))
    h.sync(lambda: h.agent.evidence.__setitem__(uid, evidence_for(uid, "02-k8s-v1-syslog-kmem-runc-el7.log")))
    kill(h, name="nightly-abcde")
    raw = h.wait(
        lambda: (
            (h.get("/apis/batch/v1/namespaces/default/jobs/nightly") or {})
            .get("metadata", {})
            .get("annotations", {})
            .get("podmortem.io/failure-report")
        ),
        what="the annotation",
    )
    assert len(raw.encode()) <= 4096
    summary = json.loads(raw)
    assert summary["verdict"] == "memcg-limit"
    assert summary["pod"]["name"] == "nightly-abcde" and summary["pod"]["exitCode"] == 137
    assert summary["findings"][0]["code"] == "memcg-limit"
    assert (
        "status" not in (h.get("/apis/batch/v1/namespaces/default/jobs/nightly") or {})
        or "failureReport" not in h.get("/apis/batch/v1/namespaces/default/jobs/nightly")["status"]
    )
    assert summary["reportUrl"] == f"{LOG_BASE}/reports/default/nightly"
    event = h.wait(lambda: next((e for e in h.events_for("nightly") if e["reason"] == "MemcgLimit"), None),
                   what="the MemcgLimit Event")
    assert f"page {LOG_BASE}/reports/default/nightly" in event["message"]
    # Every patch the operator sent carried a content type the API accepts.
    assert h.sync(lambda: list(h.api.refused_patches)) == []


def test_agent_unreachable_still_reports_from_pod_status(cluster: Harness) -> None:
    h = cluster
    bare_pod(h, "bare")
    run_pod(h, name="bare")
    h.sync(lambda: setattr(h.agent, "available", False))
    try:
        kill(h, name="bare")
        summary = report_annotation(h, "bare")
    finally:
        h.sync(lambda: setattr(h.agent, "available", True))
    assert summary["verdict"] == "memcg-limit"
    assert "kernel's own record is not in yet" in summary["findings"][0]["message"]
    assert any("answered HTTP 503" in e for e in summary["errors"])


def test_sigkill_without_oom_names_the_pod_reason(cluster: Harness) -> None:
    h = cluster
    bare_pod(h, "preempted")
    run_pod(h, name="preempted")
    kill(h, name="preempted", reason="Error", pod_reason="Preempting")
    summary = report_annotation(h, "preempted")
    assert summary["verdict"] == "sigkill-not-oom"
    assert "Preempting" in summary["findings"][0]["message"]


def test_invalid_template_and_bad_options_give_conditions(cluster: Harness) -> None:
    h = cluster
    h.create(
        TJ_PATH,
        trainingjob("broken", memoryWarningRatio=3, template={"spec": {"containers": [{"name": "trainer"}]}}),
    )

    def conditions() -> dict[str, dict[str, str]] | None:
        conds = {
            c["type"]: c for c in (h.get(f"{TJ_PATH}/broken") or {}).get("status", {}).get("conditions", [])
        }
        return conds if {"TemplateValid", "OptionsValid"} <= conds.keys() else None

    conds = h.wait(conditions, what="TemplateValid and OptionsValid conditions")
    assert conds["TemplateValid"]["status"] == "False"
    assert "has no image" in conds["TemplateValid"]["message"]
    assert conds["OptionsValid"]["status"] == "False"
    assert "spec.memoryWarningRatio='3'" in conds["OptionsValid"]["message"]
    assert (h.get(f"{TJ_PATH}/broken") or {})["status"]["phase"] == "Failed"
    assert h.get("/api/v1/namespaces/default/pods/broken-train") is None
    wanted = {"InvalidTemplate", "InvalidOption"}
    h.wait(lambda: wanted <= {e["reason"] for e in h.events_for("broken")} or None,
           what="the InvalidTemplate and InvalidOption Events")


def sample(metrics_text: str, series: str) -> float:
    """The value of ``series`` (``name{labels}`` as exposed) on a /metrics page; 0 before its first sample."""
    for line in metrics_text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_operator_healthy_and_metrics_after_bad_input(cluster: Harness) -> None:
    """Bad input and an OOM kill of this test's own: the operator stays healthy, /metrics counts the report.

    Its own, not the other tests': they run in any order, and the counters live in the process's
    default registry, so only what changed during this test says anything.
    """
    h = cluster
    running = h.running[0]

    def metrics() -> str:
        with urllib.request.urlopen(running.metrics_url + "/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    counted = (
        'podmortem_oom_kills_total{namespace="default",verdict="memcg-limit"}',
        "podmortem_report_latency_seconds_count",
        'podmortem_reports_total{outcome="ok",target="status"}',
        'podmortem_evidence_failures_total{source="prometheus"}',  # Prometheus is at a closed port
    )
    before = metrics()

    h.create(TJ_PATH, trainingjob("bad-input", template={"spec": {"containers": [{"name": "trainer"}]}}))
    h.wait(
        lambda: next(
            (
                c
                for c in (h.get(f"{TJ_PATH}/bad-input") or {}).get("status", {}).get("conditions", [])
                if c["type"] == "TemplateValid" and c["status"] == "False"
            ),
            None,
        ),
        what="the TemplateValid=False condition",
    )
    h.create(TJ_PATH, trainingjob("counted"))
    h.wait(lambda: h.get("/api/v1/namespaces/default/pods/counted-train"), what="the training pod")
    uid = run_pod(h, name="counted-train")
    h.sync(lambda: h.agent.evidence.__setitem__(uid, evidence_for(uid, "01-k3s-v1-dmesgT-stress-4.15.log")))
    kill(h, name="counted-train")
    assert h.wait(lambda: attached_report(h, "counted"), what="the report")["verdict"] == "memcg-limit"

    def counted_up() -> str | None:
        text = metrics()
        return text if all(sample(text, s) > sample(before, s) for s in counted) else None

    h.wait(counted_up, what=f"each of {counted} counted up on /metrics")
    with urllib.request.urlopen(running.health_url + "/healthz", timeout=5) as resp:
        assert resp.status == 200
    with urllib.request.urlopen(running.health_url + "/readyz", timeout=5) as resp:
        assert resp.status == 200


def bare_pod(h: Harness, name: str) -> None:
    h.create(
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": {"podmortem.io/watch": "true"}},
            "spec": {"containers": [{"name": "trainer", "image": "x"}]},
        },
    )


def report_annotation(h: Harness, name: str) -> dict[str, object]:
    raw = h.wait(
        lambda: (
            (h.stored("v1/pods", "default", name) or {})
            .get("metadata", {})
            .get("annotations", {})
            .get("podmortem.io/failure-report")
        ),
        what=f"the report annotation of {name}",
    )
    return dict(json.loads(raw))


def test_log_served_over_http_after_the_pod_is_deleted(cluster: Harness) -> None:
    h = cluster
    bare_pod(h, "chatty")
    uid = run_pod(h, name="chatty")
    container = h.sync(lambda: h.api.pods["default", "chatty"].containers["trainer"])
    h.sync(lambda: container.write(700))
    following = h.running[0].service.following
    assert following is not None
    h.wait(
        lambda: (following.facts(uid) or None) and following.facts(uid).lines >= 700,  # type: ignore[union-attr]
        what="the first 700 lines followed",
    )
    h.sync(lambda: container.rotate(keep=0))  # the kubelet rotated: only the store still has them
    h.sync(lambda: container.write(300))
    expected = b"".join(text + b"\n" for _ts, text in h.sync(lambda: container.current.log.lines()))
    kill(h, name="chatty", reason="Error")
    summary = report_annotation(h, "chatty")
    h.sync(lambda: h.api.pods["default", "chatty"].delete())
    h.delete("/api/v1/namespaces/default/pods/chatty")
    assert h.get("/api/v1/namespaces/default/pods/chatty") is None

    url = f"{h.running[0].log_url}/logs/default/chatty?container=trainer"

    def body_when_ended() -> bytes | None:
        status, body = h.http_get(url)
        return body if status == 200 and b"--- podmortem: end of log" in body else None

    body = h.wait(body_when_ended, what="the stored log with its end marker")
    lines = [line for line in body.split(b"\n") if not line.startswith(b"--- podmortem:")]
    assert b"\n".join(lines) == expected.rstrip(b"\n") + b"\n"  # all 1,000 lines, none twice
    assert len(lines) - 1 == 1000
    status, _ = h.http_get(f"{h.running[0].log_url}/logs/default/never-existed")
    assert status == 404
    assert summary["logUrl"] == f"{LOG_BASE}/logs/default/chatty?container=trainer"


def test_evicted_pod_gets_the_eviction_verdict(cluster: Harness) -> None:
    h = cluster
    bare_pod(h, "evicted")
    run_pod(h, name="evicted")
    message = (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 92Mi. "
        "Container trainer was using 29Gi, request is 8Gi, has larger consumption of memory."
    )
    kill(h, name="evicted", reason="Error", pod_reason="Evicted", pod_message=message)
    summary = report_annotation(h, "evicted")
    assert summary["verdict"] == "eviction"
    finding = summary["findings"][0]  # type: ignore[index]
    assert finding["code"] == "eviction"
    assert "node ran low on memory" in finding["message"]  # read from the pod's status message
    assert summary["pod"]["podReason"] == "Evicted"  # type: ignore[index]
    event = h.wait(  # posted right after the annotation
        lambda: next((e for e in h.events_for("evicted") if e["reason"] == "Eviction"), None),
        what="the Eviction event",
    )
    assert event["type"] == "Warning" and "eviction" in event["message"]


def test_node_oom_from_a_real_global_record(cluster: Harness) -> None:
    h = cluster
    bare_pod(h, "node-oom")
    uid = run_pod(h, name="node-oom")
    h.sync(
        lambda: h.agent.evidence.__setitem__(
            uid, evidence_for(uid, "12-fedora-global-journal-newtable-lkml.log")
        )
    )
    kill(h, name="node-oom", reason="Error")
    summary = report_annotation(h, "node-oom")
    assert summary["verdict"] == "global-oom"
    assert summary["findings"][0]["code"] == "global-oom"  # type: ignore[index]
    assert uid in h.agent.requests


def test_log_status_refreshed_while_the_pod_runs_quietly(cluster: Harness) -> None:
    h = cluster
    h.create(TJ_PATH, trainingjob("quiet"))
    h.wait(lambda: h.get("/api/v1/namespaces/default/pods/quiet-train"), what="the training pod")
    run_pod(h, name="quiet-train")
    container = h.sync(lambda: h.api.pods["default", "quiet-train"].containers["trainer"])
    # No pod event and no memory line after this: only the periodic refresh can move the status.
    for total, more in ((40, 40), (90, 50)):
        h.sync(lambda n=more: container.write(n))  # type: ignore[misc]

        def log_at(n: int = total) -> dict[str, object] | None:
            status = (h.get(f"{TJ_PATH}/quiet") or {}).get("status", {})
            return status if status.get("log", {}).get("lines") == n else None

        status = h.wait(log_at, what=f"status.log.lines == {total}")
        assert status["lastLogLineAt"]
        log = status["log"]
        assert isinstance(log, dict)
        assert log["bytes"] > 0 and log["gaps"] == 0 and log["reconnects"] >= 0
        assert log["url"] == f"{LOG_BASE}/logs/default/quiet-train"


def test_an_annotated_job_further_up_the_owner_chain_gets_the_report(cluster: Harness) -> None:
    """pod → plain Job → annotated Job (as a CronJob's or JobSet's Jobs are, with those kinds configured)."""
    h = cluster

    def job(name: str, **meta: Any) -> dict[str, Any]:
        return h.create(
            "/apis/batch/v1/namespaces/default/jobs",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name, "namespace": "default", **meta},
            },
        )

    def ref(obj: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "batch/v1", "kind": "Job", "name": obj["metadata"]["name"],
                "uid": obj["metadata"]["uid"], "controller": True}

    outer = job("sweep", annotations={"podmortem.io/watch": "true"})
    inner = job("sweep-trial-3", ownerReferences=[ref(outer)])
    h.create(
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sweep-trial-3-x", "namespace": "default", "ownerReferences": [ref(inner)]},
            "spec": {"containers": [{"name": "trainer", "image": "x"}]},
        },
    )
    uid = run_pod(h, name="sweep-trial-3-x")
    h.sync(lambda: h.agent.evidence.__setitem__(uid, evidence_for(uid, "01-k3s-v1-dmesgT-stress-4.15.log")))
    kill(h, name="sweep-trial-3-x")
    raw = h.wait(
        lambda: (
            (h.get("/apis/batch/v1/namespaces/default/jobs/sweep") or {})
            .get("metadata", {})
            .get("annotations", {})
            .get("podmortem.io/failure-report")
        ),
        what="the report on the annotated Job two owners up",
    )
    assert json.loads(raw)["pod"]["name"] == "sweep-trial-3-x"
    inner_now = h.get("/apis/batch/v1/namespaces/default/jobs/sweep-trial-3") or {}
    assert "podmortem.io/failure-report" not in (inner_now.get("metadata", {}).get("annotations") or {})
    h.wait(lambda: any(e["reason"] == "MemcgLimit" for e in h.events_for("sweep")) or None,
           what="the MemcgLimit Event")
