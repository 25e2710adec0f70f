"""The chart as shipped, on a real control plane: ``helm install`` as the README says, every object
accepted with strict field validation, the path a user relies on under the chart's own RBAC, an
upgrade that rolls the operator without losing a followed line (the leader's Lease, the chart's,
kept through it), and an uninstall that leaves only what Helm's convention leaves (the CRDs).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.controlplane import _release as rel
from tests.controlplane.cluster import ControlPlane, cri_line

RELEASE = "podmortem"


@pytest.fixture
def jobs_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """Where the training jobs run (the README uses ``default``; a fresh one keeps tests apart)."""
    name = f"jobs-{uuid.uuid4().hex[:6]}"
    control_plane.create_namespace(name)
    yield name
    control_plane.run("kubectl", "delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def release_namespace(control_plane: ControlPlane, namespace: str) -> Iterator[str]:
    """The test's namespace for the release; the release is uninstalled after the test, since its
    ClusterRoles' names would make the next test's ``helm install`` fail (owned by another release)."""
    yield namespace
    control_plane.run("helm", "uninstall", RELEASE, "-n", namespace, "--ignore-not-found", check=False)


def _install(cp: ControlPlane, namespace: str, values: dict[str, object]) -> None:
    """The README's step 2: a namespace that allows the agent's host mounts, then ``helm install``."""
    cp.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=privileged")
    cp.run("helm", "install", RELEASE, str(rel.CHART), "-n", namespace, *rel.IMAGE, *rel.set_args(values))


def test_every_object_passes_strict_server_side_validation(control_plane: ControlPlane,
                                                           namespace: str) -> None:
    """``helm template | kubectl apply --dry-run=server --validate=strict``: an unknown or misplaced
    field anywhere in the chart is an error from the real API server, not a warning."""
    values = rel.port_values()
    rendered = rel.template(control_plane, release="strict", namespace=namespace, values=values,
                            include_crds=True)
    kinds = sorted({o["kind"] for o in rendered.objects})
    assert {"CustomResourceDefinition", "Deployment", "DaemonSet", "ClusterRole", "Role"} <= set(kinds), kinds
    import yaml
    text = yaml.safe_dump_all(list(rendered.objects))
    result = control_plane.run("kubectl", "apply", "--dry-run=server", "--validate=strict", "-n", namespace,
                               "-f", "-", input=text, check=False)
    assert result.returncode == 0, result.stderr
    assert "unknown field" not in result.stderr, result.stderr
    accepted = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(accepted) == len(rendered.objects), result.stdout


def test_install_then_trainingjob_to_report_under_the_charts_rbac(
        control_plane: ControlPlane, release_namespace: str, jobs_namespace: str, tmp_path: Path) -> None:
    cp, namespace = control_plane, release_namespace
    _install(cp, namespace, rel.port_values())
    cp.kubectl("wait", "--for=condition=Established", "crd/trainingjobs.podmortem.io", "--timeout=60s")
    rendered = rel.manifest(cp, release=RELEASE, namespace=namespace)
    # Every object Helm says it installed is there.
    for obj in rendered.objects:
        ns = ["-n", obj["metadata"].get("namespace", namespace)]
        cp.kubectl("get", obj["kind"].lower(), obj["metadata"]["name"], *ns, "-o", "name")
    # The Deployment rolls out as the README's step 2 waits for (kwok makes its pod Ready).
    cp.run("kubectl", "-n", namespace, "rollout", "status", "deployment/podmortem-operator", "--timeout=120s",
           timeout=150)
    reader = rel.log_reader(cp, jobs_namespace)
    operator = rel.start_operator(cp, rendered, tmp=tmp_path / "op", volumes=tmp_path / "op-pod")
    try:
        rel.ready(operator, timeout=120)
        run = rel.run_path(cp, operator, namespace=jobs_namespace, name="pointgroup", reader=reader,
                           timeout=120)
    finally:
        operator.stop()
    assert run.reached == ["pod", "log", "report", "event"]
    report = run.report
    assert report["verdict"] == "memcg-limit", report
    assert report["pod"]["name"] == "pointgroup-train" and report["pod"]["exitCode"] == 137, report["pod"]
    # As the README tells users to read it.
    message = cp.kubectl("get", "trainingjob", "pointgroup", "-n", jobs_namespace,
                         "-o", "jsonpath={.status.failureReport.findings[0].message}")
    assert message and message == report["findings"][0]["message"]


def test_upgrade_rolls_the_operator_without_losing_a_follow(
        control_plane: ControlPlane, release_namespace: str, jobs_namespace: str, tmp_path: Path) -> None:
    """``helm upgrade`` with a changed log level and memory limit: the Deployment's pod template
    changes, so its rollout replaces the operator's pod. Here the old process stops and the new
    rendering's starts in the order the Deployment's strategy gives; every line the pod wrote before,
    during and after the roll is served once, in order, by the new operator."""
    cp, namespace = control_plane, release_namespace
    values = rel.port_values()
    _install(cp, namespace, values)
    reader = rel.log_reader(cp, jobs_namespace)
    before = rel.manifest(cp, release=RELEASE, namespace=namespace)
    old = rel.start_operator(cp, before, tmp=tmp_path / "old", volumes=tmp_path / "old-pod")
    new: rel.Operator | None = None
    name, pod = "rolled", "rolled-train"
    log = cp.pod_log_file(jobs_namespace, pod, rel.CONTAINER)
    written: list[str] = []

    def write(tag: str, count: int) -> None:
        texts = [f"{tag} line {i}" for i in range(count)]
        with log.open("a") as out:
            out.write("".join(cri_line(t) for t in texts))
        written.extend(texts)

    try:
        rel.ready(old, timeout=120)
        cp.serve_logs(jobs_namespace, pod, [rel.CONTAINER])
        write("before", 5)
        cp.apply(rel.trainingjob(name, jobs_namespace))
        rel.pod_running(cp, namespace=jobs_namespace, pod=pod, timeout=120, operator=old)
        rel.lines_stored(old, namespace=jobs_namespace, pod=pod, token=reader, expected=written, timeout=120)

        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/podmortem-operator"
        held = (cp.get(lease_path) or {}).get("spec") or {}
        assert held.get("holderIdentity") and held.get("renewTime"), held
        cp.run("helm", "upgrade", RELEASE, str(rel.CHART), "-n", namespace, "--reuse-values",
               "--set", "logLevel=debug", "--set", "operator.resources.limits.memory=768Mi")
        # The Lease is the chart's (an empty spec): Helm's three-way merge keeps what the operator
        # wrote, so the old operator still leads, and keeps renewing, through the upgrade.
        kept = (cp.get(lease_path) or {}).get("spec") or {}
        assert kept.get("holderIdentity") == held["holderIdentity"], (held, kept)
        assert kept.get("acquireTime") == held.get("acquireTime"), (held, kept)
        assert old.process.alive() and "lost the lease" not in old.process.output()
        after = rel.manifest(cp, release=RELEASE, namespace=namespace)
        container = after.one("Deployment", "operator")["spec"]["template"]["spec"]["containers"][0]
        assert {"name": "PODMORTEM_LOG_LEVEL", "value": "debug"} in container["env"]
        assert container["resources"]["limits"]["memory"] == "768Mi"
        live = json.loads(cp.kubectl("get", "deployment", "podmortem-operator", "-n", namespace,
                                     "-o", "json"))
        assert live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "768Mi"
        strategy = after.one("Deployment", "operator")["spec"]["strategy"]["type"]
        # The Deployment controller rolls the (kwok) pod; the processes here do what its pods would.
        cp.run("kubectl", "-n", namespace, "rollout", "status", "deployment/podmortem-operator",
               "--timeout=120s", timeout=150)
        # emptyDir (the default): the new pod gets a new, empty volume; a PVC would be the same folder.
        volumes = tmp_path / ("old-pod" if strategy == "Recreate" else "new-pod")
        if strategy == "Recreate":
            assert old.stop() == 0, old.process.output()[-3000:]
            write("between", 5)
            new = rel.start_operator(cp, after, tmp=tmp_path / "new", volumes=volumes)
        else:
            new = rel.start_operator(cp, after, tmp=tmp_path / "new", volumes=volumes)
            rel.ready(new, timeout=120)  # a standby is ready: it serves logs, the old one leads
            write("overlap", 5)
            assert old.stop() == 0, old.process.output()[-3000:]
            write("between", 5)
        rel.ready(new, timeout=120)
        assert "DEBUG" in new.process.output() or "debug" in new.process.output().lower()
        write("after", 5)
        stored = rel.lines_stored(new, namespace=jobs_namespace, pod=pod, token=reader, expected=written,
                                  timeout=120)
    finally:
        old.stop()
        if new is not None:
            new.stop()
    assert stored == written, "each line once, in order, across the roll"


def _release_objects(cp: ControlPlane, namespace: str) -> list[str]:
    """Every object of any listable kind that carries the release's instance label or a release name."""
    kinds = [k for k in cp.kubectl("api-resources", "--verbs=list", "-o", "name").split()
             # Events are records about objects, not objects a release installs; they expire (1 h here).
             if k not in ("events", "events.events.k8s.io")]
    found: list[str] = []
    result = cp.run("kubectl", "get", ",".join(kinds), "-A", "-o", "json", timeout=300)
    for item in json.loads(result.stdout)["items"]:
        meta = item["metadata"]
        labels = meta.get("labels") or {}
        if (labels.get("app.kubernetes.io/instance") == RELEASE or meta["name"].startswith(f"{RELEASE}-")
                or meta["name"] == RELEASE or meta.get("namespace") == namespace):
            if meta.get("namespace") == namespace and item["kind"] in ("ServiceAccount", "ConfigMap") \
                    and meta["name"] in ("default", "kube-root-ca.crt"):
                continue  # every namespace has these (made by the controller-manager), not the release
            found.append(f"{item['kind']} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " "))
    return sorted(found)


def test_uninstall_leaves_only_the_crd(control_plane: ControlPlane, release_namespace: str,
                                       jobs_namespace: str, tmp_path: Path) -> None:
    cp, namespace = control_plane, release_namespace
    _install(cp, namespace, rel.port_values())
    rendered = rel.manifest(cp, release=RELEASE, namespace=namespace)
    reader = rel.log_reader(cp, jobs_namespace)
    # The operator runs (it takes its Lease) and reports, so what it makes at run time is counted too.
    operator = rel.start_operator(cp, rendered, tmp=tmp_path / "op", volumes=tmp_path / "op-pod")
    try:
        rel.ready(operator, timeout=120)
        rel.run_path(cp, operator, namespace=jobs_namespace, name="gone", reader=reader, timeout=120)
    finally:
        operator.stop()
    installed = _release_objects(cp, namespace)
    assert any(x.startswith("Deployment ") for x in installed), installed
    cp.run("helm", "uninstall", RELEASE, "-n", namespace, "--wait", "--timeout=120s", timeout=150)

    def settled() -> list[str] | None:
        left = _release_objects(cp, namespace)
        # Pods and ReplicaSets go through the garbage collector after the Deployment and DaemonSet.
        owned = ("Pod", "ReplicaSet", "ControllerRevision")
        return None if any(x.split()[0] in owned for x in left) else left
    left = rel.wait(settled, what="the garbage collector removing the release's pods", timeout=120, step=2)
    # Nothing: the operator's leader-election Lease (which it took and released, so it held the
    # operator's holder fields) is the chart's, and went with the release.
    assert left == [], left
    # Helm's convention: the CRD (from crds/, unlabelled by Helm) stays, and with it the TrainingJobs.
    assert cp.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainingjobs.podmortem.io")
    assert cp.get(f"/apis/podmortem.io/v1alpha1/namespaces/{jobs_namespace}/trainingjobs/gone")


def test_the_readmes_example_trainingjob_is_accepted(control_plane: ControlPlane, namespace: str) -> None:
    """``kubectl apply -f examples/trainingjob.yaml`` (the README's step 3) against the chart's CRD:
    its ``logRetention: 14d,2Gi`` (an age and a size, which the operator parses) was refused by the
    CRD's pattern; a retention in words still is."""
    cp = control_plane
    crd = str(rel.CHART / "crds" / "trainingjob.yaml")
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", crd)
    cp.kubectl("wait", "--for=condition=Established", "crd/trainingjobs.podmortem.io", "--timeout=60s")
    example = (rel.CHART.parents[1] / "examples" / "trainingjob.yaml").read_text()
    assert "logRetention: 14d,2Gi" in example
    cp.kubectl("apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", "-",
               input=example.replace("namespace: default", f"namespace: {namespace}"))
    words = cp.run("kubectl", "apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", "-",
                   input=example.replace("namespace: default", f"namespace: {namespace}")
                   .replace("14d,2Gi", "one week"), check=False)
    assert words.returncode != 0 and "spec.logRetention" in words.stderr, words.stderr
