"""A full story of the chart's pods, run as processes against the emulated API, every API call recorded.

For one scenario's rendering, the operator's and the agent's containers run as
processes (``_pods``) with their own service-account tokens, and the story makes
them use every permission the chart grants them:

- the operator watches its kinds, takes the leader Lease (and releases it on SIGTERM);
- a TrainingJob: the operator creates its pod, follows its log, and on an OOM kill writes
  the report into the status (looking for the node's agent) with an Event;
- an annotated object of every ``foreignKinds`` kind owns a pod that is OOM-killed: the
  report goes into the object's annotation;
- an annotated bare pod is OOM-killed: the report goes into its annotation (``patchPods``);
- a reader fetches the TrainingJob's stored log over ``GET /logs`` with a bearer token
  (a TokenReview and a SubjectAccessReview when auth is on);
- the agent lists its node's pods and reads the annotated owners of pods of foreign kinds.

The emulated API keeps each request's attributes (:mod:`podmortem_demo.emulated.calls`),
so ``test_rbac_calls`` compares them with the chart's rules and ``test_chart_pods_start``
checks the pods did their jobs.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm
import kmock
from tests.cli import entrypoints as ep

from podmortem_demo.emulated import ApiCall, ReviewedToken
from podmortem_demo.emulated.tls import Pki
from podmortem_demo.harness import Harness, harness, kill, run_pod

from . import _pods, _render

SA_TOKENS = {"operator": "operator-sa-token", "agent": "agent-sa-token"}
ADMIN = "admin-token"
#: A token of someone allowed to read pod logs, for ``GET /logs``.
READER = "log-reader-token"
#: A token meant for the apiserver: with a token audience set, the log API must refuse it.
REPLAYABLE = "apiserver-audience-token"
#: Kinds of the foreign resources the scenarios name (the emulated API declares each one).
KINDS = {"jobs": "Job", "pytorchjobs": "PyTorchJob", "rayjobs": "RayJob", "jobsets": "JobSet"}
FAILURE_REPORT = "podmortem.io/failure-report"


@dataclass
class Story:
    """What happened in one scenario's story."""

    scenario: str
    rendered: _render.Rendered
    #: Component ("operator", "agent") -> the calls its service account made.
    calls: dict[str, list[ApiCall]] = field(default_factory=dict)
    #: Component -> ServiceAccount name, and the namespace the pods run in.
    accounts: dict[str, str] = field(default_factory=dict)
    namespace: str = _render.NAMESPACE
    #: Where the story's jobs ran, and the pods the agent must watch there.
    jobs_namespace: str = "default"
    victims: list[str] = field(default_factory=list)
    #: The foreign kinds' resources the operator was told to follow (from its rendered env).
    foreign: list[str] = field(default_factory=list)
    #: Milestones reached: "trainingjob-pod", "trainingjob-report", "foreign-report:<kind>",
    #: "bare-pod-report", "logs-served", "agent-watched".
    reached: list[str] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)
    #: Component -> its process's peak resident memory (VmHWM, bytes), read just before it stopped.
    peak_rss: dict[str, int] = field(default_factory=dict)


def scenario_values(name: str) -> dict[str, Any]:
    return {} if name == "defaults" else _render.scenario_values(name)


def _workload(rendered: _render.Rendered, component: str) -> dict[str, Any] | None:
    return next((w for w in rendered.workloads()
                 if w["metadata"]["labels"]["app.kubernetes.io/component"] == component), None)


def _start(h: Harness, pki: Pki, rendered: _render.Rendered, workload: dict[str, Any], component: str,
           tmp: Path) -> tuple[ep.Process, _pods.PodProcess]:
    namespace = workload["metadata"].get("namespace", _render.NAMESPACE)
    account = ep.service_account_dir(tmp / f"{component}-sa", token=SA_TOKENS[component], pki=pki,
                                     namespace=namespace)
    base = ep.clean_env(tmp, **ep.in_cluster_env(h.url, account))
    pod = _pods.materialize(rendered, workload, podmortem=ep.PODMORTEM, tmp=tmp / component, base_env=base,
                            pki=pki)
    return ep.Process(pod.argv, pod.env, tmp / f"{component}.log").start(), pod


def _declare_foreign_kinds(h: Harness, kinds: list[dict[str, str]]) -> list[tuple[str, str, str]]:
    """Serve every foreign kind (a CRD installed); (group, version, resource) of each."""
    out = []
    for kind in kinds:
        group, version, resource = kind["group"], kind.get("version") or "v1", kind["resource"]
        info = kmock.ResourceInfo(kind=KINDS.get(resource, resource.capitalize().rstrip("s")),
                                  singular=resource.rstrip("s"), namespaced=True,
                                  verbs={"get", "list", "watch", "create", "patch", "update", "delete"})
        h.sync(lambda k=f"{group}/{version}/{resource}", i=info: h.api.resources.__setitem__(k, i))
        out.append((group, version, resource))
    return out



def _pod(name: str, namespace: str, *, annotations: dict[str, str] | None = None,
         owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": _pods.NODE, "containers": [{"name": "trainer", "image": "x"}]}}


def _get_logs(url: str, *, token: str | None, ca_pem: bytes | None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    context = ssl.create_default_context(cadata=ca_pem.decode()) if ca_pem else None
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


@contextlib.contextmanager
def _running(process: ep.Process, story: Story, component: str) -> Iterator[ep.Process]:
    try:
        yield process
    finally:
        with contextlib.suppress(OSError, ValueError):
            status = Path(f"/proc/{process.proc.pid}/status").read_text()
            line = next(x for x in status.splitlines() if x.startswith("VmHWM:"))
            story.peak_rss[component] = int(line.split()[1]) * 1024
        story.exit_codes[component] = process.stop()
        story.outputs[component] = process.output()


def run(chart: helm.Chart, pki: Pki, scenario: str, tmp: Path) -> Story:
    """The story of ``scenario`` (see the module docstring) on a fresh emulated cluster."""
    rendered = _render.render(chart, scenario_values(scenario))
    story = Story(scenario=scenario, rendered=rendered)
    with harness(tmp / "cluster", pki=pki, tokens={ADMIN, *SA_TOKENS.values()}, admin_token=ADMIN) as h:
        h.sync(lambda: setattr(h.api, "record_calls", True))
        _operator_story(h, pki, story, tmp)
        _agent_story(h, pki, story, tmp)
        calls = h.sync(lambda: list(h.api.calls))
    for component, token in SA_TOKENS.items():
        story.calls[component] = [c for c in calls if c.user == token]
    return story


def _operator_story(h: Harness, pki: Pki, story: Story, tmp: Path) -> None:
    rendered = story.rendered
    workload = _workload(rendered, "operator")
    assert workload is not None, "every scenario runs the operator"
    story.namespace = workload["metadata"].get("namespace", _render.NAMESPACE)
    story.accounts["operator"] = workload["spec"]["template"]["spec"]["serviceAccountName"]
    operator, pod = _start(h, pki, rendered, workload, "operator", tmp)
    watched = [n for n in pod.env.get("PODMORTEM_NAMESPACES", "").split(",") if n]
    ns = watched[0] if watched else "default"
    h.sync(lambda: h.api.namespaces.update(watched))
    foreign = _declare_foreign_kinds(h, json.loads(pod.env.get("PODMORTEM_FOREIGN_KINDS") or "[]"))
    # The reader's token, bound to the audience the operator asks TokenReviews for, if any.
    audiences = frozenset(a.strip() for a in pod.env.get("PODMORTEM_HTTP_TOKEN_AUDIENCE", "").split(",")
                          if a.strip())
    reader = ReviewedToken(username="reader", audiences=audiences) if audiences else ReviewedToken("reader")
    apiserver_token = ReviewedToken(username="replayer")  # meant for the apiserver only
    h.sync(lambda: h.api.reviews.tokens.update({READER: reader, REPLAYABLE: apiserver_token}))
    story.foreign = [resource for _group, _version, resource in foreign]
    with _running(operator, story, "operator"):
        operator.wait_http(pod.ready_url, timeout=90)
        tj = f"tj-{story.scenario}"[:40]
        h.create(f"/apis/podmortem.io/v1alpha1/namespaces/{ns}/trainingjobs", {
            "apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": tj, "namespace": ns},
            "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}},
        })
        created = h.wait(lambda: h.get(f"/api/v1/namespaces/{ns}/pods/{tj}-train"),
                         what=f"the operator ({story.scenario}) creating the TrainingJob's pod", timeout=60)
        assert created["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
        story.reached.append("trainingjob-pod")

        # Every followed kind at once: annotated owners and their pods, a bare annotated pod.
        story.jobs_namespace = ns
        victims = story.victims
        victims.append(f"{tj}-train")
        owners: dict[str, str] = {}
        for group, version, resource in foreign:
            name = f"{resource}-owner"
            path = f"/apis/{group}/{version}/namespaces/{ns}/{resource}"
            obj = h.create(path, {"apiVersion": f"{group}/{version}", "kind": KINDS.get(resource, resource),
                                  "metadata": {"name": name, "namespace": ns,
                                               "annotations": {"podmortem.io/watch": "true"}}})
            owner = {"apiVersion": f"{group}/{version}", "kind": obj["kind"], "name": name,
                     "uid": obj["metadata"]["uid"], "controller": True}
            h.create(f"/api/v1/namespaces/{ns}/pods", _pod(f"{resource}-pod", ns, owner=owner))
            victims.append(f"{resource}-pod")
            owners[f"{path}/{name}"] = resource
        h.create(f"/api/v1/namespaces/{ns}/pods",
                 _pod("bare-pod", ns, annotations={"podmortem.io/watch": "true"}))
        victims.append("bare-pod")
        for name in victims:
            run_pod(h, name=name, namespace=ns)
        h.sync(lambda: h.api.pods[ns, f"{tj}-train"].containers["trainer"].write(20))
        for name in victims:
            kill(h, name=name, namespace=ns)

        def reported(path: str, *, status: bool) -> bool:
            obj = h.get(path) or {}
            if status:
                return bool((obj.get("status") or {}).get("failureReport"))
            return FAILURE_REPORT in ((obj.get("metadata") or {}).get("annotations") or {})

        tj_path = f"/apis/podmortem.io/v1alpha1/namespaces/{ns}/trainingjobs/{tj}"
        h.wait(lambda: reported(tj_path, status=True) or None, what="the TrainingJob's report", timeout=60)
        story.reached.append("trainingjob-report")
        for path, resource in owners.items():
            h.wait(lambda p=path: reported(p, status=False) or None, what=f"the report on {path}", timeout=60)
            story.reached.append(f"foreign-report:{resource}")
        if pod.env.get("PODMORTEM_PATCH_PODS") == "true":
            h.wait(lambda: FAILURE_REPORT in ((h.stored("v1/pods", ns, "bare-pod") or {})
                                              .get("metadata", {}).get("annotations") or {}) or None,
                   what="the report on the bare pod", timeout=60)
        else:
            h.wait(lambda: [e for e in h.events_for("bare-pod") if e.get("type") == "Warning"] or None,
                   what="the bare pod's Warning Event", timeout=60)
        story.reached.append("bare-pod-report")

        scheme = "https" if pod.env.get("PODMORTEM_HTTP_TLS_CERT_FILE") else "http"
        port = pod.env["PODMORTEM_HTTP_PORT"]
        url = f"{scheme}://127.0.0.1:{port}/logs/{ns}/{tj}-train"
        auth = pod.env.get("PODMORTEM_HTTP_AUTH") == "kubernetes"
        ca = pki.ca_pem if scheme == "https" else None
        status, body = _get_logs(url, token=READER if auth else None, ca_pem=ca)
        assert status == 200, (status, body[:300])
        assert b"trainer" in body, body[:300]
        if auth:
            assert _get_logs(url, token="not-a-token", ca_pem=ca)[0] == 401
            expected = 401 if audiences else 200
            assert _get_logs(url, token=REPLAYABLE, ca_pem=ca)[0] == expected, "the token audience"
        story.reached.append("logs-served")


def _agent_story(h: Harness, pki: Pki, story: Story, tmp: Path) -> None:
    workload = _workload(story.rendered, "agent")
    if workload is None:
        return
    story.accounts["agent"] = workload["spec"]["template"]["spec"]["serviceAccountName"]
    agent, pod = _start(h, pki, story.rendered, workload, "agent", tmp)
    with _running(agent, story, "agent"):
        agent.wait_http(pod.ready_url, timeout=60)
        # Each victim: annotated, owned by the TrainingJob, or owned by an annotated object the agent reads.
        wanted = [f"watching pod {story.jobs_namespace}/{name} " for name in story.victims]
        deadline = time.monotonic() + 30
        while not all(w in agent.output() for w in wanted):
            assert time.monotonic() < deadline, f"the agent never watched every pod: {agent.output()[-3000:]}"
            time.sleep(0.3)
        story.reached.append("agent-watched")
