"""``podmortem diagnose pod/NAME``: the report from what the API server holds, against the emulated cluster.

The emulated API stores the pod objects as a real one would (their statuses from
tests/fixtures/training-logs/pods-ddp.yaml: a DDP job whose worker was OOM-killed and whose
master then died of an NCCL error) and serves the master's log through the kubelet's emulation.
The diagnosis must name the worker as the job's root cause, as files saved with kubectl give.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest
import yaml

from podmortem.cli import diagnose_cluster, node_kernel_log
from podmortem.cli.diagnose_cluster import Target
from podmortem_demo.emulated import PodLogsApi, kubeconfig_for

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "training-logs"
PODS = yaml.safe_load((LOGS / "pods-ddp.yaml").read_text())["items"]
NCCL = (LOGS / "nccl-watchdog-torch25.log").read_bytes().splitlines()
OWNER = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "ddp",
         "uid": "0d0d0d0d-1111-4222-8333-944444444444", "controller": True}


class Cluster:
    def __init__(self, api: PodLogsApi, url: str, session: aiohttp.ClientSession, kubeconfig: Path) -> None:
        self.api, self.url, self.session, self.kubeconfig = api, url, session, kubeconfig

    async def create(self, path: str, body: dict[str, Any]) -> None:
        async with self.session.post(self.url + path, json=body) as response:
            assert response.status == 201, await response.text()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    api = PodLogsApi(pod_reads_from_kubelet=False)
    async with api, kmock.Server(api) as server, aiohttp.ClientSession() as session:
        url = str(server.url).rstrip("/")
        yield Cluster(api, url, session, kubeconfig_for(url, tmp_path / "kubeconfig", namespace="ml"))


async def ddp_job(cluster: Cluster, *, owner: bool = True) -> None:
    for item in PODS:
        pod = copy.deepcopy(item)
        if owner:
            pod["metadata"]["ownerReferences"] = [OWNER]
        await cluster.create("/api/v1/namespaces/ml/pods", pod)
    # The master's container wrote the NCCL watchdog's lines, then exited 1, as its status says.
    master = cluster.api.add_pod("ddp-master-0", namespace="ml", containers=("trainer",),
                                 text=lambda _c, _i: (lambda seq: NCCL[seq]))
    master.containers["trainer"].write(len(NCCL))
    master.containers["trainer"].terminate(1)
    await cluster.create("/api/v1/namespaces/ml/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "ddp-worker-0.1", "namespace": "ml"},
        "involvedObject": {"kind": "Pod", "name": "ddp-worker-0", "namespace": "ml"},
        "type": "Warning", "reason": "OOMKilling", "message": "Kernel OOM kill: killed python (pid 4242)",
        "lastTimestamp": "2024-05-01T10:05:00Z", "count": 1,
    })


def args_for(cluster: Cluster, *, json_out: bool = True) -> argparse.Namespace:
    return argparse.Namespace(kubeconfig=str(cluster.kubeconfig), namespace=None, json=json_out, html=False,
                              exit_code=None)


async def diagnosed(cluster: Cluster, target: Target, capsys: pytest.CaptureFixture[str],
                    *, json_out: bool = True) -> tuple[int, str, diagnose_cluster.Gathered]:
    from podmortem.cli import diagnose_inputs

    gathered = await diagnose_cluster._read(args_for(cluster, json_out=json_out), target)
    code = diagnose_inputs.run(diagnose_cluster.to_inputs(gathered), args_for(cluster, json_out=json_out))
    return code, capsys.readouterr().out, gathered


async def test_a_pod_is_diagnosed_with_its_siblings_and_the_jobs_root_cause(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    await ddp_job(cluster)
    code, out, gathered = await diagnosed(cluster, Target("pod", "ddp-master-0"), capsys)
    assert code == 0
    assert gathered.namespace == "ml"  # the kubeconfig's namespace
    assert [p["metadata"]["name"] for p in gathered.pods] == ["ddp-master-0", "ddp-worker-0"]
    assert list(gathered.logs) == [("ddp-master-0", "trainer")]  # the worker's log is gone with its node
    assert any("ddp-worker-0/trainer" in n for n in gathered.notes)
    doc = json.loads(out)
    by_pod = {r["pod"]["name"]: r for r in doc["reports"]}
    assert by_pod["ddp-worker-0"]["verdict"] == "memcg-limit"
    assert by_pod["ddp-master-0"]["job"]["role"] == "consequence"
    assert by_pod["ddp-master-0"]["evidence"]["log"]["file"] == "ml/ddp-master-0.trainer.log"
    assert doc["job"]["rootCause"]["pod"] == "ddp-worker-0"
    assert gathered.events["ddp-master-0"] == [] and len(gathered.events["ddp-worker-0"]) == 1
    # what the kubelet was asked: the tail, with timestamps, bounded
    [request] = cluster.api.log_requests
    assert request["timestamps"] == "true" and request["tailLines"] == "500" and "previous" not in request


async def test_without_an_owner_only_the_pod_and_its_events(cluster: Cluster,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    await ddp_job(cluster, owner=False)
    code, out, gathered = await diagnosed(cluster, Target("pod", "ddp-worker-0"), capsys, json_out=False)
    assert code == 0 and [p["metadata"]["name"] for p in gathered.pods] == ["ddp-worker-0"]
    assert "memcg-limit" in out or "OOM" in out
    events = diagnose_cluster.render_events(gathered)
    assert "Events of pod ml/ddp-worker-0:" in events
    assert "2024-05-01T10:05:00Z  Warning  OOMKilling: Kernel OOM kill: killed python (pid 4242)" in events


async def test_a_missing_pod_is_one_line(cluster: Cluster) -> None:
    with pytest.raises(diagnose_cluster.TargetError, match="pod ml/nope not found"):
        await diagnose_cluster._read(args_for(cluster), Target("pod", "nope"))


async def test_the_trainingjob_kind_reads_its_pods_by_label(cluster: Cluster,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    cluster.api.resources["podmortem.io/v1alpha1/trainingjobs"] = kmock.ResourceInfo(
        kind="TrainingJob", namespaced=True)
    await cluster.create("/apis/podmortem.io/v1alpha1/namespaces/ml/trainingjobs", {
        "apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "pg", "namespace": "ml"},
        "spec": {}, "status": {"failureReport": {"verdict": "memcg-limit"}},
    })
    pod = copy.deepcopy(PODS[1])
    pod["metadata"]["labels"]["podmortem.io/trainingjob"] = "pg"
    await cluster.create("/api/v1/namespaces/ml/pods", pod)
    code, _, gathered = await diagnosed(cluster, Target("trainingjob", "pg"), capsys)
    assert code == 0 and [p["metadata"]["name"] for p in gathered.pods] == ["ddp-worker-0"]
    assert gathered.stored_report is not None
    assert "podmortem report --from-status pg -n ml" in gathered.stored_report


@pytest.mark.parametrize(("text", "target"), [
    ("pod/trainer-0", Target("pod", "trainer-0")),
    ("po/trainer-0", Target("pod", "trainer-0")),
    ("job/ddp", Target("job", "ddp")),
    ("jobs.batch/ddp", Target("job", "ddp")),
    ("tj/pointgroup", Target("trainingjob", "pointgroup")),
    ("TrainingJob/pointgroup", Target("trainingjob", "pointgroup")),
    ("logs/train.log", None),
    ("pod/", None),
    ("pod/Not_A_Name", None),
    ("train.log", None),
])
def test_targets_are_told_from_files(text: str, target: Target | None) -> None:
    assert diagnose_cluster.parse_target(text) == target


def test_a_file_named_like_a_target_stays_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pod").mkdir()
    (tmp_path / "pod" / "x").write_text("log")
    monkeypatch.chdir(tmp_path)
    assert diagnose_cluster.parse_target("pod/x") is None



async def test_a_batch_job_reads_its_pods_by_controller_uid(cluster: Cluster,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    cluster.api.resources["batch/v1/jobs"] = kmock.ResourceInfo(kind="Job", namespaced=True)
    await cluster.create("/apis/batch/v1/namespaces/ml/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
        "spec": {}})
    async with cluster.session.get(cluster.url + "/apis/batch/v1/namespaces/ml/jobs/train") as response:
        uid = (await response.json())["metadata"]["uid"]
    for item, label in ((PODS[1], uid), (PODS[0], "someone-else")):
        pod = copy.deepcopy(item)
        pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = label
        await cluster.create("/api/v1/namespaces/ml/pods", pod)
    code, out, gathered = await diagnosed(cluster, Target("job", "train"), capsys)
    assert code == 0 and [p["metadata"]["name"] for p in gathered.pods] == ["ddp-worker-0"]
    assert json.loads(out)["reports"][0]["verdict"] == "memcg-limit"


RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"
#: A real kernel record (kind, cgroup v2), moved onto ddp-worker-0: its pod uid and container id.
WORKER_DMESG = ((RECORDS / "08-kind-v2-dmesgT-uwsgi-partial.log").read_text()
                .replace("1788d98a-0700-426a-8701-2312e4cc2163", PODS[1]["metadata"]["uid"])
                .replace("a07d3c191742700df28b349710c93b2014b255b22364decb09b53ca123fa8272",
                         "1b3d5f7a9c0e2b4d6f8a0c2e4b6d8f0a2c4e6b8d0f2a4c6e8b0d2f4a6c8e0b2d")
                .encode().splitlines())


def printing(lines: list[bytes]) -> Callable[[str, int], Callable[[int], bytes]]:
    """An emulated container's text: ``lines``, one per line written."""
    return lambda _container, _instance: (lambda seq: lines[seq])


async def play_kubelet(cluster: Cluster, created: list[dict[str, Any]]) -> None:
    """Runs each kernel-log pod: its dmesg prints the node's kernel log, then it succeeds."""
    seen: set[str] = set()
    while True:
        async with cluster.session.get(cluster.url + "/api/v1/namespaces/ml/pods") as response:
            items = (await response.json())["items"]
        for pod in items:
            name = pod["metadata"]["name"]
            if not name.startswith("podmortem-kernel-log-") or name in seen:
                continue
            seen.add(name)
            created.append(pod)
            lines = WORKER_DMESG if pod["spec"]["nodeName"] == "gpu-node-2" else [b"[    0.000000] Linux"]
            emulated = cluster.api.add_pod(name, namespace="ml", containers=("dmesg",), text=printing(lines))
            emulated.containers["dmesg"].write(len(lines))
            emulated.containers["dmesg"].terminate(0)
            async with cluster.session.patch(
                    f"{cluster.url}/api/v1/namespaces/ml/pods/{name}",
                    json={"status": {"phase": "Succeeded"}},
                    headers={"Content-Type": "application/merge-patch+json"}) as response:
                assert response.status == 200, await response.text()
        await asyncio.sleep(0.02)


async def test_node_kernel_log_puts_the_kernels_record_into_the_report(
        cluster: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_kernel_log, "POLL_S", 0.02)
    await ddp_job(cluster)
    created: list[dict[str, Any]] = []
    kubelet = asyncio.create_task(play_kubelet(cluster, created))
    args = args_for(cluster)
    args.node_kernel_log, args.node_kernel_log_image = True, "busybox:1.36"
    try:
        gathered = await diagnose_cluster._read(args, Target("pod", "ddp-master-0"))
    finally:
        kubelet.cancel()
    from podmortem.cli import diagnose_inputs

    assert diagnose_inputs.run(diagnose_cluster.to_inputs(gathered), args) == 0
    doc = json.loads(capsys.readouterr().out)
    worker = next(r for r in doc["reports"] if r.get("pod", {}).get("name") == "ddp-worker-0")
    assert worker["evidence"]["kernelRecord"]["state"] == "attached"
    assert worker["kill"]["pid"] == 11638
    # one pod per failed pod's node, as written, and none left behind
    assert sorted(p["spec"]["nodeName"] for p in created) == ["gpu-node-1", "gpu-node-2"]
    spec = created[0]["spec"]
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 60
    assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}
    for pod in created:
        path = f"/api/v1/namespaces/ml/pods/{pod['metadata']['name']}"
        async with cluster.session.get(cluster.url + path) as r:
            assert r.status == 404


async def test_node_kernel_log_refused_is_a_note_and_the_rest_is_used(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    await ddp_job(cluster)

    async def refused(*_args: Any, **_kwargs: Any) -> node_kernel_log.NodeKernelLog:
        raise node_kernel_log.NodeLogError("cannot create pod ml/x on node gpu-node-2: HTTP 403 forbidden")

    args = args_for(cluster)
    args.node_kernel_log, args.node_kernel_log_image = True, "busybox:1.36"
    monkeypatch.setattr(node_kernel_log, "read", refused)
    gathered = await diagnose_cluster._read(args, Target("pod", "ddp-worker-0"))
    assert gathered.kernel_logs == {}
    assert any("no kernel log of node gpu-node-2: cannot create pod" in n for n in gathered.notes)


async def test_a_log_the_kubelet_lost_is_the_operators_stored_tail(
        cluster: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's node is gone with its log; the operator kept it. The store is stood in for at
    `logs_stored`'s seam (its port-forward and log server are tested in tests/cli/test_logs_stored.py
    and against the real control plane); what is read from it is the one stored log asked for, its
    tail, and the report names it."""
    from podmortem.cli import logs_stored
    from podmortem.logs.lines import LineBatch

    asked: list[dict[str, Any]] = []

    class Store:
        async def read(self, *, sink: Any, **kwargs: Any) -> None:
            asked.append(kwargs)
            raw = b"".join(b"2024-05-01T10:04:%02dZ epoch 3 step %d\n" % (i % 60, i) for i in range(900))
            await sink.write("trainer", LineBatch(container="trainer", raw=raw, count=900, first_ts_ns=0,
                                                  last_ts_ns=0), None)

    async def find_operator(*_args: Any, **_kwargs: Any) -> Any:
        return "podmortem/podmortem-operator"

    @contextlib.asynccontextmanager
    async def connected(*_args: Any) -> AsyncIterator[Store]:
        yield Store()

    monkeypatch.setattr(logs_stored, "find_operator", find_operator)
    monkeypatch.setattr(logs_stored, "connected", connected)
    await ddp_job(cluster)
    code, out, gathered = await diagnosed(cluster, Target("pod", "ddp-worker-0"), capsys)
    assert code == 0
    assert [(a["pod"], a["container"], a["previous"], a["tail"]) for a in asked] == [
        ("ddp-worker-0", "trainer", False, 500)]
    lines, previous = gathered.logs["ddp-worker-0", "trainer"]
    assert len(lines) == 500 and lines[-1].endswith(b"epoch 3 step 899") and previous is False
    assert "the log of ddp-worker-0/trainer is the operator's stored copy" in gathered.notes
    worker = next(r for r in json.loads(out)["reports"] if r["pod"]["name"] == "ddp-worker-0")
    assert worker["evidence"]["log"]["file"] == "ml/ddp-worker-0.trainer.log"


async def run_diagnose(*args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podmortem.cli.main", "diagnose", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_the_command_as_a_user_types_it(cluster: Cluster) -> None:
    await ddp_job(cluster)
    kubeconfig = str(cluster.kubeconfig)
    code, out, err = await run_diagnose("pod/ddp-master-0", "-n", "ml", "--kubeconfig", kubeconfig)
    assert code == 0, err
    assert "root cause   ddp-worker-0 (rank 1), memcg-limit" in out
    assert "Events of pod ml/ddp-worker-0:" in out and "OOMKilling" in out
    assert "no log of ddp-worker-0/trainer on its node" in err
    code, out, err = await run_diagnose("pod/ddp-master-0", "--json", "--kubeconfig", kubeconfig)
    assert code == 0 and json.loads(out)["job"]["rootCause"]["pod"] == "ddp-worker-0"


async def test_a_target_goes_alone_and_a_missing_one_is_exit_2(cluster: Cluster) -> None:
    code, _, err = await run_diagnose("pod/nope", "--kubeconfig", str(cluster.kubeconfig))
    assert (code, err.strip()) == (2, "podmortem diagnose: pod ml/nope not found (a deleted pod's status is "
                                      "gone with it; its stored log: podmortem logs -p)")
    code, _, err = await run_diagnose("pod/a", "train.log", "--kubeconfig", str(cluster.kubeconfig))
    assert code == 2 and "pod/NAME is read from the cluster alone" in err
