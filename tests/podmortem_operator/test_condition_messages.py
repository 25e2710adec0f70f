"""A condition message never outgrows the CRD's limit, however long the value it quotes.

A TrainingJob with a 40,000-character container name in ``spec.containers`` made an
OptionsValid message of 80,092 characters, which the apiserver refuses (and the whole
status patch with it). Every condition goes through ``status.set_condition``, which
cuts the message to ``MESSAGE_MAX_CHARS`` with a marker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from podmortem.operator import status, watch_options
from podmortem.operator.status import MESSAGE_MAX_CHARS, StatusWriter, capped_message

CRD_FILE = Path(__file__).resolve().parents[2] / "charts" / "podmortem" / "crds" / "trainingjob.yaml"


class RecordingKube:
    """Takes the status patches a StatusWriter sends."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((path, patch))
        return patch


async def test_a_huge_container_name_gives_a_message_within_the_crd_limit() -> None:
    name = "x" * 40_000
    _, problems = watch_options.from_spec({"containers": [name]}, defaults=watch_options.WatchOptions())
    message = "; ".join(p.message() for p in problems)
    # The value is quoted in part, but the reason still names the 40,000-character container.
    assert len(message) > MESSAGE_MAX_CHARS

    kube = RecordingKube()
    writer = StatusWriter(kube=kube)  # type: ignore[arg-type]
    await writer.patch(namespace="ns", name="tj",
                       conditions=[("OptionsValid", False, "InvalidOption", message)])

    (_, patch), = kube.patches
    (condition,) = patch["status"]["conditions"]
    written = condition["message"]
    assert len(written) <= MESSAGE_MAX_CHARS
    assert written.startswith(message[:1000])
    cut = len(message) - written.index(" ... [")
    assert written.endswith(f" ... [{cut} characters cut]")
    assert writer.conditions(namespace="ns", name="tj") == [condition]


@pytest.mark.parametrize("length", [0, 1, MESSAGE_MAX_CHARS - 1, MESSAGE_MAX_CHARS])
def test_messages_within_the_limit_are_kept_whole(length: int) -> None:
    message = "m" * length
    assert capped_message(message) == message


@pytest.mark.parametrize("length", [MESSAGE_MAX_CHARS + 1, MESSAGE_MAX_CHARS + 9, 10**6])
def test_longer_messages_are_cut_to_the_limit_and_say_how_much(length: int) -> None:
    message = "é" * length  # the limit counts characters, as the apiserver does, not bytes
    capped = capped_message(message)
    assert len(capped) <= MESSAGE_MAX_CHARS
    kept = capped.index(" ... [")
    assert capped == message[:kept] + f" ... [{length - kept} characters cut]"
    assert kept > MESSAGE_MAX_CHARS - 40


def test_the_limit_is_the_crds() -> None:
    crd = yaml.safe_load(CRD_FILE.read_text())
    (version,) = crd["spec"]["versions"]
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
    assert conditions["items"]["properties"]["message"]["maxLength"] == status.MESSAGE_MAX_CHARS
