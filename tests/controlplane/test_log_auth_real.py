"""The operator's log server with the chart's auth (``operator.http.auth: kubernetes``) asking the real
API server: TokenReview for who the bearer is, SubjectAccessReview for ``get pods/log`` in the namespace,
decided by the real RBAC authorizer from real Roles and RoleBindings.

The chart is installed with the real helm (``_operator``); the operator runs here as a process with its
ServiceAccount's real token, so its own right to create the reviews is the chart's ClusterRole. It follows
a TrainingJob's pod in each of two namespaces through the API server's log proxy (kwok serves the
lines) into its store; readers then ask for the stored lines with tokens the API server issued.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.chart import _render
from tests.cli import entrypoints as ep
from tests.controlplane import _operator
from tests.controlplane.cluster import ControlPlane, cri_line

SCENARIO = "minimal-agent-off"
LINES = ("epoch 0 step 0 loss 1.000", "epoch 0 step 1 loss 0.500")


@dataclass
class Setup:
    plane: ControlPlane
    release: _operator.Release
    #: Namespace -> the followed pod's name there.
    pods: dict[str, str]
    a: str
    b: str
    logs_url: str
    tmp: Path

    def url(self, namespace: str) -> str:
        return f"{self.logs_url}/logs/{namespace}/{self.pods[namespace]}"


def get(url: str, token: str | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return int(resp.status), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")


def answered(setup: Setup, namespace: str, token: str, status: int) -> tuple[int, str]:
    """Poll ``GET /logs`` until it answers ``status`` (an RBAC change reaches the authorizer's cache)."""
    def probe() -> tuple[int, str] | None:
        got = get(setup.url(namespace), token)
        return got if got[0] == status else None
    return setup.plane.wait(probe, what=f"GET /logs/{namespace} answering {status}", timeout=30)


def pod_running(plane: ControlPlane, namespace: str, pod: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        body = plane.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
        return body if body and body.get("status", {}).get("phase") == "Running" else None
    return plane.wait(probe, what=f"{pod} Running", timeout=120)


def wait_stored(setup: Setup, namespace: str, operator: ep.Process) -> None:
    """Until a reader of the namespace reads the pod's :data:`LINES` (so a refusal later is not a 404)."""
    token = log_reader(setup.plane, namespace, "owner")
    last = (0, "")

    def stored() -> bool | None:
        nonlocal last
        last = get(setup.url(namespace), token)
        return True if last[1].splitlines()[:2] == list(LINES) else None

    try:
        setup.plane.wait(stored, what=f"{namespace}'s log stored", timeout=120)
    except AssertionError as exc:
        seen = setup.plane.run("kubectl", "get", "pods,trainingjobs,events", "-n", namespace, "-o", "wide",
                               check=False).stdout
        raise AssertionError(f"{exc}; last answer {last}; in {namespace}:\n{seen}\noperator log:\n"
                             f"{operator.output()[-4000:]}") from None


def log_reader(plane: ControlPlane, namespace: str, name: str, *, in_namespace: str | None = None) -> str:
    """A ServiceAccount ``name`` of ``namespace`` allowed ``get pods/log`` in ``in_namespace`` (default: its
    own), as a Role and RoleBinding grant ``kubectl logs``; the token the API server issues for it."""
    where = in_namespace or namespace
    plane.run("kubectl", "create", "serviceaccount", name, "-n", namespace, check=False)
    plane.apply(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": f"{name}-logs", "namespace": where},
         "rules": [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": f"{name}-logs", "namespace": where},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{name}-logs"},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
    )
    return plane.token(namespace, name)


def follow_a_trainingjob(plane: ControlPlane, namespace: str) -> str:
    """A TrainingJob whose pod writes :data:`LINES` (served by kwok); the pod's name."""
    name = f"tj-{uuid.uuid4().hex[:5]}"
    pod = f"{name}-train"
    plane.serve_logs(namespace, pod, ["trainer"])
    plane.pod_log_file(namespace, pod, "trainer").write_text("".join(cri_line(t) for t in LINES))
    template = {"spec": {"containers": [{"name": "trainer", "image": "pointgroup:1"}]}}
    plane.apply({"apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
                 "metadata": {"name": name, "namespace": namespace}, "spec": {"template": template}})
    plane.give_container_ids(pod_running(plane, namespace, pod))
    return pod


@pytest.fixture(scope="module")
def setup(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("log-auth-real")
    suffix = uuid.uuid4().hex[:5]
    a, b, release_ns = f"team-a-{suffix}", f"team-b-{suffix}", f"podmortem-{suffix}"
    for ns in (a, b):
        control_plane.create_namespace(ns)
    values = _render.scenario_values(SCENARIO)
    values["operator"] = {**values["operator"], **_operator.free_ports()}
    values["watchNamespaces"] = [a, b]
    try:
        with _operator.installed(control_plane, tmp, name=_operator.release_name("auth"),
                                 namespace=release_ns, values=values) as release:
            workload = release.rendered.one("Deployment", "operator")
            container = workload["spec"]["template"]["spec"]["containers"][0]
            assert _render.env_of(container)["PODMORTEM_HTTP_AUTH"] == "kubernetes"  # the chart's default
            with _operator.operator(control_plane, release, tmp) as (process, pod):
                pods = {ns: follow_a_trainingjob(control_plane, ns) for ns in (a, b)}
                setup = Setup(control_plane, release, pods, a, b,
                              f"http://127.0.0.1:{pod.env['PODMORTEM_HTTP_PORT']}", tmp)
                for ns in (a, b):
                    wait_stored(setup, ns, process)
                yield setup
    finally:
        for ns in (a, b):
            control_plane.run("kubectl", "delete", "namespace", ns, "--wait=false", check=False)


def test_a_reader_of_one_namespace_reads_its_logs_and_not_the_others(setup: Setup) -> None:
    reader = log_reader(setup.plane, setup.a, f"reader-{uuid.uuid4().hex[:4]}")
    status, body = get(setup.url(setup.a), reader)
    assert status == 200 and body.splitlines()[:2] == list(LINES), (status, body)
    status, body = get(setup.url(setup.b), reader)
    assert status == 403, (status, body)
    assert f'cannot get resource "pods/log" in namespace "{setup.b}"' in body, body


def test_a_serviceaccount_without_the_role_is_refused(setup: Setup) -> None:
    """Authenticated (its token is the API server's) but with no RoleBinding: 403, not 401."""
    name = f"nobody-{uuid.uuid4().hex[:4]}"
    setup.plane.kubectl("create", "serviceaccount", name, "-n", setup.a)
    status, body = get(setup.url(setup.a), setup.plane.token(setup.a, name))
    assert status == 403, (status, body)
    assert f"system:serviceaccount:{setup.a}:{name}" in body, body


@pytest.mark.parametrize("token", [None, "not-a-token", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"])
def test_no_token_or_one_the_api_server_does_not_accept_is_401(setup: Setup, token: str | None) -> None:
    status, body = get(setup.url(setup.a), token)
    assert status == 401, (status, body)


def test_a_token_of_a_deleted_serviceaccount_is_401(setup: Setup) -> None:
    """The real TokenReview checks that the token's ServiceAccount still exists (by uid)."""
    name = f"gone-{uuid.uuid4().hex[:4]}"
    token = log_reader(setup.plane, setup.a, name)
    setup.plane.kubectl("delete", "serviceaccount", name, "-n", setup.a)
    status, body = get(setup.url(setup.a), token)
    assert status == 401, (status, body)


def test_a_new_rolebinding_works_at_once(setup: Setup) -> None:
    """A SubjectAccessReview's "no" is not cached: granting ``pods/log`` in B lets the same token in."""
    name = f"grows-{uuid.uuid4().hex[:4]}"
    token = log_reader(setup.plane, setup.a, name)
    assert get(setup.url(setup.b), token)[0] == 403
    log_reader(setup.plane, setup.a, name, in_namespace=setup.b)
    status, body = get(setup.url(setup.b), token)
    assert status == 200 and body.splitlines()[:2] == list(LINES), (status, body)


def test_without_the_charts_review_rights_the_server_answers_503(setup: Setup) -> None:
    """The operator's own right to create TokenReviews and SubjectAccessReviews is the chart's
    ``operator-auth`` ClusterRoleBinding: without it the real API server refuses the reviews (403 to the
    operator), and a reader gets 503, never the log. Restored after."""
    binding = f"{setup.release.name}-podmortem-operator-auth"
    saved = json.loads(setup.plane.kubectl("get", "clusterrolebinding", binding, "-o", "json"))
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        saved["metadata"].pop(key, None)
    setup.plane.kubectl("delete", "clusterrolebinding", binding)
    try:
        # A token never reviewed before (no cached answer): the review is asked, and refused.
        token = log_reader(setup.plane, setup.a, f"fresh-{uuid.uuid4().hex[:4]}")
        _, body = answered(setup, setup.a, token, 503)
        assert "cannot check access" in body, body
    finally:
        setup.plane.apply(saved)
    _, body = answered(setup, setup.a, token, 200)
    assert body.splitlines()[:2] == list(LINES)
