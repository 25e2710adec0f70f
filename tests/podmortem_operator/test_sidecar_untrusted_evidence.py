"""The sidecar's message is the pod's own testimony, checked against the kubelet's facts (issue 36).

Each case is one the security re-test made the operator accept: lies that parse became the verdict
(a container that exited 1 reported as memcg-limit, "OOM-killed sshd (pid 4194304) ... limit of
0 B", an OOM counter "from 9 to 2"), a message read from any container named podmortem-sidecar, an
evidence time that broke the report's writing, and a sidecar killed with a message left behind.
The property at the end: whatever the evidence and whatever the kubelet says, a verdict the kubelet
reports is never turned away.
"""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.diagnosis.test_sidecar_findings import evidence as good_evidence

from podmortem.diagnosis import in_pod_evidence as in_pod
from podmortem.diagnosis import sidecar_findings
from podmortem.diagnosis import termination as term_mod
from podmortem.operator import sidecar_injection
from podmortem.operator.settings import SidecarInjectionSettings
from podmortem.reports import codes
from podmortem.reports import sidecar_evidence as ev
from podmortem.reports.failure import FailureReport
from podmortem.reports.findings import Finding, Severity
from podmortem_demo.harness import evidence_for

from .test_kernel_record_followup import SIDECAR_IMAGE, TARGET, UID, ScriptedAgent, running_reporter

MIB = 1 << 20
ENDED = datetime(2026, 12, 4, 13, 36, 27, tzinfo=UTC)
IDENTITY = sidecar_injection.identity(SidecarInjectionSettings(image=SIDECAR_IMAGE))


def lie(**over: Any) -> str:
    """A message that parses, in the shape the sidecar writes, with ``over`` changed."""
    doc = json.loads(ev.render(good_evidence()))
    doc.update(over)
    return json.dumps(doc)


def pod(message: str | None, *, exit_code: int = 137, reason: str = "OOMKilled", side_exit: int = 0,
        image: str = SIDECAR_IMAGE, limit: str | None = "2Gi") -> dict[str, Any]:
    side = {"name": term_mod.SIDECAR_CONTAINER, "restartPolicy": "Always", "image": image,
            "command": ["podmortem", "sidecar"]}
    trainer: dict[str, Any] = {"name": "trainer", "image": "trainer:1"}
    if limit is not None:
        trainer["resources"] = {"limits": {"memory": limit}}
    side_state = ({"terminated": {"exitCode": side_exit, "reason": "Completed" if side_exit == 0 else "Error",
                                  "message": message, "finishedAt": "2026-12-04T13:36:28Z"}}
                  if message is not None else {"running": {}})
    return {
        "metadata": {"name": "trainer", "namespace": "default", "uid": UID},
        "spec": {"nodeName": "node-a", "initContainers": [side], "containers": [trainer]},
        "status": {
            "initContainerStatuses": [{"name": term_mod.SIDECAR_CONTAINER, "state": side_state}],
            "containerStatuses": [{"name": "trainer", "containerID": "containerd://abc", "state": {
                "terminated": {"exitCode": exit_code, "reason": reason, "containerID": "containerd://abc",
                               "startedAt": "2026-12-04T12:00:00Z", "finishedAt": "2026-12-04T13:36:27Z"}}}],
        },
    }


def read(message: str, **kw: Any) -> sidecar_findings.SidecarRead:
    [t] = term_mod.find(pod(message, **kw))
    return sidecar_findings.read(t, IDENTITY)


def test_the_real_shape_is_attached() -> None:
    got = read(ev.render(good_evidence()))
    assert got.evidence is not None and got.summary is not None and got.summary.state == "attached"


def test_a_limit_of_0_bytes_and_a_pid_no_kernel_gives_are_not_evidence() -> None:
    mem = {**json.loads(lie())["mem"], "limit": 0, "peak": 0, "usage": 0}
    got = read(lie(mem=mem))
    assert got.evidence is None and got.summary is not None and got.summary.state == "invalid"
    assert any("spec's limit" in c for c in got.summary.contradictions), got.summary
    assert any("limit of 0 B" in c for c in got.summary.contradictions)
    sshd = {"victim": {"pid": 4194304, "comm": "sshd", "role": "trainer"}, "gone": [4194304],
            "at": "2026-12-04T13:36:26Z"}
    got = read(lie(kill=sshd))
    assert got.evidence is None and got.summary is not None and got.summary.state == "invalid"


def test_a_counter_that_goes_down_is_named() -> None:
    got = read(lie(oom={"before": 9, "after": 2}))
    assert got.summary is not None and got.summary.state == "invalid"
    assert "the OOM-kill counter went down, from 9 to 2" in (got.summary.note or "")


def test_times_outside_the_containers_life_are_named() -> None:
    kill = {**json.loads(lie())["kill"], "at": "2026-12-05T13:36:26Z"}  # a day after the trainer ended
    got = read(lie(kill=kill, at="2026-12-05T13:36:27Z"))
    assert got.summary is not None and got.summary.state == "invalid"
    assert any("after 'trainer' ended" in c for c in got.summary.contradictions), got.summary.contradictions


def test_a_container_named_podmortem_sidecar_from_another_image_is_not_read() -> None:
    got = read(ev.render(good_evidence()), image="attacker.example/fake:1")
    assert got.evidence is None and got.summary is not None and got.summary.state == "invalid"
    assert "not read" in (got.summary.note or "")


def test_a_sidecar_that_did_not_end_by_itself_is_not_believed() -> None:
    got = read(ev.render(good_evidence()), side_exit=137)
    assert got.evidence is None and got.summary is not None and got.summary.state == "invalid"
    assert "exit 137" in (got.summary.note or "")


def test_a_container_that_exited_1_keeps_the_kubelets_verdict() -> None:
    [t] = term_mod.find(pod(ev.render(good_evidence()), exit_code=1, reason="Error"))
    kubelets = FailureReport(verdict="python-exception", findings=[
        Finding(code="python-exception", severity=Severity.CRITICAL, message="Traceback ...")])
    out = sidecar_findings.apply(kubelets, t, good_evidence())
    assert out.verdict == "python-exception"
    assert out.kill is None
    assert "in-pod-oom-kill" in [f.code for f in out.findings]
    assert "memcg-limit" not in [f.code for f in out.findings]
    assert "in-pod-oom-kill" in out.in_pod_evidence and "sidecar-evidence" in out.in_pod_evidence


def test_the_report_says_what_rests_on_in_pod_evidence() -> None:
    [t] = term_mod.find(pod(ev.render(good_evidence())))
    out = sidecar_findings.apply(FailureReport(), t, good_evidence())
    assert out.verdict == "memcg-limit"
    assert set(out.in_pod_evidence) == {f.code for f in sidecar_findings.findings(t, good_evidence())}


async def test_through_the_reporter_a_lie_changes_no_verdict_and_an_absurd_time_breaks_nothing() -> None:
    agent = ScriptedAgent(evidence_for(UID, None))
    async with running_reporter(agent, wait_s=0.0, agent_enabled=False) as (reporter, kube):
        liar = pod(lie(), exit_code=1, reason="Error")
        [t] = term_mod.find(liar)
        outcome = await reporter.report(termination=t, target=TARGET, facts=None, seen_at=time.monotonic())
        assert outcome.report.verdict != "memcg-limit"
        absurd = pod(lie(at="0001-01-01T00:00:00+14:00"))
        [t2] = term_mod.find(absurd)
        t2 = dataclasses.replace(t2, container_id="containerd://def", pod_uid=UID + "-2")
        second = await reporter.report(termination=t2, target=TARGET, facts=None, seen_at=time.monotonic())
        side = second.document.evidence.sidecar
        assert side is not None and side.state == "invalid"
    assert kube.annotations  # written: no OverflowError on the way


def test_the_webhook_rewrites_a_container_that_only_bears_the_name() -> None:
    settings = SidecarInjectionSettings(image=SIDECAR_IMAGE)
    impostor = {"name": term_mod.SIDECAR_CONTAINER, "image": "attacker.example/fake:1",
                "restartPolicy": "Always", "command": ["/fake"]}
    spec = {"securityContext": {"runAsUser": 1000, "runAsNonRoot": True},
            "initContainers": [impostor], "containers": [{"name": "trainer", "image": "t:1"}]}
    plan = sidecar_injection.plan({"metadata": {}, "spec": spec}, settings)
    assert plan.changed, plan.skipped
    assert {"op": "replace", "path": "/spec/initContainers/0"}.items() <= plan.patch[-1].items()
    [side] = plan.spec["initContainers"]
    assert side["image"] == SIDECAR_IMAGE and side["command"] == ["podmortem", "sidecar"]
    again = sidecar_injection.plan({"metadata": {}, "spec": plan.spec}, settings)
    assert not again.changed and again.skipped == "the pod already has the podmortem sidecar"
    in_containers = {**spec, "initContainers": [], "containers": [*spec["containers"], impostor]}
    plan = sidecar_injection.plan({"metadata": {}, "spec": in_containers}, settings)
    assert [c["name"] for c in plan.spec["containers"]] == ["trainer"]
    assert [c["image"] for c in plan.spec["initContainers"]] == [SIDECAR_IMAGE]


_when = st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2028, 1, 1), timezones=st.just(UTC))
_count = st.none() | st.integers(0, 20)
_bytes = st.none() | st.integers(0, 8 << 30)
_process = st.builds(ev.Process, pid=st.integers(1, ev.MAX_PID - 1), comm=st.sampled_from(["python", "sshd"]),
                     pss=_bytes, role=st.sampled_from(["trainer", "worker"]))
_evidence = st.builds(
    ev.SidecarEvidence,
    podmortem=st.just("0.1.0"),
    reason=st.sampled_from(["trainer-gone", "sigterm", "failed"]),
    at=_when,
    mem=st.none() | st.builds(ev.Memory, usage=_bytes, limit=_bytes, peak=_bytes, limit_hits=_count,
                              anon=_bytes, file=_bytes),
    oom=st.builds(ev.OomCounter, before=_count, after=_count),
    kill=st.none() | st.builds(ev.Kill, victim=_process, gone=st.lists(st.integers(1, 99), max_size=4),
                               at=_when),
    top=st.lists(_process, max_size=4),
    trend=st.lists(st.integers(0, 8 << 30), max_size=6),
)
_kubelet = st.tuples(
    st.sampled_from([(137, "OOMKilled"), (137, "Error"), (1, "Error"), (139, "Error"), (0, "Completed"),
                     (None, None), (143, "Error")]),
    _when, st.integers(0, 7200), st.sampled_from([None, "512Mi", "2Gi"]), st.sampled_from([0, 0, 1, 137]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_evidence, kubelet=_kubelet, verdict=st.sampled_from(codes.VERDICTS))
def test_no_evidence_turns_a_verdict_the_kubelet_reports(
    doc: ev.SidecarEvidence, kubelet: tuple[Any, ...], verdict: str
) -> None:
    (exit_code, reason), started, lived_s, limit, side_exit = kubelet
    message = ev.render(doc)
    raw = pod(message, side_exit=side_exit, limit=limit)
    state = raw["status"]["containerStatuses"][0]["state"]["terminated"]
    state.update(exitCode=exit_code, reason=reason, startedAt=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
                 finishedAt=(started + timedelta(seconds=lived_s)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    found = term_mod.find(raw)
    if not found:  # exit 0: no report at all
        return
    [t] = found
    kubelets = FailureReport(verdict=verdict, findings=[
        Finding(code=verdict, severity=Severity.CRITICAL, message="the kubelet's own words")])
    got = sidecar_findings.read(t, IDENTITY)
    out = sidecar_findings.apply(kubelets, t, got.evidence) if got.evidence is not None else kubelets
    if not in_pod.kubelet_reports_oom_kill(t.exit_code, t.reason):
        assert out.verdict == verdict, (t.exit_code, t.reason, out.verdict)
    else:
        assert out.verdict in (verdict, "memcg-limit")
    if got.evidence is None:
        assert out == kubelets
    else:
        assert got.summary is not None and got.summary.state == "attached"
        assert not in_pod.contradictions(sidecar_findings.testimony(got.evidence), sidecar_findings.facts(
            t, in_pod.identify(t.sidecars, IDENTITY)))  # type: ignore[arg-type]
