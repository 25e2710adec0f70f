"""Removing any one rule from the chart's operator roles breaks the path, as the real RBAC authorizer
decides: each rule is needed, and this test names which step needs it and what says so.

For each rule of each Role or ClusterRole the chart binds to the operator's ServiceAccount, the chart
is rendered with the real helm, that one rule is dropped, the RBAC objects are applied (one release
for the module: its roles are changed in place, every other rule restored, and a SubjectAccessReview
for each rule confirms the authorizer decides by them before the operator starts), and the operator
runs from the rendered Deployment with a real token. The path then must break at the step `EXPECTED`
names, with the evidence it names: its readiness (/readyz answers 503 with the API server's 403), the
TrainingJob's pod, the log read back through ``GET /logs`` (TokenReview and SubjectAccessReview), the
report, its Event, or the lookup of the node agent. A step ends as soon as its failure is observable
(the 403 in /readyz or in the operator's log), not at its timeout: the 15 cases take about 1.5 minutes.
With every rule kept the same path succeeds (the first case), so a case that breaks is broken by its
missing rule.

The values are the chart's defaults with ``watchNamespaces`` set to the jobs' namespace: the
operator's ClusterRole is then bound by a RoleBinding there only, so the release namespace's own Role
(the Lease, finding the agent) is the only grant in that namespace, and every rule is on its own.
With the defaults (a ClusterRoleBinding), that Role's ``list pods`` is also granted by the ClusterRole.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from tests.chart import _render
from tests.cli import entrypoints as ep
from tests.controlplane import _release as rel
from tests.controlplane.cluster import ControlPlane

#: Stand-ins for the foreign kinds' CRDs that a cluster with Kubeflow and JobSet has (batch/jobs is
#: built in): the operator then lists and watches them, so their rules are on the readiness path.
STAND_IN_CRDS = (("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
                 ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"))
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
#: Each step's bound: a broken path fails at its first step, after this long at most.
STEP_TIMEOUT = 60


@dataclass(frozen=True)
class RuleRef:
    """One rule of one role: the role's kind, its name's suffix after the release's full name, an index."""

    kind: str
    suffix: str
    index: int
    rule: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def id(self) -> str:
        rule = dict(self.rule)
        groups = ",".join(g or "core" for g in rule.get("apiGroups", ()))
        names = f"[{','.join(rule['resourceNames'])}]" if rule.get("resourceNames") else ""
        return (f"{self.kind}/{self.suffix}#{self.index}:{groups}/{','.join(rule.get('resources', ()))}"
                f"{names}:{','.join(rule.get('verbs', ()))}")


def _values(*, fullname: str, jobs: str) -> dict[str, Any]:
    return {"fullnameOverride": fullname, "watchNamespaces": [jobs],
            # The report's kernel-record wait: the agent's lookup is part of the path, not its wait.
            "operator": {"agentRecordWaitSeconds": 1}}


def component_rules(component: str) -> list[RuleRef]:
    """The rules of a component's roles (``operator``, ``agent``) as the chart renders them (collected
    without a cluster)."""
    with helm.Chart.load(_render.CHART_DIR) as chart:
        rendered = _render.render(chart, _values(fullname="pm", jobs="jobs"), namespace="rel")
    out = []
    for role in rendered.objects:
        if role["kind"] not in ("ClusterRole", "Role"):
            continue
        if role["metadata"]["labels"].get("app.kubernetes.io/component") != component:
            continue
        suffix = role["metadata"]["name"].removeprefix("pm-")
        for index, rule in enumerate(role.get("rules") or []):
            out.append(RuleRef(role["kind"], suffix, index,
                               tuple(sorted((k, tuple(v)) for k, v in rule.items()))))
    return out


RULES = component_rules("operator")


def _without(rendered: list[dict[str, Any]], fullname: str, dropped: RuleRef | None) -> list[dict[str, Any]]:
    objects = copy.deepcopy(rendered)
    if dropped is None:
        return objects
    for obj in objects:
        if obj["kind"] == dropped.kind and obj["metadata"]["name"] == f"{fullname}-{dropped.suffix}":
            rule = obj["rules"].pop(dropped.index)
            # Collected for the full name "pm": a resourceName carries the full name.
            seen = {k: [n.replace(f"{fullname}-", "pm-", 1) for n in v] if k == "resourceNames" else v
                    for k, v in rule.items()}
            assert tuple(sorted((k, tuple(v)) for k, v in seen.items())) == dropped.rule, rule
            return objects
    raise AssertionError(f"{dropped.id}: no such rule in this rendering")


@pytest.fixture(scope="module")
def stand_in_crds(control_plane: ControlPlane) -> None:
    """The chart's CRD (as ``helm install`` would have put it) and the foreign kinds' stand-ins."""
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(_render.CRD_FILE))
    control_plane.kubectl("wait", "--for=condition=Established", "crd/trainingjobs.podmortem.io",
                          "--timeout=60s")
    for group, version, plural, kind in STAND_IN_CRDS:
        control_plane.apply({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
        control_plane.kubectl("wait", "--for=condition=Established", f"crd/{plural}.{group}", "--timeout=60s")


@dataclass(frozen=True)
class Release:
    """What the cases share: the release's namespace and full name (its cluster-scoped roles are
    applied once and changed in place per case), the foreign kinds' CRDs."""

    namespace: str
    fullname: str


@pytest.fixture(scope="module")
def release(control_plane: ControlPlane, stand_in_crds: None) -> Iterator[Release]:
    shared = Release(namespace=f"rbac-rel-{uuid.uuid4().hex[:6]}", fullname=f"pm-{uuid.uuid4().hex[:6]}")
    control_plane.create_namespace(shared.namespace)
    yield shared
    for kind in ("clusterrolebinding", "clusterrole"):
        names = control_plane.kubectl("get", kind, "-o", "name").split()
        doomed = [n for n in names if n.split("/", 1)[1].startswith(shared.fullname + "-")]
        if doomed:
            control_plane.run("kubectl", "delete", *doomed, "--wait=false", check=False)
    control_plane.run("kubectl", "delete", "namespace", shared.namespace, "--wait=false", check=False)


@pytest.fixture
def jobs_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """Each case's own jobs: no pod, TrainingJob or Event of another case is in the namespace it watches."""
    name = f"jobs-{uuid.uuid4().hex[:6]}"
    control_plane.create_namespace(name)
    yield name
    control_plane.run("kubectl", "delete", "namespace", name, "--wait=false", check=False)


#: The path's steps in order; a broken run is broken at the first one not in ``PathRun.reached``.
STEPS = ("ready", "pod", "log", "report", "event", "agent-lookup")
#: Where each rule's absence breaks the path and what the evidence then says (lower case): the
#: operator's /readyz answer or its log line with the API server's 403, or the report's error.
EXPECTED: dict[str, tuple[str, str]] = {
    "ClusterRole/operator#0": ("ready", "may not list pods in namespace"),
    "ClusterRole/operator#1": ("log", "pods/log"),
    "ClusterRole/operator#2": ("event", "events"),
    "ClusterRole/operator#3": ("ready", "may not list trainingjobs.podmortem.io"),
    "ClusterRole/operator#4": ("report", "trainingjobs/status"),
    "ClusterRole/operator#5": ("ready", "may not list jobs.batch"),
    "ClusterRole/operator#6": ("ready", "may not list pytorchjobs.kubeflow.org"),
    "ClusterRole/operator#7": ("ready", "may not list jobsets.jobset.x-k8s.io"),
    "ClusterRole/operator-auth#0": ("log", "tokenreview"),
    "ClusterRole/operator-auth#1": ("log", "subjectaccessreview"),
    "Role/operator-self#0": ("pod", "lease"),
    "Role/operator-self#1": ("pod", "lease"),
    "Role/operator-self#2": ("agent-lookup", "could not look up the agent pod"),
}
#: A 403 in the operator's log ends the current step once it has stood this long with the step not
#: done: long enough for a step that a 403 elsewhere does not stop (the report is written without
#: the agent's record) to complete first.
FORBIDDEN_STANDS_S = 3.0


def _key(rule: RuleRef) -> str:
    return f"{rule.kind}/{rule.suffix}#{rule.index}"


def test_every_rule_has_an_expected_break() -> None:
    """A rule added to the chart needs its case here (where the path breaks without it)."""
    assert sorted(_key(r) for r in RULES) == sorted(EXPECTED)


def _forbidden(operator: rel.Operator) -> rel.FailFast:
    """The evidence that a step cannot happen: /readyz answering 503 with the API server's 403, or a
    403 in the operator's log that has stood `FORBIDDEN_STANDS_S` with the step still not done."""
    first_seen: dict[str, float] = {}

    def check() -> str | None:
        status, body = ep.http_get(operator.pod.ready_url)
        if status == 503 and "(403)" in body:
            return f"/readyz {status}: {body.strip()}"
        for line in operator.process.output().splitlines():
            low = line.lower()
            if " 403" in low or "forbidden" in low:
                seen = first_seen.setdefault(line, time.monotonic())
                if time.monotonic() - seen >= FORBIDDEN_STANDS_S:
                    return f"the operator logged: {line[:400]}"
                break
        return None
    return check


def _access_review(cp: ControlPlane, *, user: str, rule: RuleRef, fullname: str, namespace: str, jobs: str
                   ) -> bool:
    """Whether the real authorizer allows ``user`` the rule's first verb on its first resource, where
    the chart binds it (a SubjectAccessReview as the admin)."""
    fields = dict(rule.rule)
    resource, _, sub = fields["resources"][0].partition("/")
    attributes: dict[str, str] = {"verb": fields["verbs"][0], "group": fields["apiGroups"][0],
                                  "resource": resource, "subresource": sub}
    if rule.kind == "Role":
        attributes["namespace"] = namespace
    elif rule.suffix in ("operator", "agent"):  # bound by a RoleBinding in the watched namespace only
        attributes["namespace"] = jobs
    if fields.get("resourceNames"):
        attributes["name"] = fields["resourceNames"][0].replace("pm-", f"{fullname}-", 1)
    code, answer = cp.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated"],
                 "resourceAttributes": attributes}})
    assert code == 201, (code, answer)
    return bool(answer["status"].get("allowed"))


def _rbac_in_force(cp: ControlPlane, *, account: str, shared: Release, jobs: str, dropped: RuleRef | None,
                   rules: list[RuleRef] = RULES) -> None:
    """Wait until the authorizer decides by what was just applied: the dropped rule denied, every other
    rule allowed (the previous case's dropped rule is back)."""
    user = f"system:serviceaccount:{shared.namespace}:{account}"

    def settled() -> bool | None:
        for rule in rules:
            allowed = _access_review(cp, user=user, rule=rule, fullname=shared.fullname,
                                     namespace=shared.namespace, jobs=jobs)
            if allowed == (rule == dropped):
                return None
        return True
    rel.wait(settled, what="the RBAC objects in force", timeout=30, step=0.2)


def _run(cp: ControlPlane, *, shared: Release, jobs: str, tmp: Path, dropped: RuleRef | None
         ) -> tuple[rel.PathRun, str | None]:
    for attempt in range(3):
        try:
            return _run_once(cp, shared=shared, jobs=jobs, tmp=tmp / f"try{attempt}", dropped=dropped)
        except rel.PortTaken:
            continue
    raise AssertionError("the operator's ports were taken three times in a row")


def _run_once(cp: ControlPlane, *, shared: Release, jobs: str, tmp: Path, dropped: RuleRef | None
              ) -> tuple[rel.PathRun, str | None]:
    """The path under the release's RBAC less ``dropped``: what it reached, and why it broke (None:
    it did not)."""
    rendered = rel.template(cp, release="podmortem", namespace=shared.namespace,
                            values={**rel.port_values(), "fullnameOverride": shared.fullname,
                                    "watchNamespaces": [jobs], "operator.agentRecordWaitSeconds": 1})
    rbac = _without([o for o in rendered.objects if o["kind"] in RBAC_KINDS], shared.fullname, dropped)
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    account = rendered.one("Deployment", "operator")["spec"]["template"]["spec"]["serviceAccountName"]
    _rbac_in_force(cp, account=account, shared=shared, jobs=jobs, dropped=dropped)
    # As if deleted by hand (or never made): each case's operator makes its Lease, so `create` is on
    # the path too.
    cp.run("kubectl", "delete", "lease", f"{shared.fullname}-operator", "-n", shared.namespace,
           "--ignore-not-found", check=False)
    reader = rel.log_reader(cp, jobs)
    run = rel.PathRun()
    operator = rel.start_operator(cp, rendered, tmp=tmp / "op", volumes=tmp / "op-pod")
    fail_fast = _forbidden(operator)
    try:
        rel.ready(operator, timeout=STEP_TIMEOUT, fail_fast=fail_fast)
        run.reached.append("ready")
        rel.run_path(cp, operator, namespace=jobs, name="rbac", reader=reader, timeout=STEP_TIMEOUT, run=run,
                     fail_fast=fail_fast)
        errors = " ".join(run.report.get("evidence", {}).get("errors") or [])
        kernel = str(run.report.get("evidence", {}).get("kernelRecord") or {})
        if "could not look up the agent pod" in errors + kernel:
            raise rel.PathBroken(f"finding the node agent: {errors} {kernel}")
        run.reached.append("agent-lookup")
    except rel.PathBroken as exc:
        return run, str(exc)
    finally:
        operator.stop()
    return run, None


def test_with_every_rule_the_path_succeeds(control_plane: ControlPlane, release: Release,
                                           jobs_namespace: str, tmp_path: Path) -> None:
    run, broken = _run(control_plane, shared=release, jobs=jobs_namespace, tmp=tmp_path, dropped=None)
    assert broken is None, broken
    assert run.reached == list(STEPS)


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_without_this_rule_the_path_breaks(control_plane: ControlPlane, release: Release,
                                           jobs_namespace: str, tmp_path: Path, rule: RuleRef) -> None:
    run, broken = _run(control_plane, shared=release, jobs=jobs_namespace, tmp=tmp_path, dropped=rule)
    assert broken is not None, f"{rule.id}: the path did not break: {run.reached}"
    step = STEPS[len(run.reached)]
    assert run.reached == list(STEPS[:len(run.reached)]), run.reached
    print(f"{rule.id}: broken at {step}: {broken.splitlines()[0][:400]}")
    expected_step, evidence = EXPECTED[_key(rule)]
    assert step == expected_step, f"{rule.id}: broken at {step}, expected at {expected_step}: {broken[:3000]}"
    assert evidence in broken.splitlines()[0].lower(), f"{rule.id}: {broken[:3000]}"

