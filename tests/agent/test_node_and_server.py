"""The agent in-process on fake host trees: sampling, evidence JSON, auth, health, metrics, bad input."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry
from tests.agent import trees

from podmortem.agent import main, pods, record_store, server
from podmortem.agent.kmsg_follower import KmsgFollower
from podmortem.agent.node import NodeAgent
from podmortem.agent.settings import AgentSettings
from podmortem.kernel.oom_parser import parse_text
from podmortem.reports.evidence import KernelLogStatus, PodEvidence

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"
KIND_RECORD = (RECORDS / "08-kind-v2-dmesgT-uwsgi-partial.log").read_text()
K3S_RECORD = (RECORDS / "01-k3s-v1-dmesgT-stress-4.15.log").read_text()

OTHER_UID = "11111111-2222-3333-4444-555555555555"


def _agent(tmp_path: Path, pods: dict[str, str]) -> NodeAgent:
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    trees.make_v1_root(cg)
    trees.make_v1_cgroup(cg, trees.cgroupfs_pod())
    trees.make_v1_cgroup(cg, trees.cgroupfs_container(), pids=(100, 101, 102))
    trees.add_process(proc, 100, comm="python", pss_kb=500_000, private_dirty_kb=400_000)
    trees.add_process(proc, 101, comm="pt_data_worker", pss_kb=300_000, private_dirty_kb=250_000)
    # 102 is listed in cgroup.procs but exited before its /proc entry was read.
    settings = AgentSettings(
        node_name="node-1",
        proc_root=proc,
        cgroup_root=cg,
        state_dir=tmp_path / "state",
        static_pods=pods,
        ring_size=4,
    )
    return main.build_agent(settings, registry=CollectorRegistry())


async def test_sampling_builds_evidence_with_processes_and_gaps(tmp_path: Path) -> None:
    agent = _agent(tmp_path, {trees.POD_UID: trees.cgroupfs_pod(), OTHER_UID: "/kubepods/besteffort/gone"})
    for _ in range(5):
        await agent.sample_once()
    evidence = agent.evidence(trees.POD_UID)
    assert evidence is not None
    assert len(evidence.samples) == 4 and evidence.samples_dropped == 1
    sample = evidence.samples[-1]
    assert (sample.usage_bytes, sample.limit_bytes, sample.peak_bytes) == (73203712, 104857600, 80000000)
    assert sample.stat is not None and sample.stat.version == 1 and sample.stat.stat["total_rss"] == 71041024
    assert [(p.pid, p.name, p.pss_bytes) for p in sample.processes] == [
        (100, "python", 500_000 * 1024),
        (101, "pt_data_worker", 300_000 * 1024),
    ]
    assert evidence.sampled_from == evidence.samples[0].at and evidence.sampled_to == sample.at
    gone = agent.evidence(OTHER_UID)
    assert gone is not None and gone.samples == []
    assert [g.reason for g in gone.gaps] == ["cgroup-missing"] * 4
    assert agent.evidence("no-such-pod") is None
    # The JSON contract round-trips through the model the operator parses with.
    again = PodEvidence.model_validate_json(evidence.model_dump_json(by_alias=True))
    assert again == evidence


async def test_kernel_records_map_only_to_watched_cgroups(tmp_path: Path, fixtures_dir: Path) -> None:
    agent = _agent(
        tmp_path,
        {
            trees.POD_UID: "/docker/428406e4f18a1cb65e9691d40b63f3d92c95c1b0d15b5c427bed470b6832cd6e"
            "/kubelet/kubepods/pod1788d98a-0700-426a-8701-2312e4cc2163"
        },
    )
    text = KIND_RECORD
    other = K3S_RECORD
    records = parse_text(text) + parse_text(other)
    await agent.sample_once()
    kept = agent.on_records(records)
    assert [uid for uid, _ in kept] == [trees.POD_UID]
    assert agent.on_records(records) == []  # the same record twice is kept once
    evidence = agent.evidence(trees.POD_UID)
    assert evidence is not None and [r.victim_pid for r in evidence.kernel_records] == [11638]


def _kind_pod_path() -> str:
    return (
        "/docker/428406e4f18a1cb65e9691d40b63f3d92c95c1b0d15b5c427bed470b6832cd6e"
        "/kubelet/kubepods/pod1788d98a-0700-426a-8701-2312e4cc2163"
    )


def _counter(agent: NodeAgent, name: str, **labels: str) -> float:
    value = agent.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_placed_records_survive_an_agent_restart(tmp_path: Path) -> None:
    agent = _agent(tmp_path, {trees.POD_UID: _kind_pod_path()})
    await agent.sample_once()
    [(uid, record)] = agent.on_records(parse_text(KIND_RECORD))
    assert (tmp_path / "state" / "kernel-records.json").is_file()

    again = _agent(tmp_path, {trees.POD_UID: _kind_pod_path()})  # a new process, the same state dir
    evidence = again.evidence(uid)  # served before the first round: the operator may ask right away
    assert evidence is not None and evidence.kernel_records == [record]
    await again.sample_once()
    assert again.on_records(parse_text(KIND_RECORD)) == []  # read again (a crash before the position): once
    evidence = again.evidence(uid)
    assert evidence is not None and len(evidence.kernel_records) == 1
    assert _counter(again, "podmortem_agent_pod_oom_kill_records_total", namespace="", pod=uid, uid=uid) == 0


async def test_a_record_read_before_its_pod_is_known_is_placed_after_the_next_round(tmp_path: Path) -> None:
    agent = _agent(tmp_path, {trees.POD_UID: _kind_pod_path()})
    assert agent.on_records(parse_text(KIND_RECORD)) == []  # the kernel log came first after a start
    await agent.sample_once()
    evidence = agent.evidence(trees.POD_UID)
    assert evidence is not None and [r.victim_pid for r in evidence.kernel_records] == [11638]
    assert _counter(agent, "podmortem_agent_oom_records_unmatched_total") == 0


async def test_records_of_no_watched_pod_age_out_and_forgotten_pods_leave_the_file(tmp_path: Path) -> None:
    agent = _agent(tmp_path, {trees.POD_UID: _kind_pod_path()})
    agent.settings = dataclasses.replace(agent.settings, unplaced_record_keep_s=0.0, forget_after_s=0.0)
    await agent.sample_once()
    assert agent.on_records(parse_text(K3S_RECORD)) == []  # another cgroup's kill
    agent.on_records(parse_text(KIND_RECORD))
    await agent.sample_once()
    assert _counter(agent, "podmortem_agent_oom_records_unmatched_total") == len(parse_text(K3S_RECORD))
    assert agent._unplaced == []
    agent.pod_source = pods.StaticPods({})  # the pod left the node
    await agent.sample_once()  # its grace period starts
    await asyncio.sleep(0.01)
    await agent.sample_once()  # and is over
    assert agent.evidence(trees.POD_UID) is None
    assert record_store.load(tmp_path / "state" / "kernel-records.json") == []


async def _client(agent: NodeAgent, token_path: Path | None) -> TestClient[object, object]:
    client: TestClient[object, object] = TestClient(TestServer(server.make_app(agent, token_path=token_path)))
    await client.start_server()
    return client


async def test_evidence_needs_the_bearer_token(tmp_path: Path) -> None:
    agent = _agent(tmp_path, {trees.POD_UID: trees.cgroupfs_pod()})
    await agent.sample_once()
    token = tmp_path / "token"
    token.write_text("abc\n")
    client = await _client(agent, token)
    try:
        url = f"/v1/pods/{trees.POD_UID}/evidence"
        assert (await client.get(url)).status == 401
        assert (await client.get(url, headers={"Authorization": "Bearer abd"})).status == 401
        assert (await client.get(url, headers={"Authorization": "Basic abc"})).status == 401
        ok = await client.get(url, headers={"Authorization": "Bearer abc"})
        assert ok.status == 200
        body = PodEvidence.model_validate_json(await ok.text())
        assert body.pod_uid == trees.POD_UID and body.node == "node-1" and len(body.samples) == 1
        bad = await client.get(url + "?since=yesterday", headers={"Authorization": "Bearer abc"})
        assert bad.status == 400
        token.write_text("rotated")  # a rotated Secret takes effect without a restart
        assert (await client.get(url, headers={"Authorization": "Bearer abc"})).status == 401
        assert (await client.get(url, headers={"Authorization": "Bearer rotated"})).status == 200
        token.unlink()  # configured but missing: refuse everything
        assert (await client.get(url, headers={"Authorization": "Bearer rotated"})).status == 503
    finally:
        await client.close()


async def test_unreadable_kmsg_degrades_but_sampling_goes_on(tmp_path: Path) -> None:
    agent = _agent(tmp_path, {trees.POD_UID: trees.cgroupfs_pod()})
    follower = KmsgFollower(
        kmsg_path=tmp_path / "no-kmsg",
        state_file=tmp_path / "state/pos.json",
        proc_root=tmp_path / "proc",
        metrics=agent.metrics,
        on_records=agent.on_records,
        on_status=lambda s: (setattr(agent, "kernel_log_status", s), reported.set()),
        retry_s=3600,
    )
    reported = asyncio.Event()
    task = asyncio.create_task(follower.run())
    try:
        await asyncio.wait_for(reported.wait(), timeout=10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await agent.sample_once()
    client = await _client(agent, None)
    try:
        health = await client.get("/healthz")
        details = await health.json()
        assert health.status == 200 and details["ok"] is True
        assert details["kmsg"]["readable"] is False and "no-kmsg" in details["kmsg"]["error"]
        assert details["auth"]["mode"] == "off"
        metrics = await (await client.get("/metrics")).text()
        assert "podmortem_agent_kmsg_readable 0.0" in metrics
        assert (
            f'podmortem_agent_pod_pss_bytes{{namespace="",pod="{trees.POD_UID}",uid="{trees.POD_UID}"}} '
            "8.192e+08" in metrics
        )
        evidence = await (await client.get(f"/v1/pods/{trees.POD_UID}/evidence")).json()
        assert evidence["kmsg"]["readable"] is False and len(evidence["samples"]) == 1
    finally:
        await client.close()


async def test_no_cgroup_hierarchy_is_unhealthy_but_serves(tmp_path: Path) -> None:
    settings = AgentSettings(cgroup_root=tmp_path / "nothing", proc_root=tmp_path, static_pods={"u": "/x"})
    agent = main.build_agent(settings, registry=CollectorRegistry())
    await agent.sample_once()
    client = await _client(agent, None)
    try:
        health = await client.get("/healthz")
        assert health.status == 503
        assert "no memory cgroup hierarchy" in (await health.json())["cgroup"]["error"]
    finally:
        await client.close()


def test_status_model_defaults() -> None:
    assert KernelLogStatus(readable=True).lost == 0
