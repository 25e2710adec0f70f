"""End to end on kmock: a 2-rank PyTorchJob whose ranks' memory lines interleave.

Rank 1 grows 3 GiB an epoch toward its 32 GiB limit, rank 0 stays flat, and in each epoch rank 1's
line reaches the operator first. The job gets one MemoryPressure Warning naming rank 1's pod and
rank (from rank 1's own peaks, not a line through both ranks'), and when rank 1's peak drops again
a MemoryPressureEnded Event (a foreign job has no condition to show the end).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from podmortem.kube.owners import DEFAULT_FOREIGN_KINDS
from podmortem_demo.emulated.kubelet import LineText
from podmortem_demo.harness import Harness, harness, run_pod

PTJ_PATH = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"
JOB = "ddp-mem"
#: Pod name, replica type, replica index, epoch peaks (GiB) of the 32 GiB limit.
RANKS = [
    (f"{JOB}-worker-0", "worker", 0, [20.0, 23.0, 26.0, 29.0, 12.0]),  # rank 1
    (f"{JOB}-master-0", "master", 0, [8.0, 8.0, 8.0, 8.0, 8.0]),  # rank 0
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with harness(tmp_path_factory.mktemp("pressure")) as h:
        h.add_agent_pod()
        h.start_operator(h.settings(log_http_auth=False, foreign_kinds=DEFAULT_FOREIGN_KINDS))
        yield h
        assert h.operator_error is None, h.operator_error


def memory_lines(peaks_gib: list[float]) -> Callable[[str, int], LineText]:
    """Line ``e`` is epoch ``e``'s memory line (the format of the runtime's memory line)."""

    def factory(container: str, instance: int) -> LineText:
        def text(seq: int) -> bytes:
            gib = peaks_gib[seq]
            return (
                f"-> memory epoch {seq}: rss 3.00GiB (peak 3.50GiB), pod {gib - 1:.2f}GiB of 32.00GiB "
                f"(peak {max(peaks_gib[: seq + 1]):.2f}GiB, epoch peak {gib:.2f}GiB), workers 2 pss 1.20GiB"
            ).encode()

        return text

    return factory


def pressure_events(h: Harness) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"])
        for e in h.events_for(JOB)
        if e["reason"] in ("MemoryPressure", "MemoryPressureEnded")
    ]


def test_each_rank_is_projected_on_its_own_peaks_and_the_job_names_the_rank(cluster: Harness) -> None:
    h = cluster
    owner = h.create(
        PTJ_PATH,
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": JOB, "namespace": "default", "annotations": {"podmortem.io/watch": "true"}},
            "spec": {},
        },
    )
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": JOB,
           "uid": owner["metadata"]["uid"], "controller": True}
    uids: dict[str, str] = {}
    for name, kind, index, peaks in RANKS:
        labels = {"training.kubeflow.org/job-name": JOB, "training.kubeflow.org/replica-type": kind,
                  "training.kubeflow.org/replica-index": str(index)}
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels, "ownerReferences": [ref]},
            "spec": {"containers": [{"name": "trainer", "image": "x"}]},
        }
        h.create("/api/v1/namespaces/default/pods", pod)
        uids[name] = run_pod(h, name=name, text=memory_lines(peaks))
    service = h.running[0].service

    def write(name: str, n: int) -> None:
        """One more line of ``name``, read by the operator before the next is written."""
        h.sync(lambda: h.api.pods["default", name].containers["trainer"].write(1))

        def read() -> bool | None:
            facts = service.following.facts(uids[name]) if service.following is not None else None
            return True if facts is not None and facts.lines >= n else None

        h.wait(read, what=f"{name}'s line {n} in the operator")

    for epoch in range(4):
        for name, *_ in RANKS:  # rank 1 first, then rank 0
            write(name, epoch + 1)
    warned = h.wait(lambda: pressure_events(h) or None, what="the MemoryPressure Event")
    assert len(warned) == 1, warned
    kind, reason, message = warned[0]
    assert (kind, reason) == ("Warning", "MemoryPressure")
    assert message.startswith(f"{JOB}-worker-0 (rank 1): epoch 2: epoch peak 26Gi of the 32Gi limit (81%)")
    assert "growing 3Gi/epoch; projected to cross the limit at epoch 4" in message
    assert "master" not in message

    for name, *_ in RANKS:
        write(name, 5)  # rank 1 drops to 12 GiB: no rank is projected over
    events = h.wait(lambda: pressure_events(h) if len(pressure_events(h)) > 1 else None, what="the end")
    assert events[1:] == [(
        "Normal", "MemoryPressureEnded",
        f"epoch 4: {JOB}-worker-0 (rank 1) is no longer projected to cross its limit, and no other rank is",
    )]
