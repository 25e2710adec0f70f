"""Pod records as people paste them without the pod: kubectl get events rows, one describe Events row,
describe's ``Message:`` line, the kubelet's eviction message alone. Each must give the verdict the
operator gives the pod (the forms from kubectl's printers, the messages from the kubelet's and the
scheduler's sources: podmortem.diagnosis.pod_events, catalogue)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from podmortem.cli import main as cli_main
from podmortem.diagnosis import offline, pod_events
from podmortem.diagnosis.pasted import pasted_lines

_EVICTION = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi. Container "
             "trainer was using 30Gi, request is 8Gi, has larger consumption of memory.")
_EVENTS = (
    "LAST SEEN   TYPE      REASON      OBJECT              MESSAGE\n"
    f"2m          Warning   Evicted     pod/trainer-0       {_EVICTION}\n"
    "2m          Normal    Killing     pod/trainer-0       Stopping container trainer\n"
)
_EVENTS_ALL_WIDE = (
    "NAMESPACE   LAST SEEN   TYPE     REASON      OBJECT          SUBOBJECT   SOURCE              MESSAGE"
    "                                                     FIRST SEEN   COUNT   NAME\n"
    "ml          7m          Normal   Preempted   pod/trainer-3               default-scheduler   Preempted "
    "by pod 5b1c6f1e-7a0e-4f5e-9d1a-2f3e4a5b6c7d on node gpu-2   7m           1       trainer-3.17a\n"
)


def _verdicts(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> list[Any]:
    path = tmp_path / "pasted.txt"
    path.write_text(text)
    assert cli_main.main(["diagnose", "--json", str(path)]) == 0
    return [r["verdict"] for r in json.loads(capsys.readouterr().out)["reports"]]


@pytest.mark.parametrize(("text", "verdict"), [
    (_EVENTS, "eviction"),
    (_EVENTS_ALL_WIDE, "preempted"),
    (f"  Warning  Evicted  4m51s  kubelet  {_EVICTION}\n", "eviction"),
    (f"Message:          {_EVICTION}\n", "eviction"),
    ("The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 2Gi. Container "
     "trainer was using 40Gi, request is 0, has larger consumption of ephemeral-storage.\n",
     "ephemeral-storage-eviction"),
    ("The node was low on resource: memory. Container trainer was using 30Gi, which exceeds its request of "
     "8Gi.\n", "eviction"),
    # The kubelet's own limits on local storage (pkg/kubelet/eviction/helpers.go), each message alone.
    ('Container trainer exceeded its local ephemeral storage limit "20Gi". \n', "ephemeral-storage-eviction"),
    ('Usage of EmptyDir volume "dshm" exceeds the limit "8Gi". \n', "ephemeral-storage-eviction"),
    ("Pod ephemeral local storage usage exceeds the total limit of containers 40Gi. \n",
     "ephemeral-storage-eviction"),
])
def test_each_pasted_form_gives_the_pods_verdict(
    tmp_path: Path, text: str, verdict: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert offline.sniff(text) == "describe"
    assert _verdicts(tmp_path, text, capsys) == [verdict]


def test_a_message_naming_its_container_names_it_whichever_message_it_is() -> None:
    (pod,) = pod_events.pods_from_events(
        ['Container trainer-2 exceeded its local ephemeral storage limit "20Gi". '])
    assert pod["spec"]["containers"] == [{"name": "trainer-2"}]


def test_the_events_table_names_the_pod_and_container() -> None:
    (pod,) = pod_events.pods_from_events(pasted_lines(_EVENTS))
    assert pod["metadata"]["name"] == "trainer-0"
    assert pod["spec"]["containers"] == [{"name": "trainer"}]
    (pod,) = pod_events.pods_from_events(pasted_lines(_EVENTS_ALL_WIDE))
    assert pod["metadata"] == {"name": "trainer-3", "namespace": "ml", "labels": {}, "annotations": {}}


@pytest.mark.parametrize("text", [
    # a long log that quotes the kubelet's message is no pod record
    "".join(f"step {i} loss 0.1\n" for i in range(20)) + f"I0101 eviction_manager.go:1] {_EVICTION}\n",
    # events of other objects and reasons say nothing of a pod's end
    "LAST SEEN   TYPE      REASON      OBJECT        MESSAGE\n"
    "2m          Warning   OOMKilling  node/node-a   Memory cgroup out of memory: Killed process 42 "
    "(python)\n",
    "  Normal  Killing  2m  kubelet  Stopping container trainer\n",
])
def test_what_is_no_pod_record(text: str) -> None:
    assert pod_events.pods_from_events(pasted_lines(text)) == []


def test_a_long_line_is_read_in_linear_time() -> None:
    """A row's cells are bounded: a hostile line that starts like a row costs no more than its length."""
    import time

    line = "Warning  Evicted  " + "x  " * 2_000_000
    start = time.process_time()
    assert pod_events.pods_from_events([line]) == []
    assert time.process_time() - start < 1.0
