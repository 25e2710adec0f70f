"""Pod-side forms built from their printers: describe's Status/Reason/Message glued on one line where a
copy lost the line ends (the message wrapped after it), and the scheduler's ``Preempted`` Event row
alone (pkg/scheduler/framework/preemption: ``Preempted by pod %v on node %v`` with the preemptor's
UID; ``Preempted by %v/%v on node %v`` with its namespace and name before)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podmortem.diagnosis import offline, pod_events
from podmortem.diagnosis.pasted import pasted_lines

_phases = st.sampled_from(("Failed", "Pending", "Running", "Succeeded", "Unknown"))
_reasons = st.from_regex(r"[A-Z][a-z]{2,12}(?:[A-Z][a-z]{2,8})?", fullmatch=True).filter(
    lambda r: "Message" not in r and "Reason" not in r)
_labels = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)


@given(st.sampled_from(("", "  ")), _phases, _reasons, st.text("abcdefghij .:0123456789", max_size=60),
       st.integers(1, 3), st.integers(3, 8))
def test_glued_status_reason_message_are_three_fields(indent: str, phase: str, reason: str, message: str,
                                                      gap1: int, gap2: int) -> None:
    line = f"{indent}Status:{' ' * gap2}{phase}Reason:{' ' * gap2}{reason}Message:{' ' * gap1}x{message}"
    assert pasted_lines(line) == [f"{indent}Status:  {phase}", f"{indent}Reason:  {reason}",
                                  f"{indent}Message:  x{message}".rstrip()]


@given(st.integers(1, 64), st.integers(1, 10**7), st.integers(1, 10**7))
def test_a_glued_eviction_with_a_wrapped_message_is_a_describe(gi: int, avail: int, usage: int) -> None:
    text = (f"Status:   FailedReason:   EvictedMessage:  The node was low on resource: memory.\n"
            f"Threshold quantity: {gi}Gi, available: {avail}Ki.\n"
            f"Container hog was using {usage}Ki, request is 256Mi.\nQoS Class: Burstable\n")
    assert offline.sniff(text) == "describe"
    (pod,) = offline.pods_from_describe(text)
    assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "Evicted")


def test_a_status_word_glued_to_other_text_is_left_alone() -> None:
    for line in ("Status:   FailedReasons: x", "Status: Bad Reason: x",
                 "prefix Status: FailedReason: Evicted"):
        assert pasted_lines(line) == [line]


@given(_labels, st.uuids(), _labels, st.sampled_from(("Normal", "Warning")), st.integers(3, 6))
def test_a_lone_preempted_event_row(name: str, uid: object, node: str, kind: str, gap: int) -> None:
    pad = " " * gap
    row = f"{kind}{pad}Preempted{pad}pod/{name}{pad}Preempted by pod {uid} on node {node}"
    assert pod_events.kind_of([row])
    (pod,) = pod_events.pods_from_events([row])
    assert [c["reason"] for c in pod["status"]["conditions"]] == ["PreemptionByScheduler"]


@given(_labels, _labels, _labels)
def test_the_older_preempted_message_names_the_preemptor(namespace: str, name: str, node: str) -> None:
    (pod,) = pod_events.pods_from_events([f"Preempted by {namespace}/{name} on node {node}"])
    assert [c["reason"] for c in pod["status"]["conditions"]] == ["PreemptionByScheduler"]
