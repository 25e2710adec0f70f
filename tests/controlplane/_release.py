"""The chart installed with the real helm, its operator run as its Deployment would run it, and the
path a user relies on: TrainingJob, pod, OOM kill, report, log read back.

The operator is a local process started from the manifest Helm installed (``helm get manifest``),
through ``tests.chart._pods.materialize``, with a real ServiceAccount token from TokenRequest and the
control plane's CA in the service-account folder: the real RBAC authorizer decides each of its calls.
Pods do not run (kwok plays the kubelets), so the test plays the kubelet for what a container does:
it writes the log lines kwok serves and patches the pod's status when the container is OOM-killed.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml
from tests.chart import _pods, _render
from tests.cli import entrypoints as ep
from tests.controlplane.cluster import ControlPlane, cri_line

T = TypeVar("T")

CHART = _render.CHART_DIR
#: The README's install command sets these two; no image is pulled here (pods do not run).
IMAGE = ("--set", "image.repository=registry.example.com/podmortem", "--set", "image.tag=0.1.0")
TJ_API = "/apis/podmortem.io/v1alpha1"
CONTAINER = "trainer"


def port_values() -> dict[str, int]:
    """The operator's ports: the chart's defaults (8080, 9090, 8081) may be taken on a shared machine."""
    return {"operator.http.port": ep.free_port(), "operator.metrics.port": ep.free_port(),
            "operator.health.port": ep.free_port()}


def set_args(values: Mapping[str, object]) -> list[str]:
    args: list[str] = []
    for key, value in values.items():
        args += ["--set-json" if not isinstance(value, str) else "--set", f"{key}="
                 + (value if isinstance(value, str) else json.dumps(value))]
    return args


def manifest(cp: ControlPlane, *, release: str, namespace: str) -> _render.Rendered:
    """What Helm installed for the release (``helm get manifest``), as tests.chart reads a rendering."""
    text = cp.run("helm", "get", "manifest", release, "-n", namespace).stdout
    return _render.Rendered(objects=tuple(d for d in yaml.safe_load_all(text) if d), notes="")


def template(cp: ControlPlane, *, release: str, namespace: str, values: Mapping[str, object],
             include_crds: bool = False) -> _render.Rendered:
    """``helm template`` with the real helm, for the control plane's Kubernetes version."""
    version = json.loads(cp.kubectl("version", "-o", "json"))["serverVersion"]["gitVersion"]
    args = ["template", release, str(CHART), "-n", namespace, "--kube-version", version, *IMAGE,
            *set_args(values)] + (["--include-crds"] if include_crds else [])
    text = cp.run("helm", *args).stdout
    return _render.Rendered(objects=tuple(d for d in yaml.safe_load_all(text) if d), notes="")


#: A check that says why a step can no longer happen (e.g. the 403 that broke it), or None.
FailFast = Callable[[], str | None]


def wait(probe: Callable[[], T | None], *, what: str, timeout: float, watch: ep.Process | None = None,
         step: float = 0.5, fail_fast: FailFast | None = None) -> T:
    """Poll ``probe`` until it returns something; fail naming ``what`` (and the operator's log tail).

    ``fail_fast``, asked after each poll that got nothing, ends the wait at once with its reason: a
    step whose failure is already observable does not wait out ``timeout``."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except (OSError, ValueError, KeyError, TypeError, PathBroken) as exc:
            last, value = exc, None
        if value is not None:
            return value
        why = fail_fast() if fail_fast is not None else None
        if why is not None:
            raise PathBroken(f"{what}: broken: {why}")
        if watch is not None and not watch.alive():
            break
        time.sleep(step)
    tail = f"\n--- operator log ---\n{watch.output()[-3000:]}" if watch is not None else ""
    raise PathBroken(f"{what}: not within {timeout:.0f} s" + (f" (last error: {last})" if last else "")
                     + tail)


class PathBroken(AssertionError):
    """A step of the path did not happen; the message names the step."""


@dataclass
class Operator:
    """``podmortem operator`` as the rendered Deployment's container, logged in with a real SA token."""

    process: ep.Process
    pod: _pods.PodProcess
    namespace: str
    account: str

    @property
    def log_url(self) -> str:
        scheme = "https" if self.pod.env.get("PODMORTEM_HTTP_TLS_CERT_FILE") else "http"
        return f"{scheme}://127.0.0.1:{self.pod.env['PODMORTEM_HTTP_PORT']}"

    def stop(self) -> int:
        return self.process.stop(timeout=60)


def start_operator(cp: ControlPlane, rendered: _render.Rendered, *, tmp: Path, volumes: Path) -> Operator:
    """The rendered operator Deployment's container as a process; ``volumes`` holds its volumes' folders
    (the same folder for two processes is one PersistentVolume, a new one an emptyDir)."""
    workload = rendered.one("Deployment", "operator")
    namespace = workload["metadata"]["namespace"]
    account = workload["spec"]["template"]["spec"]["serviceAccountName"]
    tmp.mkdir(parents=True, exist_ok=True)
    sa = cp.mounted_service_account(tmp / "serviceaccount", namespace=namespace, name=account)
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    base = ep.clean_env(home, **ep.in_cluster_env(cp.url, sa))
    pod = _pods.materialize(rendered, workload, podmortem=ep.PODMORTEM, tmp=volumes, base_env=base)
    process = ep.Process(pod.argv, pod.env, tmp / "operator.log").start()
    return Operator(process=process, pod=pod, namespace=namespace, account=account)


class PortTaken(RuntimeError):
    """Another process on this shared machine took one of the operator's ports between the test
    choosing it and the operator binding it: not a broken path (the caller starts again)."""


def ready(operator: Operator, *, timeout: float, fail_fast: FailFast | None = None) -> None:
    def probe() -> bool | None:
        status, _ = ep.http_get(operator.pod.ready_url)
        return True if status == 200 else None
    try:
        wait(probe, what="the operator's /readyz 200", timeout=timeout, watch=operator.process,
             fail_fast=fail_fast)
    except PathBroken as exc:
        if fail_fast is not None and ": broken: " in str(exc):
            raise
        if not operator.process.alive() and "address already in use" in operator.process.output().lower():
            raise PortTaken(operator.process.output()[-1000:]) from None
        raise PathBroken(f"{exc}\n/readyz: {ep.http_get(operator.pod.ready_url)}") from None


def get_logs(url: str, *, token: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=20) as resp:
            return int(resp.status), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")


def log_reader(cp: ControlPlane, namespace: str) -> str:
    """A token of a ServiceAccount allowed to ``get pods/log`` in ``namespace`` (as for kubectl logs)."""
    cp.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "log-reader", "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "log-reader", "namespace": namespace},
         "rules": [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "log-reader", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "log-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "log-reader", "namespace": namespace}]})
    return cp.token(namespace, "log-reader")


def stored_lines(operator: Operator, *, namespace: str, pod: str, token: str) -> list[str]:
    """The pod's log as the operator's log server serves it (``GET /logs``), one string a line."""
    status, body = get_logs(f"{operator.log_url}/logs/{namespace}/{pod}?container={CONTAINER}", token=token)
    if status != 200:
        raise PathBroken(f"GET /logs/{namespace}/{pod} answered {status}: {body[:300]}")
    return body.splitlines()


def kubelet_kill(cp: ControlPlane, *, namespace: str, pod: str, exit_code: int = 137,
                 reason: str = "OOMKilled") -> None:
    """What the kubelet writes when the container is OOM-killed: the status subresource, as the admin."""
    body = cp.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
    assert body is not None, f"pod {pod} is gone"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    statuses = []
    for status in body["status"].get("containerStatuses") or []:
        running = (status.get("state") or {}).get("running") or {}
        statuses.append({**status, "ready": False, "started": False, "state": {"terminated": {
            "exitCode": exit_code, "reason": reason, "containerID": status.get("containerID", ""),
            "startedAt": running.get("startedAt", now), "finishedAt": now}}})
    assert statuses, f"pod {pod} has no container status to end: {body['status']}"
    conditions = [{**c, "status": "False"} if c.get("type") in ("Ready", "ContainersReady") else c
                  for c in body["status"].get("conditions") or []]
    code, answer = cp.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}/status",
                              {"status": {"phase": "Failed", "containerStatuses": statuses,
                                          "conditions": conditions}},
                              content_type="application/merge-patch+json")
    assert code == 200, (code, answer)


@dataclass
class PathRun:
    """What one run of the path saw, step by step."""

    reached: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def trainingjob(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": CONTAINER, "image": "registry.example.com/trainer:1.0",
                 "resources": {"limits": {"memory": "1Gi"}}}]}}}}


def pod_running(cp: ControlPlane, *, namespace: str, pod: str, timeout: float,
                operator: Operator | None = None, fail_fast: FailFast | None = None) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        body = cp.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
        return body if body and body.get("status", {}).get("phase") == "Running" else None
    body = wait(probe, what=f"the operator creating pod {pod} (kwok makes it Running)", timeout=timeout,
                watch=operator.process if operator else None, fail_fast=fail_fast)
    cp.give_container_ids(body)
    return body


def lines_stored(operator: Operator, *, namespace: str, pod: str, token: str, expected: list[str],
                 timeout: float, fail_fast: FailFast | None = None) -> list[str]:
    def probe() -> list[str] | None:
        got = stored_lines(operator, namespace=namespace, pod=pod, token=token)
        return got if len(got) >= len(expected) and set(expected) <= set(got) else None
    return wait(probe, what=f"{len(expected)} log lines of {pod} stored and served by GET /logs",
                timeout=timeout, watch=operator.process, fail_fast=fail_fast)


def failure_report(cp: ControlPlane, *, namespace: str, name: str, timeout: float,
                   operator: Operator | None = None, fail_fast: FailFast | None = None) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        out = cp.kubectl("get", "trainingjob", name, "-n", namespace, "-o", "json")
        report = (json.loads(out).get("status") or {}).get("failureReport")
        return report or None
    return wait(probe, what=f"status.failureReport of TrainingJob {name} (read with kubectl)",
                timeout=timeout, watch=operator.process if operator else None, fail_fast=fail_fast)


def warning_event(cp: ControlPlane, *, namespace: str, name: str, timeout: float,
                  fail_fast: FailFast | None = None) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        events = json.loads(cp.kubectl("get", "events", "-n", namespace, "-o", "json",
                                       f"--field-selector=involvedObject.name={name},type=Warning"))
        return events["items"][0] if events["items"] else None
    return wait(probe, what=f"a Warning Event on TrainingJob {name}", timeout=timeout, fail_fast=fail_fast)


def run_path(cp: ControlPlane, operator: Operator, *, namespace: str, name: str, reader: str,
             timeout: float = 90, lines: int = 5, run: PathRun | None = None,
             fail_fast: FailFast | None = None) -> PathRun:
    """TrainingJob -> its pod -> log lines followed -> OOM kill -> report, Event; each step bounded.

    Raises `PathBroken` naming the first step that did not happen; ``run.reached`` lists the others.
    ``fail_fast`` (see `wait`) ends a step as soon as its failure is observable.
    """
    run = run if run is not None else PathRun()
    pod = f"{name}-train"
    # kwok serves the pod's log from these files once the pod exists (the Logs object may come first).
    cp.serve_logs(namespace, pod, [CONTAINER])
    written = [f"{name} step {i} loss {1.0 / (i + 1):.4f}" for i in range(lines)]
    cp.pod_log_file(namespace, pod, CONTAINER).write_text("".join(cri_line(t) for t in written))
    cp.apply(trainingjob(name, namespace))
    created = pod_running(cp, namespace=namespace, pod=pod, timeout=timeout, operator=operator,
                          fail_fast=fail_fast)
    owner = created["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("TrainingJob", name), owner
    run.reached.append("pod")
    run.lines = lines_stored(operator, namespace=namespace, pod=pod, token=reader, expected=written,
                             timeout=timeout, fail_fast=fail_fast)
    run.reached.append("log")
    kubelet_kill(cp, namespace=namespace, pod=pod)
    run.report = failure_report(cp, namespace=namespace, name=name, timeout=timeout, operator=operator,
                                fail_fast=fail_fast)
    run.reached.append("report")
    warning_event(cp, namespace=namespace, name=name, timeout=timeout, fail_fast=fail_fast)
    run.reached.append("event")
    return run
