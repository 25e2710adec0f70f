"""kopf runs without a diff-base: safe only while every handler is an event or activity handler."""

from __future__ import annotations

from typing import Any, cast

import kopf

from podmortem.kube.owners import ForeignKind
from podmortem.operator.settings import OperatorSettings
from podmortem.operator.watching import handlers
from podmortem.operator.watching.no_diffbase import NoDiffBaseStorage
from podmortem.operator.watching.run import kopf_settings


def test_the_registry_has_no_handler_that_reads_a_diff() -> None:
    settings = OperatorSettings(foreign_kinds=(ForeignKind(group="kubeflow.org", resource="pytorchjobs"),))
    registry = handlers.build(service=cast(Any, None), settings=settings, connection=cast(Any, None))
    # kopf's change handlers (on.create/update/delete/field/resume) and daemons/timers compare the
    # body with the stored diff-base; with NoDiffBaseStorage they would see every event as new.
    assert not registry._changing.get_all_handlers()
    assert not registry._spawning.get_all_handlers()
    assert len(registry._watching.get_all_handlers()) == 2  # jobs, the foreign kind (pods: pod_watch)


def test_kopf_builds_no_diff_base() -> None:
    storage = kopf_settings(OperatorSettings()).persistence.diffbase_storage
    assert isinstance(storage, NoDiffBaseStorage)
    body = kopf.Body({"metadata": {"name": "p", "annotations": {"a": "b"}}, "spec": {"x": [1, 2]}})
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=kopf.BodyEssence({"spec": {}}))
    assert not patch
