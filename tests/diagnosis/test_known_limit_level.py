"""The level of the limit that filled comes from what the node agent knows, not from the path's shape.

Before, the demo's own pod (its cgroup ``/podmortem-demo-pod-...``, hitting its 256 MiB limit)
was told "the cgroup ..., which is not a pod's, reached its own limit" with the advice to check
a systemd MemoryMax: the level was guessed from the path's shape, although the agent had
matched the record to the pod by the pod's own cgroup. A custom ``--cgroup-root``, a nested
runtime or cgroup namespaces give the same wrong advice. Path shapes stay the fallback for
offline records (``podmortem diagnose``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from podmortem import diagnosis
from podmortem.diagnosis import limits
from podmortem.diagnosis.verdicts import known_pod
from podmortem.kernel import oom_parser
from podmortem.reports.evidence import PodEvidence

RECORD = Path(__file__).parents[1] / "fixtures" / "oom-records" / "20-podmortem-v1-kmsg-fork-cow-6.18.log"
UID = "6c4333b3-a663-11ea-b39f-6c92bf85beda"
CID = "bbd5e4b5f9c13666dd0ec7ff7afb2c4c2b0ede40a4adf1de43cc31c606f283f5"
SYSTEMD_POD = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice"


def message_for(limit_path: str, task_path: str, pod_path: str | None) -> tuple[str, str]:
    text = RECORD.read_text()
    text = text.replace("oom_memcg=/podmortem-capture-44e03907e165", f"oom_memcg={limit_path}")
    text = text.replace("task_memcg=/podmortem-capture-44e03907e165", f"task_memcg={task_path}")
    text = text.replace("Memory cgroup stats for /podmortem-capture-44e03907e165",
                        f"Memory cgroup stats for {limit_path}")
    [record] = oom_parser.parse_text(text)
    evidence = PodEvidence(pod_uid=UID, cgroup_path=pod_path) if pod_path is not None else None
    report = diagnosis.diagnose(record, pod=known_pod(record, evidence))
    finding = report.finding("memcg-limit")
    assert finding is not None
    return finding.message, finding.action or ""


POD_LIMIT = "the pod's memory cgroup reached the pod's limit"
CONTAINER_LIMIT = "the container's memory cgroup reached the container's own limit"


@pytest.mark.parametrize(("limit", "task", "pod", "expected"), [
    # cgroupfs (v1 and v2): the pod's own cgroup, and a container's below it
    (f"/kubepods/burstable/pod{UID}", f"/kubepods/burstable/pod{UID}/{CID}", f"/kubepods/burstable/pod{UID}",
     POD_LIMIT),
    (f"/kubepods/burstable/pod{UID}/{CID}", f"/kubepods/burstable/pod{UID}/{CID}",
     f"/kubepods/burstable/pod{UID}", CONTAINER_LIMIT),
    # systemd driver
    (SYSTEMD_POD, f"{SYSTEMD_POD}/cri-containerd-{CID}.scope", SYSTEMD_POD, POD_LIMIT),
    # a custom --cgroup-root whose names say nothing a shape could read
    ("/ml-nodes/runs/job-7", "/ml-nodes/runs/job-7/trainer", "/ml-nodes/runs/job-7", POD_LIMIT),
    ("/ml-nodes/runs/job-7/trainer", "/ml-nodes/runs/job-7/trainer", "/ml-nodes/runs/job-7", CONTAINER_LIMIT),
    # the demo's layout
    ("/podmortem-demo-pod-1f2e", "/podmortem-demo-pod-1f2e", "/podmortem-demo-pod-1f2e", POD_LIMIT),
    # a node inside a container (kind): the kernel prints a prefix the agent's view lacks
    (f"/docker/{CID}/kubepods/burstable/pod{UID}", f"/docker/{CID}/kubepods/burstable/pod{UID}",
     f"/kubepods/burstable/pod{UID}", POD_LIMIT),
])
def test_the_pods_own_limit_is_named_whatever_the_layout(
    limit: str, task: str, pod: str, expected: str
) -> None:
    message, action = message_for(limit, task, pod)
    assert expected in message
    assert "not a pod's" not in message and "MemoryMax" not in action


@pytest.mark.parametrize(("limit", "pod", "expected"), [
    # above the pod: the QoS class's (the shape says which), or an unnamed parent
    ("/kubepods/burstable", f"/kubepods/burstable/pod{UID}", "the Burstable QoS cgroup /kubepods/burstable"),
    ("/ml-nodes/runs", "/ml-nodes/runs/job-7", "above this pod's own cgroup, filled: a limit the pods"),
])
def test_a_limit_above_the_pod_is_a_shared_one(limit: str, pod: str, expected: str) -> None:
    message, action = message_for(limit, f"{pod}/trainer", pod)
    assert expected in message
    assert "Raising this pod's limit does not help" in action


def test_offline_records_still_read_the_shape() -> None:
    message, action = message_for("/system.slice/backup.service", "/system.slice/backup.service", None)
    assert "which is not a pod's" in message and "MemoryMax" in action
    message, _ = message_for("/ml-nodes/runs/job-7", "/ml-nodes/runs/job-7", None)
    assert "which is not a pod's" in message  # without knowledge, a custom root reads as "other"


@pytest.mark.parametrize(("limit", "pod", "level"), [
    ("/a/b", "/a/b", "pod"),
    ("/a/b/c", "/a/b", "container"),
    ("/a", "/a/b", "shared"),
    ("/", "/a/b", "shared"),
    ("/x/a/b", "/a/b", "pod"),
    ("/x/a", "/a/b", "shared"),
    ("/c", "/a/b", None),
    ("/a/bc", "/a/b", None),
    (None, "/a/b", None),
    ("/a/b", None, None),
])
def test_level_from_pod(limit: str | None, pod: str | None, level: str | None) -> None:
    assert limits.level_from_pod(limit, pod) == level
