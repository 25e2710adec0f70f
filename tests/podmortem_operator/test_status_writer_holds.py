"""The StatusWriter owns what a TrainingJob's status holds: a patch that changes nothing is not sent, a
report's rewrite removes what the new report no longer has, and a job gone (404) leaves nothing held."""

from __future__ import annotations

from typing import Any

from podmortem.kube.api import KubeError
from podmortem.operator.status import StatusWriter, merged


class RecordingKube:
    """Takes the status patches; answers 404 once ``gone``."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []
        self.gone = False

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        if self.gone:
            raise KubeError(404, "not found")
        self.patches.append(patch["status"])
        return patch


def _writer() -> tuple[StatusWriter, RecordingKube]:
    kube = RecordingKube()
    return StatusWriter(kube=kube), kube  # type: ignore[arg-type]


def test_merged_applies_a_json_merge_patch() -> None:
    held = {"a": 1, "m": {"x": 1, "y": 2}, "gone": True}
    assert merged(held, {"m": {"y": None, "z": 3}, "gone": None, "b": [1]}) == {
        "a": 1, "m": {"x": 1, "z": 3}, "b": [1]}
    assert held == {"a": 1, "m": {"x": 1, "y": 2}, "gone": True}  # not changed in place


async def test_patch_if_changed_sends_only_what_differs_from_the_status() -> None:
    writer, kube = _writer()
    writer.seed(namespace="ns", name="tj", status={"phase": "Running", "podName": "tj-train"})
    assert not await writer.patch_if_changed(namespace="ns", name="tj",
                                             fields={"phase": "Running", "podName": "tj-train"})
    assert kube.patches == []
    assert await writer.patch_if_changed(namespace="ns", name="tj",
                                         fields={"phase": "Failed", "podName": "tj-train"})
    assert kube.patches == [{"phase": "Failed"}]
    assert writer.fields(namespace="ns", name="tj") == {"phase": "Failed", "podName": "tj-train"}

    condition = ("DiskFull", True, "LogStoreFull", "full")
    assert await writer.patch_if_changed(namespace="ns", name="tj", conditions=[condition])
    assert not await writer.patch_if_changed(namespace="ns", name="tj", conditions=[condition])
    assert await writer.patch_if_changed(namespace="ns", name="tj",
                                         conditions=[("DiskFull", False, "LogStoreWritable", "ok")])
    assert [p["conditions"][0]["status"] for p in kube.patches[1:]] == ["True", "False"]
    assert writer.condition(namespace="ns", name="tj", type_="DiskFull") is not None
    assert writer.condition(namespace="ns", name="tj", type_="Other") is None


async def test_a_plain_patch_updates_what_the_status_holds() -> None:
    """The early warning and the reporter write with `patch`: a later `patch_if_changed` knows it."""
    writer, kube = _writer()
    await writer.patch(namespace="ns", name="tj", fields={"memory": {"epoch": 3, "podPeakBytes": 5}})
    await writer.patch(namespace="ns", name="tj", fields={"memory": {"podPeakBytes": 7}})
    assert writer.fields(namespace="ns", name="tj") == {"memory": {"epoch": 3, "podPeakBytes": 7}}
    assert not await writer.patch_if_changed(namespace="ns", name="tj",
                                             fields={"memory": {"epoch": 3, "podPeakBytes": 7}})
    assert len(kube.patches) == 2


async def test_a_trainingjob_gone_leaves_nothing_held() -> None:
    writer, kube = _writer()
    writer.seed(namespace="ns", name="tj", status={"phase": "Running", "conditions": [{"type": "X"}]})
    kube.gone = True
    assert await writer.patch(namespace="ns", name="tj", fields={"phase": "Failed"}) is None
    assert (writer._fields, writer._conditions, writer._locks) == ({}, {}, {})
