"""The README's quick start, command by command, against the emulated cluster.

The commands are read from README.md (between the quick-start markers), so the
README cannot drift from what works. What a real cluster would do and the
emulated one cannot is stood in for, and only that:

- ``hack/build-image.sh`` and ``podman push``: not run here (no registry); the
  image is built and run by ``tests/image``;
- ``helm install``: the chart is rendered with Helm's own engine and the values
  the command sets, and the operator's pod is started as a process exactly as
  rendered (``tests/chart/_pods.py``), with its service account's files;
- ``kubectl rollout status``: waits for that process's readiness probe;
- between steps 3 and 4 the test plays the kubelet: the pod runs, then its
  container is OOM-killed (exit 137).

Every ``kubectl`` and ``podmortem`` command runs for real, as written, with a
kubeconfig for the emulated API (TLS, a bearer token).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
from tests.chart import _pods, _render
from tests.cli import entrypoints as ep

from podmortem_demo.emulated.tls import make_pki
from podmortem_demo.harness import Harness, harness, kill, run_pod

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
KUBECTL = shutil.which("kubectl")

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="needs the kubectl client (apt-get install kubectl)")


def quick_start() -> list[str]:
    """The quick start's commands, one per entry, comments and blank lines dropped."""
    text = README.read_text()
    pattern = r"<!-- quick-start:begin[^>]*-->\s*```bash\n(.*?)```\s*<!-- quick-start:end -->"
    match = re.search(pattern, text, re.S)
    assert match, "README.md has no quick-start block between its markers"
    commands = []
    for line in match.group(1).splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if line:
            commands.append(line)
    return commands


def helm_values(args: list[str]) -> tuple[str, str, dict[str, Any]]:
    """``helm install NAME CHART -n NS --set a.b=c ...``: the release, its namespace and the values."""
    release, chart = args[2], args[3]
    assert (ROOT / chart).resolve() == _render.CHART_DIR, f"the quick start installs {chart}, not our chart"
    namespace, values = "default", {}
    rest = args[4:]
    while rest:
        flag = rest.pop(0)
        if flag in ("-n", "--namespace"):
            namespace = rest.pop(0)
        elif flag == "--set":
            key, _, value = rest.pop(0).partition("=")
            node = values
            *parents, leaf = key.split(".")
            for parent in parents:
                node = node.setdefault(parent, {})
            node[leaf] = value
        elif flag == "--create-namespace":
            pass
        else:
            raise AssertionError(f"the test does not know the helm flag {flag!r}: teach it")
    return release, namespace, values


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Harness]:
    pki = make_pki()
    with harness(tmp_path / "cluster", pki=pki, tokens={"admin", "operator-sa"}, admin_token="admin") as h:
        h.pki = pki  # type: ignore[attr-defined]
        yield h


def test_the_quick_start_works_as_written(cluster: Harness, chart_loaded: helm.Chart, tmp_path: Path) -> None:
    h = cluster
    pki = h.pki  # type: ignore[attr-defined]
    kubeconfig = ep.write_kubeconfig(tmp_path / "kubeconfig", server=h.url, token="admin", ca_pem=pki.ca_pem)
    env = ep.clean_env(tmp_path, KUBECONFIG=str(kubeconfig),
                       PATH=f"{Path(ep.PODMORTEM).parent}{os.pathsep}{os.environ['PATH']}")
    commands = quick_start()
    seen: list[str] = []
    operator: ep.Process | None = None
    operator_pod: _pods.PodProcess | None = None
    try:
        for line in commands:
            args = shlex.split(line)
            if args[0] == "sudo":
                args = args[1:]
            seen.append(args[0] if args[0] != "kubectl" else f"kubectl {args[1]}")
            if args[0] in ("hack/build-image.sh", "podman", "docker"):
                continue  # the image: built and run by tests/image
            if args[0] == "helm":
                assert args[1] == "install", line
                release, namespace, values = helm_values(args)
                rendered = _render.render(chart_loaded, values, name=release, namespace=namespace)
                deployment = rendered.one("Deployment", "operator")
                image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
                assert image == "registry.example.com/podmortem:0.1.0", image
                account = ep.service_account_dir(tmp_path / "sa", token="operator-sa", pki=pki,
                                                 namespace=namespace)
                base = ep.clean_env(tmp_path, **ep.in_cluster_env(h.url, account))
                operator_pod = _pods.materialize(rendered, deployment, podmortem=ep.PODMORTEM,
                                                 tmp=tmp_path / "operator", base_env=base)
                operator = ep.Process(operator_pod.argv, operator_pod.env, tmp_path / "operator.log").start()
                continue
            if args[:3] == ["kubectl", "-n", "podmortem"] and args[3:5] == ["rollout", "status"]:
                assert operator is not None and operator_pod is not None, "rollout status before helm install"
                assert args[5] == f"deployment/{deployment['metadata']['name']}", \
                    f"the quick start waits for {args[5]}, the chart names the Deployment " \
                    f"{deployment['metadata']['name']}"
                operator.wait_http(operator_pod.ready_url, timeout=90)
                continue
            if line.startswith("kubectl get trainingjob pointgroup -o jsonpath"):
                die(h)  # step 4 is read after the pod has died: play the kubelet first
            run = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
            assert run.returncode == 0, f"{line}\n--- stdout ---\n{run.stdout}\n--- stderr ---\n{run.stderr}"
            check(line, run.stdout)
    finally:
        if operator is not None:
            operator.stop()
    assert "helm" in seen and "kubectl apply" in seen and "podmortem" in seen, seen


def die(h: Harness) -> None:
    """The kubelet's part: the pod runs, its trainer prints 20 lines, then it is OOM-killed."""
    run_pod(h, name="pointgroup-train")
    trainer = h.sync(lambda: h.api.pods["default", "pointgroup-train"]).containers["trainer"]
    h.sync(lambda: trainer.write(20))
    kill(h, name="pointgroup-train")
    h.wait(lambda: (h.get(f"{ep.TJ_PATH}/pointgroup") or {}).get("status", {}).get("failureReport"),
           what="the failure report", timeout=60)


def check(line: str, out: str) -> None:
    """What each step must show a newcomer."""
    if line == "kubectl get trainingjob pointgroup":
        assert "pointgroup" in out, out
    elif line.startswith("kubectl get trainingjob pointgroup -o jsonpath"):
        assert "limit" in out.lower() or "oom" in out.lower(), f"the finding reads: {out!r}"
    elif line.startswith("kubectl describe trainingjob"):
        assert "Failure Report" in out and "Verdict" in out, out
    elif line.startswith("podmortem logs"):
        assert len(out.splitlines()) == 20, f"podmortem logs printed {len(out.splitlines())} lines of 20"


@pytest.fixture(scope="module")
def chart_loaded() -> Iterator[helm.Chart]:
    with helm.Chart.load(_render.CHART_DIR) as loaded:
        yield loaded
