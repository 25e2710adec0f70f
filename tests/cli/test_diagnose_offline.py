"""``podmortem diagnose`` on what ``kubectl`` gives about a failed training pod, run as a user runs it.

Training logs (``kubectl logs --previous``), pod objects (``kubectl get pod -o yaml|json``, a ``List``,
a pod's status alone) and ``kubectl describe pod`` text, alone or together with kernel text, give
the verdicts the operator gives (`podmortem.diagnosis.verdicts.diagnose_termination`, fed by
`podmortem.diagnosis.offline`). The texts are the real ones of ``tests/fixtures/training-logs/``
(its SOURCES.md); pods and describe output are built around real kubelet and scheduler messages.
Every test runs the installed ``podmortem`` console script as a separate process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

#: The ``podmortem`` console script of the environment running the tests.
PODMORTEM = str(Path(sys.executable).with_name("podmortem"))
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "training-logs"
RECORDS = FIXTURES / "oom-records"
#: A real kernel record of pod 6c4333b3-... (container bbd5e4b5f9c1...), the one `pod-oomkilled.yaml` names.
RECORD = RECORDS / "02-k8s-v1-syslog-kmem-runc-el7.log"
MESSAGES = json.loads((LOGS / "pod-status-messages.json").read_text())


def diagnose(
    *args: str | Path, stdin: bytes | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PODMORTEM, "diagnose", *map(str, args)], input=stdin.decode() if stdin is not None else None,
        capture_output=True, text=True, timeout=120, check=False, cwd=cwd,
    )


def as_json(*args: str | Path, stdin: bytes | None = None, cwd: Path | None = None) -> dict[str, Any]:
    done = diagnose(*args, "--json", stdin=stdin, cwd=cwd)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def codes(report: dict[str, Any]) -> list[str]:
    return [f["code"] for f in report["findings"]]


# -- one verdict each ------------------------------------------------------------------------------

#: (files, the reports' verdicts in order, finding codes the first report must hold)
CASES: list[tuple[tuple[str, ...], list[str | None], set[str]]] = [
    # a training log alone (kubectl logs --previous POD > train.log)
    (("cuda-oom-expandable.log",), ["cuda-oom"], {"cuda-oom"}),
    (("cuda-oom-capacty-other-process.log",), ["cuda-oom"], {"cuda-oom", "cuda-fragmentation"}),
    (("cuda-oom-torch1-gpu1.log",), ["cuda-oom"], {"cuda-oom", "cuda-fragmentation"}),
    (("dataloader-bus-error.log",), ["shm-full"], {"shm-full"}),
    (("dataloader-shm-worker.log",), ["shm-full"], {"shm-full"}),
    (("python-exception.log",), ["python-exception"], {"python-exception"}),
    # the pod object and its log
    (("pod-trainer-error.yaml", "cuda-oom-fragmented.log"), ["cuda-oom"], {"cuda-oom"}),
    (("pod-trainer-error.yaml", "python-exception.log"), ["python-exception"], {"python-exception"}),
    (("pod-shm.json", "dataloader-bus-error.log"), ["shm-full"], {"shm-full"}),
    # the pod status alone
    (("pod-oomkilled.yaml",), ["memcg-limit"], {"memcg-limit"}),
    (("pod-preempted.yaml",), ["preempted"], {"preempted"}),
    (("pod-evicted-pids.json",), ["node-pressure-eviction"], {"node-pressure-eviction"}),
    (("pod-status-sigkill.json",), ["sigkill-not-oom"], {"sigkill-not-oom"}),
    (("pod-sidecar-oom.yaml", "nccl-remote-error.log"), ["memcg-limit", "sidecar-oom"], {"memcg-limit"}),
    # kubectl describe pod
    (("describe-segfault.txt",), ["segfault"], {"segfault"}),
    (("describe-preempted.txt",), ["preempted"], {"preempted"}),
    (("describe-evicted-memory.txt",), ["eviction"], {"eviction"}),
    (("describe-evicted-ephemeral.txt",), ["ephemeral-storage-eviction"], {"ephemeral-storage-eviction"}),
]


@pytest.mark.parametrize(("files", "verdicts", "first_codes"), CASES, ids=["+".join(c[0]) for c in CASES])
def test_each_verdict_as_the_operator_gives_it(
    files: tuple[str, ...], verdicts: list[str | None], first_codes: set[str]
) -> None:
    data = as_json(*(LOGS / f for f in files))
    assert [r["verdict"] for r in data["reports"]] == verdicts
    assert first_codes <= set(codes(data["reports"][0]))
    text = diagnose(*(LOGS / f for f in files))
    assert text.returncode == 0, text.stderr
    for verdict in verdicts:
        assert f"verdict   {verdict}" in text.stdout


def test_cuda_oom_numbers_and_the_log_it_came_from() -> None:
    [report] = as_json(LOGS / "pod-trainer-error.yaml", LOGS / "cuda-oom-expandable.log")["reports"]
    oom = report["findings"][0]
    assert abs(oom["evidence"]["tried_bytes"] - 30.29 * 2**30) < 1 and oom["evidence"]["device"] == 0
    want = {"name": "llm-train-0", "namespace": "ml", "container": "trainer", "exitCode": 1,
            "reason": "Error", "finishedAt": "2024-05-01T10:06:00Z"}
    assert report["pod"].items() >= want.items()
    log = report["evidence"]["log"]
    assert log["file"].endswith("cuda-oom-expandable.log") and log["lines"] == log["tailLines"] == 5
    assert report["evidence"]["podStatus"]["kind"] == "pod"
    assert report["evidence"]["kernelRecord"]["state"] == "not-sought"


def test_shm_full_names_the_pods_dev_shm() -> None:
    [report] = as_json(LOGS / "pod-shm.json", LOGS / "dataloader-bus-error.log")["reports"]
    shm = report["findings"][0]
    assert shm["evidence"]["shm_bytes"] == 2**30 and "emptyDir 'dshm' sizeLimit 1Gi" in shm["message"]
    assert shm["evidence"]["worker_pid"] == 729


def test_a_log_alone_is_read_with_exit_1_unless_told() -> None:
    [report] = as_json(LOGS / "python-exception.log")["reports"]
    assert report["pod"]["exitCode"] == 1 and report["pod"]["exitCodeAssumed"] is True
    assert "no pod status given" in report["evidence"]["podStatus"]["note"]
    text = diagnose(LOGS / "python-exception.log").stdout
    assert "exit code taken as 1; --exit-code sets it" in text
    # exit 139 given: the operator's rule reads a segfault first
    [told] = as_json(LOGS / "python-exception.log", "--exit-code", "139")["reports"]
    assert told["verdict"] == "segfault" and "exitCodeAssumed" not in told["pod"]


PEER_LOGS = ["nccl-watchdog-torch25.log", "nccl-watchdog-old.log", "nccl-remote-error.log",
             "torchrun-sigterm.log", "torchrun-sigterm-old.log"]


@pytest.mark.parametrize("name", PEER_LOGS)
def test_nccl_and_torchrun_failures_are_consequences_as_the_job_report_names_them(name: str) -> None:
    [report] = as_json(LOGS / name)["reports"]
    assert report["verdict"] is None  # not a cause of its own
    job = report["job"]
    assert job["role"] == "consequence"
    first = (LOGS / name).read_text().splitlines()
    assert any(job["line"] in line or line.endswith(job["line"]) for line in first), job["line"]
    text = diagnose(LOGS / name).stdout
    assert "job role  consequence" in text


def test_sidecar_oom_names_the_sidecar_and_the_trainers_own_exception_follows() -> None:
    proxy, trainer = as_json(LOGS / "pod-sidecar-oom.yaml", LOGS / "nccl-remote-error.log")["reports"]
    assert (proxy["pod"]["container"], trainer["pod"]["container"]) == ("proxy", "trainer")
    sidecar = trainer["findings"][0]
    assert sidecar["code"] == "sidecar-oom" and sidecar["evidence"]["container"] == "proxy"
    assert "3 s before 'trainer' ended" in sidecar["message"]
    # the single log went to the container `kubectl logs POD` shows (the first): the trainer
    assert trainer["evidence"]["log"]["file"].endswith("nccl-remote-error.log")
    assert "file" not in proxy["evidence"]["log"]


def test_preempted_from_describe_reads_the_schedulers_event() -> None:
    [report] = as_json(LOGS / "describe-preempted.txt")["reports"]
    finding = report["findings"][0]
    assert finding["evidence"]["disruption_reason"] == "PreemptionByScheduler"
    assert "Preempted by pod 8d9e0f1a-2b3c-4d5e-6f7a-8b9c0d1e2f3a on node gpu-node-5" in finding["message"]
    assert report["pod"].items() >= {"name": "finetune-spot-1", "exitCode": 143, "node": "gpu-node-5"}.items()
    assert report["evidence"]["podStatus"]["kind"] == "describe"


def test_an_evicted_container_is_reported_once() -> None:
    """Its State and Last State both read ContainerStatusUnknown with no container ID: one instance."""
    [report] = as_json(LOGS / "describe-evicted-memory.txt")["reports"]
    assert report["pod"]["reason"] == "ContainerStatusUnknown" and report["pod"]["exitCode"] == 137
    assert report["pod"]["startedAt"] is None  # kubectl's zero time, year 1
    assert report["pod"]["podReason"] == "Evicted"


UID = "1f2e3d4c-5b6a-4978-8a9b-0c1d2e3f4a5b"


def _status_pod(reason: str, message: str, disruption: str | None = None) -> dict[str, Any]:
    conditions = [] if disruption is None else [
        {"type": "DisruptionTarget", "status": "True", "reason": disruption, "message": message}
    ]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bert-train-0", "namespace": "ml", "uid": UID},
        "spec": {"containers": [{"name": "trainer"}], "nodeName": "node-7"},
        "status": {
            "phase": "Failed", "reason": reason, "message": message, "conditions": conditions,
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                "exitCode": 137, "reason": "ContainerStatusUnknown",
                "message": "The container could not be located when the pod was terminated"}}}],
        },
    }


def _describe(reason: str, message: str, disruption: bool) -> str:
    """``kubectl describe pod`` of the same pod (kubectl's layout; no condition reasons in it)."""
    rows = "  DisruptionTarget   True \n" if disruption else ""
    return (
        "Name:             bert-train-0\nNamespace:        ml\nPriority:         0\n"
        "Node:             node-7/10.0.0.7\nStart Time:       Wed, 10 May 2023 06:41:27 +0000\n"
        "Labels:           <none>\nAnnotations:      <none>\nStatus:           Failed\n"
        f"Reason:           {reason}\n"
        f"Message:          {message}\nContainers:\n  trainer:\n    Container ID:   \n"
        "    Image:          python:3.11-slim\n    State:          Terminated\n"
        "      Reason:       ContainerStatusUnknown\n"
        "      Message:      The container could not be located when the pod was terminated\n"
        "      Exit Code:    137\n      Started:      Mon, 01 Jan 0001 00:00:00 +0000\n"
        "      Finished:     Mon, 01 Jan 0001 00:00:00 +0000\n    Ready:          False\n"
        "    Restart Count:  0\n    Environment:    <none>\nConditions:\n  Type               Status\n"
        f"{rows}  Initialized        True \n  Ready              False \nEvents:            <none>\n"
    )


#: pod-status-messages.json's real kubelet messages, and the verdict of each.
STATUS_VERDICTS = {
    "memory-eviction": "eviction",
    "ephemeral-eviction-new": "ephemeral-storage-eviction",
    "ephemeral-eviction-old": "ephemeral-storage-eviction",
    "ephemeral-eviction-threshold-only": "ephemeral-storage-eviction",
    "node-shutdown": "preempted",
}


@pytest.mark.parametrize("name", sorted(STATUS_VERDICTS))
def test_real_kubelet_messages_as_yaml_json_and_describe_give_one_verdict(name: str, tmp_path: Path) -> None:
    status = MESSAGES[name]
    disruption = "TerminationByKubelet" if name == "node-shutdown" else None
    pod = _status_pod(status["reason"], status["message"], disruption)
    (tmp_path / "pod.json").write_text(json.dumps(pod, indent=4))
    # kubectl get pod -o jsonpath='{.status}'
    (tmp_path / "status.json").write_text(json.dumps(pod["status"]))
    (tmp_path / "pod.yaml").write_text(_yaml(pod))
    described = _describe(status["reason"], status["message"], disruption is not None)
    (tmp_path / "describe.txt").write_text(described)
    want = STATUS_VERDICTS[name]
    for file in ("pod.json", "status.json", "pod.yaml", "describe.txt"):
        [report] = as_json(tmp_path / file)["reports"]
        assert report["verdict"] == want, (file, report["findings"])
    if name == "node-shutdown":
        [report] = as_json(tmp_path / "pod.yaml")["reports"]
        assert "the kubelet terminated it (a node shutdown" in report["findings"][0]["message"]
        [report] = as_json(tmp_path / "describe.txt")["reports"]
        assert "kubectl describe" in report["findings"][0]["evidence"]["disruption_reason"]


def _yaml(doc: dict[str, Any]) -> str:
    import yaml

    return str(yaml.safe_dump(doc, sort_keys=True))


# -- pod statuses pasted in part ----------------------------------------------------------------------

CORPUS = FIXTURES / "corpus-new"
#: The corpus's pod statuses as people posted them: describe's State lines alone, its Containers part,
#: describe that lost its indentation or follows a shell prompt, a grep'ed or elided -o yaml, a pod's
#: status alone, the 2014 kubelet's JSON. Each sidecar's ``expect`` is what a person reads in it.
PASTES = sorted(
    record
    for sidecar in CORPUS.glob("*.json")
    if json.loads(sidecar.read_text()).get("kind") in ("pod-status", "describe-pod")
    for record in CORPUS.glob(sidecar.stem + ".*")
    if record != sidecar
)


@pytest.mark.parametrize("record", PASTES, ids=lambda p: p.name.split("-", 1)[0])
def test_pasted_pod_statuses_give_the_verdict_a_person_reads(record: Path) -> None:
    sidecar = json.loads(next(CORPUS.glob(record.name.split(".")[0] + ".json")).read_text())
    expect = sidecar["expect"]
    data = as_json(record)
    report = data["reports"][0]
    assert data["input"]["kinds"] == [{"pod-status": "pod", "describe-pod": "describe"}[sidecar["kind"]]]
    assert report["verdict"] == expect["verdict"]
    if "exit_code" in expect:
        assert report["pod"]["exitCode"] == expect["exit_code"]
    for key in ("container_id", "runtime"):
        if key in expect:
            assert report["kill"][key] == expect[key]
            assert report["kill"]["pid"] is None  # no kernel record: no process is named


def test_a_kill_the_status_shows_names_its_container_and_runtime() -> None:
    """Without a kernel record the report's ``kill`` is the container the status shows (its ID and the
    runtime its ``<runtime>://`` names); the text shows the status's end, not a kernel record."""
    record = CORPUS / "116-loongarch-describe-flattened-last-state-error-137.txt"
    [report] = as_json(record)["reports"]
    container = "2680dbb5a408d2c104f7a688f9e292f4a2856bb41a574c0bccb0ef064dcd7d56"
    assert report["kill"]["container_id"] == container
    assert report["kill"]["runtime"] == "containerd" and report["kill"]["pid"] is None
    assert report["pod"]["containerID"].startswith("containerd://2680dbb5")
    text = diagnose(record).stdout
    assert "container 'prometheus' of pod monitor/prometheus-696c87f98f-f44nm (exit 137, Error" in text
    assert "verdict   sigkill-not-oom" in text and "OOM kill 1 of 1" not in text
    # a container that exited on its own (exit 1) was not killed: no kill
    [report] = as_json(LOGS / "pod-trainer-error.yaml")["reports"]
    assert report["kill"] is None


def test_a_part_of_a_pod_status_on_standard_input_and_by_kind(tmp_path: Path) -> None:
    text = (CORPUS / "104-microshift-oc-yaml-grep-laststate-oomkilled.yaml").read_bytes()
    [report] = as_json(stdin=text)["reports"]
    assert (report["verdict"], report["pod"]["container"], report["kill"]["runtime"]) == (
        "memcg-limit", "demo-k8s-buggy", "cri-o")
    (tmp_path / "status.txt").write_bytes(text.replace(b"\n", b"\r\n"))
    [report] = as_json("--kind", "pod", tmp_path / "status.txt")["reports"]
    assert report["verdict"] == "memcg-limit" and report["pod"]["exitCode"] == 137


# -- several files, one report ---------------------------------------------------------------------


def test_kernel_record_pod_and_log_make_one_report(tmp_path: Path) -> None:
    shutil.copy(RECORD, tmp_path / "dmesg.txt")
    shutil.copy(LOGS / "pod-oomkilled.yaml", tmp_path / "pod.yaml")
    shutil.copy(LOGS / "cuda-oom-expandable.log", tmp_path / "train.log")
    data = as_json("dmesg.txt", "pod.yaml", "train.log", cwd=tmp_path)
    [report] = data["reports"]
    # the kernel record wins over anything in the log, as in the operator
    assert report["verdict"] == "memcg-limit"
    assert {"memcg-limit", "kernel-dominant", "runtime-process-killed"} <= set(codes(report))
    assert report["kill"]["pid"] == 12788 and report["cgroup"]["limit_bytes"] == 3 * 2**30
    assert report["evidence"]["kernelRecord"] == {"state": "attached", "files": ["dmesg.txt"]}
    assert report["evidence"]["log"]["file"] == "train.log"
    assert report["findings"][0]["evidence"]["limit_level"] == "pod"
    assert data["input"] == {
        "kinds": ["kernel", "pod", "log"],
        "files": [{"file": "dmesg.txt", "kinds": ["kernel"]}, {"file": "pod.yaml", "kinds": ["pod"]},
                  {"file": "train.log", "kinds": ["log"]}],
    }
    text = diagnose("dmesg.txt", "pod.yaml", "train.log", cwd=tmp_path).stdout
    assert text.startswith("Failure 1 of 1: container 'trainer' of pod ml/embed-train-0")
    assert "kernel    attached" in text and "runc:[2:INIT] (pid 12788)" in text


def test_a_record_of_another_pod_is_reported_on_its_own(tmp_path: Path) -> None:
    pod = (LOGS / "pod-oomkilled.yaml").read_text().replace("6c4333b3-a663-11ea-b39f-6c92bf85beda",
                                                             "0d1c2b3a-4f5e-4d6c-8b7a-9f8e7d6c5b4a")
    pod = pod.replace("bbd5e4b5f9c13666dd0ec7ff7afb2c4c2b0ede40a4adf1de43cc31c606f283f5", "f" * 64)
    (tmp_path / "pod.yaml").write_text(pod)
    data = as_json(RECORD, tmp_path / "pod.yaml")
    mine, other = data["reports"]
    assert mine["pod"]["uid"] == "0d1c2b3a-4f5e-4d6c-8b7a-9f8e7d6c5b4a"
    # no kernel record of its own: the kill names the container its status shows, no process
    assert mine["kill"]["pid"] is None and mine["kill"]["container_id"] == "f" * 64
    assert mine["evidence"]["kernelRecord"]["state"] == "not-found"
    # the record stays, reported as kernel text alone is
    assert other["kill"]["pod_uid"] == "6c4333b3-a663-11ea-b39f-6c92bf85beda" and "pod" not in other


def test_a_describe_and_a_kernel_record_pair_without_a_uid(tmp_path: Path) -> None:
    """kubectl describe shows no pod UID: with one pod given, the kernel text given is its."""
    describe = (LOGS / "describe-segfault.txt").read_text().replace("Exit Code:    139", "Exit Code:    137")
    (tmp_path / "describe.txt").write_text(describe.replace("Reason:       Error", "Reason:       OOMKilled"))
    [report] = as_json(RECORD, tmp_path / "describe.txt")["reports"]
    assert report["verdict"] == "memcg-limit" and report["kill"]["pid"] == 12788
    assert report["evidence"]["kernelRecord"]["state"] == "attached"


def test_a_multi_pod_job_gets_the_job_reports_root_cause(tmp_path: Path) -> None:
    shutil.copy(LOGS / "nccl-watchdog-torch25.log", tmp_path / "ddp-master-0.log")
    data = as_json(LOGS / "pods-ddp.yaml", "ddp-master-0.log", cwd=tmp_path)
    oom, nccl = data["reports"]
    assert (oom["pod"]["name"], oom["verdict"]) == ("ddp-worker-0", "memcg-limit")
    assert nccl["pod"]["name"] == "ddp-master-0" and nccl["job"]["role"] == "consequence"
    job = data["job"]
    assert job["rootCause"]["pod"] == "ddp-worker-0" and job["rootCause"]["rank"] == 1
    assert job["guessed"] is False and job["roles"] == {"consequence": 1, "root-cause": 1}
    assert [(r["pod"], r["role"]) for r in job["rows"]] == [("ddp-master-0", "consequence"),
                                                            ("ddp-worker-0", "root-cause")]
    text = diagnose(LOGS / "pods-ddp.yaml", "ddp-master-0.log", cwd=tmp_path).stdout
    assert "root cause   ddp-worker-0 (rank 1), memcg-limit" in text


def test_two_pods_in_one_describe_and_logs_named_after_their_pods(tmp_path: Path) -> None:
    both = [(LOGS / name).read_text() for name in ("describe-segfault.txt", "describe-preempted.txt")]
    (tmp_path / "describe.txt").write_text("\n\n".join(both))
    shutil.copy(LOGS / "python-exception.log", tmp_path / "pointcept-train-0.log")
    data = as_json("describe.txt", "pointcept-train-0.log", cwd=tmp_path)
    by_pod = {r["pod"]["name"]: r for r in data["reports"]}
    assert by_pod["pointcept-train-0"]["verdict"] == "segfault"
    assert by_pod["pointcept-train-0"]["evidence"]["log"]["file"] == "pointcept-train-0.log"
    assert by_pod["finetune-spot-1"]["verdict"] == "preempted"
    assert set(data["job"]["roles"]) == {"root-cause", "unrelated"}


def test_a_log_named_after_a_container_goes_to_it(tmp_path: Path) -> None:
    shutil.copy(LOGS / "nccl-remote-error.log", tmp_path / "llm-train-sidecar-0.proxy.log")
    data = as_json(LOGS / "pod-sidecar-oom.yaml", "llm-train-sidecar-0.proxy.log", cwd=tmp_path)
    proxy, trainer = data["reports"]
    assert proxy["evidence"]["log"]["file"] == "llm-train-sidecar-0.proxy.log"
    assert "file" not in trainer["evidence"]["log"] and trainer["verdict"] == "sidecar-oom"


def test_the_same_pod_as_an_object_and_as_describe_is_one_pod(tmp_path: Path) -> None:
    status = MESSAGES["memory-eviction"]
    (tmp_path / "pod.json").write_text(json.dumps(_status_pod(status["reason"], status["message"])))
    (tmp_path / "describe.txt").write_text(_describe(status["reason"], status["message"], False))
    data = as_json("describe.txt", "pod.json", cwd=tmp_path)
    [report] = data["reports"]
    assert report["verdict"] == "eviction" and report["evidence"]["podStatus"]["file"] == "pod.json"
    assert "job" not in data


def test_a_log_no_failed_container_takes_is_said(tmp_path: Path) -> None:
    shutil.copy(LOGS / "cuda-oom-expandable.log", tmp_path / "a.log")
    shutil.copy(LOGS / "python-exception.log", tmp_path / "b.log")
    data = as_json(LOGS / "pod-trainer-error.yaml", "a.log", "b.log", cwd=tmp_path)
    [report] = data["reports"]
    assert "file" not in report["evidence"]["log"]
    assert [u["file"] for u in data["input"]["unused"]] == ["a.log", "b.log"]
    assert "name the file after its pod or container" in data["input"]["unused"][0]["why"]


def test_kernel_lines_inside_a_training_log_are_read(tmp_path: Path) -> None:
    """A console capture: training output, then the kernel's record, then more output."""
    before = "".join(f"[rank0]: epoch 0 step {i} loss=0.41\n" for i in range(6000))  # past the first 64 KiB
    record = RECORD.read_text().rstrip("\n") + "\n"
    (tmp_path / "console.log").write_text(before + record + "[rank0]: Killed\n")
    data = as_json(tmp_path / "console.log")
    [report] = data["reports"]
    assert report["verdict"] == "memcg-limit" and report["kill"]["pid"] == 12788
    assert data["input"]["files"][0]["kinds"] == ["log", "kernel"]
    assert report["evidence"]["log"]["lines"] == 6000 + len(record.splitlines()) + 1


def test_kubectl_logs_timestamps_are_read_and_a_stale_tail_said(tmp_path: Path) -> None:
    lines = (LOGS / "cuda-oom-expandable.log").read_text().splitlines()
    stamped = "".join(f"2024-05-01T09:40:{i:02d}.123456789Z {line}\n" for i, line in enumerate(lines))
    (tmp_path / "llm-train-0.log").write_text(stamped)
    [report] = as_json(LOGS / "pod-trainer-error.yaml", tmp_path / "llm-train-0.log")["reports"]
    assert report["verdict"] == "cuda-oom"  # the stamps are taken off before the rules read the lines
    assert report["evidence"]["log"]["lastLineAt"] == "2024-05-01T09:40:04Z"
    stale = next(f for f in report["findings"] if f["code"] == "stale-log")
    assert stale["evidence"]["age_seconds"] == 25 * 60 + 55  # 10:06:00 less 09:40:04.123456789


# -- kinds -----------------------------------------------------------------------------------------


def test_pod_yaml_on_standard_input() -> None:
    data = as_json(stdin=(LOGS / "pod-preempted.yaml").read_bytes())
    assert [r["verdict"] for r in data["reports"]] == ["preempted"]
    assert data["input"] == {"kinds": ["pod"], "files": [{"file": "standard input", "kinds": ["pod"]}]}


def test_kind_forces_how_a_file_is_read() -> None:
    done = diagnose("--kind", "describe", LOGS / "pod-oomkilled.yaml")
    assert done.returncode == 2 and "not kubectl describe pod output" in done.stderr
    done = diagnose("--kind", "kernel", LOGS / "cuda-oom-expandable.log")
    assert done.returncode == 3 and "no kernel OOM-kill record found in" in done.stderr
    done = diagnose("--kind", "log", LOGS / "pod-oomkilled.yaml")
    assert done.returncode == 3 and "(looked for: training-log deaths)" in done.stderr
    assert "no kernel OOM-kill record" not in done.stderr  # not looked for
    data = as_json("--kind", "pod", stdin=(LOGS / "pod-evicted-pids.json").read_bytes())
    assert data["reports"][0]["verdict"] == "node-pressure-eviction"
    data = as_json("--kind", "log", LOGS / "cuda-oom-expandable.log")
    assert data["input"]["kinds"] == ["log"]


def test_nothing_found_says_what_was_looked_for_in_which_file(tmp_path: Path) -> None:
    quiet = tmp_path / "quiet.log"
    quiet.write_text("".join(f"step {i} loss=0.5\n" for i in range(100)))
    running = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llm-train-0", "namespace": "ml"},
               "spec": {"containers": [{"name": "trainer"}]},
               "status": {"phase": "Running", "containerStatuses": [
                   {"name": "trainer", "state": {"running": {"startedAt": "2024-05-01T09:00:05Z"}}}]}}
    (tmp_path / "running.yaml").write_text(_yaml(running))
    done = diagnose(quiet, tmp_path / "running.yaml")
    assert done.returncode == 3 and done.stdout == ""
    assert f"no kernel OOM-kill record found in {quiet}" in done.stderr
    assert f"no failed container in {tmp_path / 'running.yaml'} (pod object of llm-train-0)" in done.stderr
    looked = "(looked for: kernel OOM-kill records, failed containers in pod objects, training-log deaths)"
    assert looked in done.stderr
    done = diagnose(quiet, "--json")
    assert done.returncode == 3 and json.loads(done.stdout)["reports"] == []


def test_unreadable_inputs_exit_2(tmp_path: Path) -> None:
    done = diagnose(LOGS / "pod-oomkilled.yaml", tmp_path / "missing.log")
    assert done.returncode == 2 and f"no such file: {tmp_path / 'missing.log'}" in done.stderr
    broken = tmp_path / "pod.json"
    broken.write_text('{"kind": "Pod", "status": {"containerStatuses": [')
    done = diagnose("--kind", "pod", broken)
    assert done.returncode == 2 and "not valid JSON" in done.stderr and "Traceback" not in done.stderr
    big = tmp_path / "big.yaml"
    with big.open("w") as f:
        f.write("apiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n")
        for i in range(17 * 2**20 // 40):
            f.write(f"    note-{i:08d}: {'x' * 20}\n")
    done = diagnose(big)
    assert done.returncode == 2 and "is over 16 MiB" in done.stderr
    done = diagnose("-", "-", stdin=b"")
    assert done.returncode == 2


def test_yaml_without_pyyaml_says_what_to_do(tmp_path: Path) -> None:
    """The base install has no PyYAML: a pod's YAML is an input error that names the fixes; JSON reads."""
    blocked = "import sys; sys.modules['yaml'] = None; from podmortem.cli import main; sys.exit(main.main())"
    done = subprocess.run([sys.executable, "-c", blocked, "diagnose", str(LOGS / "pod-preempted.yaml")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "reading YAML needs PyYAML" in done.stderr and "-o json" in done.stderr
    done = subprocess.run([sys.executable, "-c", blocked, "diagnose", str(LOGS / "pod-evicted-pids.json")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "verdict   node-pressure-eviction" in done.stdout
    broken = tmp_path / "pod.yaml"
    text = (LOGS / "pod-preempted.yaml").read_text()
    broken.write_text(text.replace("  name: trainer", "  name: [trainer"))
    done = diagnose(broken)
    assert done.returncode == 2 and "not valid YAML" in done.stderr


def test_html_of_a_training_log_is_the_page_report_draws_from_its_json(tmp_path: Path) -> None:
    log = LOGS / "cuda-oom-expandable.log"
    done = diagnose("--html", log)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!DOCTYPE html>") and "cuda-oom" in done.stdout
    assert f"<title>{log.stem}" in done.stdout
    as_json = diagnose("--json", log)
    (tmp_path / "r.json").write_text(as_json.stdout)
    page = subprocess.run([PODMORTEM, "report", "--json", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert page.returncode == 0, page.stderr
    # The same document through the same page: alike but for the title, the generation time and the
    # note on where log lines are.
    ours = _body(done.stdout).replace("the page holds no log lines; without --html, podmortem diagnose "
                                      "prints the log&#x27;s facts", "LOG NOTE")
    theirs = _body(page.stdout).replace("a stored report holds no log lines; the operator&#x27;s page adds "
                                        "them from its log store", "LOG NOTE")
    assert "LOG NOTE" in ours and ours == theirs


def test_html_of_a_pod_status_is_titled_by_the_pod() -> None:
    done = diagnose("--html", LOGS / "pod-evicted-pids.json")
    assert done.returncode == 0, done.stderr
    assert "node-pressure-eviction" in done.stdout


def test_html_with_nothing_found_says_so(tmp_path: Path) -> None:
    quiet = tmp_path / "quiet.log"
    quiet.write_text("epoch 1 loss 0.5\nepoch 2 loss 0.4\n")
    done = diagnose("--html", quiet)
    assert done.returncode != 0 and not done.stdout and "podmortem diagnose:" in done.stderr


def _body(html: str) -> str:
    import re

    html = re.sub(r"<title>.*?</title>", "", html, flags=re.S)
    html = re.sub(r"<h1[^>]*>.*?</h1>", "", html, flags=re.S)
    return re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?(\.\d+)?( ?UTC|Z|\+00:00)?", "", html)


# -- the --json schema -------------------------------------------------------------------------------


@pytest.mark.parametrize(("files", "kinds"), [
    ((RECORD,), ["kernel"]),
    ((LOGS / "pod-preempted.yaml",), ["pod"]),
    ((LOGS / "describe-segfault.txt",), ["describe"]),
    ((LOGS / "cuda-oom-expandable.log",), ["log"]),
    ((RECORD, LOGS / "pod-oomkilled.yaml", LOGS / "python-exception.log"), ["kernel", "pod", "log"]),
], ids=["kernel", "pod", "describe", "log", "combined"])
def test_one_json_schema_for_every_kind(files: tuple[Path, ...], kinds: list[str]) -> None:
    data = as_json(*files)
    assert set(data) == {"reports", "input"}
    assert data["input"]["kinds"] == kinds
    assert [f["file"] for f in data["input"]["files"]] == list(map(str, files))
    for report in data["reports"]:
        assert isinstance(report["verdict"], str)
        assert {"verdict", "kill", "cgroup", "tasks", "findings", "partial", "missing"} <= set(report)
        if kinds != ["kernel"]:  # the operator's report context, under the annotation's names
            assert {"pod", "evidence"} <= set(report)
            assert {"podStatus", "kernelRecord", "log"} == set(report["evidence"])


def test_help_shows_training_log_and_pod_status_examples() -> None:
    done = diagnose("--help")
    assert done.returncode == 0
    for example in (
        "kubectl logs --previous POD > train.log; podmortem diagnose train.log",
        "kubectl get pod POD -o yaml | podmortem diagnose",
        "podmortem diagnose dmesg.txt pod.yaml train.log",
        "dmesg | podmortem diagnose",
    ):
        assert example in done.stdout
    assert "--kind {auto,kernel,pod,describe,log}" in done.stdout and "--exit-code N" in done.stdout
    assert "exit codes: 0 report printed, 2 input unreadable, 3 no OOM-kill record" in done.stdout


# -- bounded reading ---------------------------------------------------------------------------------

_MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(done.returncode, peak)
sys.stdout.write(done.stdout)
"""


def test_a_200_mb_log_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """The operator reads the last 50 lines; so does diagnose, streaming, whatever the log's size."""
    log = tmp_path / "train.log"
    line = b"[rank0]: epoch 7 step 123456 loss=0.4123 lr=3.0e-05 grad_norm=0.9876 tokens/s=51234.5\n"
    block = line * 10_000
    blocks = 200 * 2**20 // len(block) + 1
    with log.open("wb") as f:
        for _ in range(blocks):
            f.write(block)
        f.write((LOGS / "cuda-oom-expandable.log").read_bytes())
    size = log.stat().st_size
    assert size > 200 * 2**20
    # A process of its own measures the child: RUSAGE_CHILDREN of this one holds every earlier child.
    def peak_of(path: Path) -> tuple[int, dict[str, Any]]:
        done = subprocess.run([sys.executable, "-c", _MEASURE, PODMORTEM, "diagnose", "--json", str(path)],
                              capture_output=True, text=True, timeout=300, check=True)
        head, out = done.stdout.split("\n", 1)
        code, peak = map(int, head.split())
        assert code == 0, done.stderr
        report: dict[str, Any] = json.loads(out)["reports"][0]
        return peak, report

    peak, report = peak_of(log)
    assert report["verdict"] == "cuda-oom"
    assert report["evidence"]["log"]["tailLines"] == 50
    assert report["evidence"]["log"]["lines"] == blocks * 10_000 + 5  # every line counted, 50 kept
    small, _ = peak_of(LOGS / "cuda-oom-expandable.log")  # the interpreter and its imports
    said = f"peak RSS {peak / 2**20:.0f} MiB for a {size >> 20} MiB log, {small / 2**20:.0f} MiB for 5 lines"
    assert peak < size / 4 and peak - small < 16 * 2**20, said


def test_a_log_line_of_many_megabytes_is_clipped_as_the_operator_clips_it(tmp_path: Path) -> None:
    bar = "\r".join(f"Epoch 3: {i:>3}%|{'#' * (i // 10)}" for i in range(100)) * 2000  # ~5 MB, no newline
    (tmp_path / "bar.log").write_text(bar + "\n" + (LOGS / "cuda-oom-torch1-cached.log").read_text())
    [report] = as_json(tmp_path / "bar.log")["reports"]
    assert report["verdict"] == "cuda-oom" and report["evidence"]["log"]["lines"] == 2


# -- the operator's tail, and kernel text as before ----------------------------------------------------


def test_kernel_text_reads_as_it_did(capsys: pytest.CaptureFixture[str]) -> None:
    """Every record of the corpus: told by content, it reads exactly as when read as kernel text."""
    from podmortem.cli import main as cli_main

    for path in sorted(RECORDS.glob("*.log")):
        outs = []
        for kind in ("auto", "kernel"):
            code = cli_main.main(["diagnose", "--json", "--kind", kind, str(path)])
            out = capsys.readouterr().out
            outs.append((code, json.loads(out)["reports"] if out else None))
        assert outs[0] == outs[1], path.name
