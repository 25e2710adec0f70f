"""Removing any one rule from the chart's agent ClusterRole breaks what the node agent does, as the real
RBAC authorizer decides; with every rule the agent finds each kind of training pod on its node.

``podmortem agent`` runs as the rendered DaemonSet's container (tests.chart._pods) with a real token
for its ServiceAccount, on a kwok node's name (its pods are the test's, bound to that node; the agent
samples this machine's cgroups, where they have none, which is not what is checked). Its path: ready
(it lists its node's pods), then the evidence endpoint knows a pod owned by a TrainingJob, and pods
owned by an annotated Job, PyTorchJob and JobSet (each owner read by name: ``get`` on its kind). As in
test_rbac_minimal, the release is shared by the cases, the ClusterRole changed in place and confirmed
by SubjectAccessReviews, and a step ends as soon as the 403 that breaks it is observable. Each missing
rule shows in the agent's /readyz (503, naming the refused list or owner read), since the agent is
ready only when it knows its node's pods, owners included; the 6 cases take about 25 s.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.chart import _pods
from tests.cli import entrypoints as ep
from tests.controlplane import _release as rel
from tests.controlplane import test_rbac_minimal as rbac
from tests.controlplane.cluster import ControlPlane

# The RBAC cases' module-scoped helpers (fixtures are found by their name in the module).
stand_in_crds = rbac.stand_in_crds
release = rbac.release
jobs_namespace = rbac.jobs_namespace

RULES = rbac.component_rules("agent")
#: The pods the agent must know, each by what makes it a training pod: (step, owner kind, its API).
OWNERS = (("trainingjob-pod", "TrainingJob", "podmortem.io/v1alpha1", "trainingjobs"),
          ("job-pod", "Job", "batch/v1", "jobs"),
          ("pytorchjob-pod", "PyTorchJob", "kubeflow.org/v1", "pytorchjobs"),
          ("jobset-pod", "JobSet", "jobset.x-k8s.io/v1alpha2", "jobsets"))
STEPS = ("ready", *(o[0] for o in OWNERS))
#: Each rule's absence shows in the agent's /readyz: it is ready when it knows its node's pods, which
#: includes reading each pod's owner.
EXPECTED = {
    "ClusterRole/agent#0": ("ready", "listing pods on"),
    "ClusterRole/agent#1": ("ready", "reading jobs.batch"),
    "ClusterRole/agent#2": ("ready", "reading pytorchjobs.kubeflow.org"),
    "ClusterRole/agent#3": ("ready", "reading jobsets.jobset.x-k8s.io"),
}
STEP_TIMEOUT = 30


def test_every_agent_rule_has_an_expected_break() -> None:
    assert sorted(rbac._key(r) for r in RULES) == sorted(EXPECTED)


def _owner(kind: str, api_version: str, name: str, namespace: str, node: str) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": api_version, "kind": kind,
                            "metadata": {"name": name, "namespace": namespace}}
    if kind == "TrainingJob":
        body["spec"] = {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}}
        return body
    body["metadata"]["annotations"] = {"podmortem.io/watch": "true"}
    if kind == "Job":  # a real Job: the job controller makes its pod, the scheduler puts it on ``node``
        body["spec"] = {"template": {"spec": {
            "restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}], "containers": [{"name": "trainer", "image": "x"}]}}}
    else:
        body["spec"] = {}
    return body


def _training_pods(cp: ControlPlane, *, namespace: str, node: str) -> dict[str, str]:
    """One pod per owner kind on ``node``, owned by an object of that kind: step -> the pod's uid. The
    Job's pod is the job controller's; the stand-in kinds have no controller, so the test makes theirs."""
    uids: dict[str, str] = {}
    for step, kind, api_version, plural in OWNERS:
        name = step.removesuffix("-pod")
        cp.apply(_owner(kind, api_version, name, namespace, node))
        owner = cp.get(f"/apis/{api_version}/namespaces/{namespace}/{plural}/{name}")
        assert owner is not None
        if kind == "Job":
            def made(uid: str = owner["metadata"]["uid"]) -> str | None:
                pods = (cp.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector="
                               f"batch.kubernetes.io/controller-uid%3D{uid}") or {}).get("items") or []
                on_node = [p for p in pods if p["spec"].get("nodeName") == node]
                return str(on_node[0]["metadata"]["uid"]) if on_node else None
            uids[step] = rel.wait(made, what="the job controller's pod on the node", timeout=60)
            continue
        cp.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": step, "namespace": namespace, "ownerReferences": [
                {"apiVersion": api_version, "kind": kind, "name": name, "uid": owner["metadata"]["uid"],
                 "controller": True}]},
            "spec": {"nodeName": node, "containers": [{"name": "trainer", "image": "x"}]}})
        pod = cp.get(f"/api/v1/namespaces/{namespace}/pods/{step}")
        assert pod is not None
        uids[step] = pod["metadata"]["uid"]
    return uids


def _forbidden(ready_url: str, process: ep.Process) -> rel.FailFast:
    first_seen: dict[str, float] = {}

    def check() -> str | None:
        status, body = ep.http_get(ready_url)
        if status == 503 and "403" in body:
            return f"/readyz {status}: {body.strip()}"
        for line in process.output().splitlines():
            low = line.lower()
            if " 403" in low or "forbidden" in low:
                seen = first_seen.setdefault(line, time.monotonic())
                if time.monotonic() - seen >= rbac.FORBIDDEN_STANDS_S:
                    return f"the agent logged: {line[:400]}"
                break
        return None
    return check


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane) -> str:
    nodes = (control_plane.get("/api/v1/nodes") or {}).get("items") or []
    return str(nodes[0]["metadata"]["name"])


def _run(cp: ControlPlane, *, shared: rbac.Release, jobs: str, node: str, tmp: Path,
         dropped: rbac.RuleRef | None) -> tuple[list[str], str | None]:
    """What the agent reached under the release's RBAC less ``dropped``, and why it broke (None: it
    did not)."""
    rendered = rel.template(cp, release="podmortem", namespace=shared.namespace, values={
        "fullnameOverride": shared.fullname, "watchNamespaces": [jobs],
        "agent.http.port": ep.free_port(), "agent.metrics.port": ep.free_port(),
        "agent.sampling.intervalSeconds": 1})
    objects = rbac._without([o for o in rendered.objects if o["kind"] in rbac.RBAC_KINDS], shared.fullname,
                            dropped)
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    daemonset = rendered.one("DaemonSet", "agent")
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    rbac._rbac_in_force(cp, account=account, shared=shared, jobs=jobs, dropped=dropped, rules=RULES)
    uids = _training_pods(cp, namespace=jobs, node=node)
    sa = cp.mounted_service_account(tmp / "serviceaccount", namespace=shared.namespace, name=account)
    (tmp / "home").mkdir()
    base = ep.clean_env(tmp / "home", **ep.in_cluster_env(cp.url, sa))
    pod = _pods.materialize(rendered, daemonset, podmortem=ep.PODMORTEM, tmp=tmp / "pod", base_env=base)
    pod.env["PODMORTEM_NODE_NAME"] = node  # a kwok node's, where the test's pods are
    token_file = pod.env.get("PODMORTEM_AGENT_TOKEN_FILE")
    headers = {"Authorization": f"Bearer {Path(token_file).read_text().strip()}"} if token_file else {}
    process = ep.Process(pod.argv, pod.env, tmp / "agent.log").start()
    fail_fast = _forbidden(pod.ready_url, process)
    reached: list[str] = []
    base_url = f"http://127.0.0.1:{pod.env['PODMORTEM_HTTP_PORT']}"

    def known(uid: str) -> bool | None:
        status, _ = rel.get_logs(f"{base_url}/v1/pods/{uid}/evidence", token=headers.get(
            "Authorization", "").removeprefix("Bearer "))
        return True if status == 200 else None

    try:
        rel.wait(lambda: True if ep.http_get(pod.ready_url)[0] == 200 else None,
                 what="the agent's /readyz 200", timeout=STEP_TIMEOUT, watch=process, fail_fast=fail_fast)
        reached.append("ready")
        for step, kind, _, _ in OWNERS:
            rel.wait(lambda uid=uids[step]: known(uid), what=f"the agent knowing the pod owned by a {kind}",
                     timeout=STEP_TIMEOUT, watch=process, fail_fast=fail_fast)
            reached.append(step)
    except rel.PathBroken as exc:
        return reached, str(exc)
    finally:
        process.stop()
    return reached, None


def test_with_every_agent_rule_the_agent_knows_each_training_pod(
        control_plane: ControlPlane, release: rbac.Release, jobs_namespace: str, node: str,
        tmp_path: Path) -> None:
    reached, broken = _run(control_plane, shared=release, jobs=jobs_namespace, node=node, tmp=tmp_path,
                           dropped=None)
    assert broken is None, broken
    assert reached == list(STEPS)


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_without_this_agent_rule_its_step_breaks(control_plane: ControlPlane, release: rbac.Release,
                                                jobs_namespace: str, node: str, tmp_path: Path,
                                                rule: rbac.RuleRef) -> None:
    reached, broken = _run(control_plane, shared=release, jobs=jobs_namespace, node=node, tmp=tmp_path,
                           dropped=rule)
    assert broken is not None, f"{rule.id}: nothing broke: {reached}"
    step = STEPS[len(reached)]
    print(f"{rule.id}: broken at {step}: {broken.splitlines()[0][:400]}")
    expected_step, evidence = EXPECTED[rbac._key(rule)]
    assert step == expected_step, f"{rule.id}: broken at {step}, expected at {expected_step}: {broken[:3000]}"
    assert evidence in broken.splitlines()[0].lower(), f"{rule.id}: {broken[:3000]}"
