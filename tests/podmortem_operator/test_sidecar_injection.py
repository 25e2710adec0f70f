"""Adding the sidecar to a pod (``sidecar_injection.plan``) and to a TrainingJob's pod (``jobs.build_pod``).

The patch and the changed spec are one decision: applying the patch to the pod gives the spec.
The sidecar is a native sidecar with exactly what docs/sidecar.md asks (the trainer's user, no
capability, the termination log), the pod passes Pod Security "restricted", a pod is never
patched twice, and a pod that opts out, runs as root or is not a pod spec at all is left as it is.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.chart import _json_patch, _pod_security

from podmortem.operator import jobs, sidecar_injection
from podmortem.operator.settings import SidecarInjectionSettings

IMAGE = "registry.example.com/podmortem:0.1.0"
OPT_OUT = sidecar_injection.OPT_OUT_KEY
SETTINGS = SidecarInjectionSettings(image=IMAGE, comm="python.*|torchrun")


def restricted_pod(**spec: Any) -> dict[str, Any]:
    """A training pod as a team under Pod Security "restricted" writes it."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ddp-worker-0", "namespace": "team-a", "labels": {"podmortem.io/watch": "true"}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "trainer", "image": "pointgroup:1", "command": ["torchrun", "train.py"],
                "resources": {"limits": {"memory": "32Gi"}},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }],
            **spec,
        },
    }


def patched(pod: dict[str, Any]) -> tuple[dict[str, Any], sidecar_injection.Injection]:
    plan = sidecar_injection.plan(pod, SETTINGS)
    assert plan.changed, plan.skipped
    return _json_patch.apply_checked(pod, list(plan.patch)), plan


def test_the_patch_adds_a_native_sidecar_as_the_trainers_user() -> None:
    pod = restricted_pod()
    out, plan = patched(pod)
    assert out["spec"] == plan.spec
    assert out["spec"]["shareProcessNamespace"] is True
    (sidecar,) = out["spec"]["initContainers"]
    assert sidecar == {
        "name": "podmortem-sidecar",
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["podmortem", "sidecar", "--comm", "python.*|torchrun"],
        "restartPolicy": "Always",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": {
            "runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True,
            "allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    # Nothing else about the pod changes.
    assert {k: v for k, v in out["spec"].items() if k not in ("shareProcessNamespace", "initContainers")} == (
        pod["spec"])
    assert out["metadata"] == pod["metadata"]
    assert _pod_security.restricted(out["spec"]) == []


def test_the_pod_is_never_patched_twice() -> None:
    once, _ = patched(restricted_pod())
    again = sidecar_injection.plan(once, SETTINGS)
    assert not again.changed and again.patch == ()
    assert again.skipped == "the pod already has the podmortem sidecar"
    assert again.spec == once["spec"]


def test_a_sidecar_a_person_wrote_themselves_counts() -> None:
    """docs/sidecar.md's own example names the container "podmortem": it is recognised by its command."""
    pod = restricted_pod(initContainers=[{"name": "podmortem", "image": IMAGE, "restartPolicy": "Always",
                                          "command": ["/usr/local/bin/podmortem", "sidecar", "--comm", "x"]}])
    assert sidecar_injection.plan(pod, SETTINGS).skipped == "the pod already has the podmortem sidecar"
    pod = restricted_pod(initContainers=[{"name": "evidence", "image": "ghcr.io/podmortem/podmortem:0.1.0",
                                          "args": ["sidecar"]}])
    assert not sidecar_injection.plan(pod, SETTINGS).changed


def test_after_the_pods_own_init_containers() -> None:
    fetch = {"name": "fetch-data", "image": "busybox", "command": ["true"]}
    out, plan = patched(restricted_pod(initContainers=[fetch], shareProcessNamespace=True))
    assert [op["path"] for op in plan.patch] == ["/spec/initContainers/-"]
    assert [c["name"] for c in out["spec"]["initContainers"]] == ["fetch-data", "podmortem-sidecar"]


def test_a_null_init_container_list_is_replaced() -> None:
    out, plan = patched(restricted_pod(initContainers=None))
    assert plan.patch[1]["path"] == "/spec/initContainers"
    assert [c["name"] for c in out["spec"]["initContainers"]] == ["podmortem-sidecar"]


def test_the_container_s_own_user_wins_and_the_default_container_is_the_trainer() -> None:
    pod = restricted_pod()
    pod["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": "trainer"}
    pod["spec"]["containers"].insert(0, {"name": "proxy", "image": "envoy",
                                         "securityContext": {"runAsUser": 1337}})
    pod["spec"]["containers"][1]["securityContext"].update(runAsUser=2000, runAsGroup=3000)
    out, _ = patched(pod)
    ctx = out["spec"]["initContainers"][0]["securityContext"]
    assert (ctx["runAsUser"], ctx["runAsGroup"]) == (2000, 3000)


def test_no_group_in_the_spec_leaves_the_group_unsaid() -> None:
    pod = restricted_pod()
    del pod["spec"]["securityContext"]["runAsGroup"]
    out, _ = patched(pod)
    assert "runAsGroup" not in out["spec"]["initContainers"][0]["securityContext"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda p: p["metadata"]["labels"].update({OPT_OUT: "false"}), OPT_OUT),
        (lambda p: p["metadata"].update(annotations={OPT_OUT: "False"}), OPT_OUT),
        (lambda p: p["spec"].update(shareProcessNamespace=False), "shareProcessNamespace: false"),
        (lambda p: p["spec"]["securityContext"].update(runAsUser=0), "runs as root"),
        (lambda p: p["spec"]["securityContext"].pop("runAsUser"), "runAsUser is not set"),
        (lambda p: p["spec"]["securityContext"].update(runAsUser="1000"), "runAsUser is not set"),
        (lambda p: p["spec"]["securityContext"].update(runAsUser=True), "runAsUser is not set"),
        (lambda p: p["spec"].update(hostPID=True), "hostPID"),
        (lambda p: p["spec"].update(os={"name": "windows"}), "Windows"),
        (lambda p: p["spec"].update(containers=[]), "no containers"),
        (lambda p: p["spec"].update(containers="trainer"), "no containers"),
        (lambda p: p["spec"].update(initContainers={"name": "x"}), "initContainers"),
        (lambda p: p["spec"].update(initContainers=["x"]), "initContainers"),
        (lambda p: p.update(spec=None), "no spec"),
    ],
    ids=["label", "annotation", "no-shared-pids", "root", "no-user", "text-user", "bool-user", "host-pid",
         "windows", "no-containers", "containers-text", "init-map", "init-text", "no-spec"],
)
def test_pods_left_as_they_are(change: Any, reason: str) -> None:
    pod = restricted_pod()
    change(pod)
    before = copy.deepcopy(pod)
    plan = sidecar_injection.plan(pod, SETTINGS)
    assert not plan.changed and plan.patch == ()
    assert plan.skipped is not None and reason in plan.skipped
    assert pod == before  # the input is never changed


def test_no_image_no_sidecar() -> None:
    plan = sidecar_injection.plan(restricted_pod(), SidecarInjectionSettings())
    assert not plan.changed and "image" in (plan.skipped or "")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["spec", "metadata", "containers", "initContainers", "securityContext", "runAsUser",
                         "labels", "name", "command", "args", "image", "shareProcessNamespace"]),
        inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_gives_a_decision_never_an_exception(pod: Any) -> None:
    """The webhook's pods are untrusted: whatever JSON arrives, a plan comes back, and its patch applies."""
    plan = sidecar_injection.plan(pod, SETTINGS)
    if plan.changed:
        _json_patch.apply(pod, list(plan.patch))
    json.dumps(list(plan.patch))


# -- TrainingJobs -------------------------------------------------------------------------------


def trainingjob(**spec: Any) -> dict[str, Any]:
    template = restricted_pod()
    return {"apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "pointgroup", "namespace": "team-a", "uid": "u-1"},
            "spec": {"template": {"metadata": {"labels": {"team": "a"}}, "spec": template["spec"]}, **spec}}


def names(pod: dict[str, Any]) -> list[str]:
    return [c["name"] for c in pod["spec"].get("initContainers", [])]


def test_the_charts_setting_adds_it_to_every_trainingjob_pod() -> None:
    on = SidecarInjectionSettings(image=IMAGE, trainingjobs=True)
    pod = jobs.build_pod(trainingjob(), sidecar=on)
    assert names(pod) == ["podmortem-sidecar"] and pod["spec"]["shareProcessNamespace"] is True
    assert pod["spec"]["restartPolicy"] == "Never"
    assert _pod_security.restricted(pod["spec"]) == []


def test_the_trainingjob_asks_for_it_or_keeps_it_out() -> None:
    off = SidecarInjectionSettings(image=IMAGE, trainingjobs=False)
    on = SidecarInjectionSettings(image=IMAGE, trainingjobs=True)
    assert names(jobs.build_pod(trainingjob(sidecar=True), sidecar=off)) == ["podmortem-sidecar"]
    assert names(jobs.build_pod(trainingjob(), sidecar=off)) == []
    kept_out = jobs.build_pod(trainingjob(sidecar=False), sidecar=on)
    assert names(kept_out) == [] and "shareProcessNamespace" not in kept_out["spec"]
    # ... and says so on the pod, so the admission webhook leaves it alone as well.
    assert kept_out["metadata"]["annotations"] == {"podmortem.io/sidecar": "false"}
    assert sidecar_injection.plan(kept_out, on).skipped == 'the pod says podmortem.io/sidecar: "false"'


def test_without_settings_build_pod_is_as_before() -> None:
    tj = trainingjob(sidecar=True)
    assert names(jobs.build_pod(tj)) == []  # no image known: nothing to add
    assert jobs.build_pod(trainingjob())["spec"] == trainingjob()["spec"]["template"]["spec"] | {
        "restartPolicy": "Never"}
