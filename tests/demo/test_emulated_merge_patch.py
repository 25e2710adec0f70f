"""A merge patch is applied by the emulated API as kube-apiserver applies it: a null object member is
removed at any depth, in objects inside arrays too, and a null array item stays.

What the real server keeps was measured on kube-apiserver v1.36.3
(``tests.controlplane.test_status_schema.merged``, a TrainingJob's status written by a merge patch);
here the emulation must keep the same. kmock's RFC 7386 merge alone kept ``{"gone": null}`` inside an
array.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.controlplane.test_emulation_matches import MERGE, emulated_cluster
from tests.controlplane.test_status_schema import merged

from podmortem_demo.emulated import merge_patch

TJ = "/apis/podmortem.io/v1alpha1/namespaces/{ns}/trainingjobs"
REPORT: dict[str, Any] = {
    "verdict": "memcg-limit",
    "kill": {"pid": 7, "constraint": None, "host": None},
    "findings": [{"code": "memcg-limit", "evidence": {"constraint_printed": None, "limit_bytes": 1}},
                 None, [None, {"deeper": None, "kept": 0}]],
    "flags": [True, False, None, {"gone": None, "kept": [None]}],
    "pod": None,
}


def test_the_emulated_api_keeps_what_the_real_server_keeps(tmp_path: Path) -> None:
    with emulated_cluster(tmp_path) as cluster:
        ns, _ = cluster.namespaces
        status, _ = cluster.request("POST", TJ.format(ns=ns), {
            "apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "nulls", "namespace": ns},
            "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}}})
        assert status in (200, 201)
        path = f"{TJ.format(ns=ns)}/nulls/status"
        status, answered = cluster.request("PATCH", path, {"status": {"failureReport": REPORT}},
                                           content_type=MERGE)
        assert status == 200, answered
        assert answered["status"]["failureReport"] == merged(REPORT)
        # A second report merged into the first: a null removes a member the first had.
        status, answered = cluster.request("PATCH", path, {"status": {"failureReport": {
            "kill": {"pid": None, "comm": "python"}, "findings": [{"evidence": {"x": None}}]}}},
            content_type=MERGE)
        assert status == 200, answered
        assert answered["status"]["failureReport"] == merge_patch.applied(merged(REPORT), {
            "kill": {"pid": None, "comm": "python"}, "findings": [{"evidence": {"x": None}}]})
        assert answered["status"]["failureReport"]["kill"] == {"comm": "python"}
        assert answered["status"]["failureReport"]["findings"] == [{"evidence": {}}]
        status, read = cluster.request("GET", f"{TJ.format(ns=ns)}/nulls")
        assert read["status"]["failureReport"] == answered["status"]["failureReport"]


def test_applied_is_rfc_7386_plus_the_servers_pruning() -> None:
    assert merge_patch.applied({"a": 1, "b": {"c": 2, "d": 3}}, {"a": None, "b": {"c": None, "e": None}}
                               ) == {"b": {"d": 3}}
    assert merge_patch.applied({"a": [1]}, {"a": [{"x": None}, None]}) == {"a": [{}, None]}
    assert merge_patch.applied({"a": {"b": 1}}, {"a": "text"}) == {"a": "text"}
    assert merge_patch.applied({"a": 1}, {"b": {"c": {"d": None}}}) == {"a": 1, "b": {"c": {}}}
    assert merge_patch.pruned(REPORT) == merged(REPORT)
