"""How a misconfigured operator stops, as the kubelet stops it: SIGTERM, then SIGKILL after the
chart's terminationGracePeriodSeconds (an explicit contract: the chart's value is read from the
rendering). The operator runs from the rendered Deployment with a real token whose ClusterRole lacks
``list trainingjobs``, so it is never ready (test_rbac_minimal's release and helpers).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import yaml
from tests.cli import entrypoints as ep
from tests.controlplane import _release as rel
from tests.controlplane import test_rbac_minimal as rbac
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.test_rbac_minimal import Release

# The RBAC cases' module-scoped release and the jobs' namespace (fixtures are found by module name).
stand_in_crds = rbac.stand_in_crds
release = rbac.release
jobs_namespace = rbac.jobs_namespace


def _never_ready(cp: ControlPlane, *, shared: Release, jobs: str, tmp: Path) -> tuple[rel.Operator, int]:
    """An operator whose ClusterRole lacks ``list trainingjobs`` (it is never ready), started once
    /readyz says why; and the chart's terminationGracePeriodSeconds."""
    dropped = next(r for r in rbac.RULES if rbac._key(r) == "ClusterRole/operator#3")
    rendered = rel.template(cp, release="podmortem", namespace=shared.namespace,
                            values={**rel.port_values(), "fullnameOverride": shared.fullname,
                                    "watchNamespaces": [jobs]})
    deployment = rendered.one("Deployment", "operator")
    grace = int(deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])
    objects = rbac._without([o for o in rendered.objects if o["kind"] in rbac.RBAC_KINDS], shared.fullname,
                            dropped)
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    rbac._rbac_in_force(cp, account=account, shared=shared, jobs=jobs, dropped=dropped)
    operator = rel.start_operator(cp, rendered, tmp=tmp / "op", volumes=tmp / "op-pod")

    def says_why() -> str | None:
        status, body = ep.http_get(operator.pod.ready_url)
        return body if status == 503 and "(403)" in body else None
    rel.wait(says_why, what="/readyz 503 with the 403", timeout=rbac.STEP_TIMEOUT, watch=operator.process)
    return operator, grace


def test_an_operator_never_ready_stops_on_sigterm_within_the_grace_period(
        control_plane: ControlPlane, release: Release, jobs_namespace: str, tmp_path: Path) -> None:
    """What the kubelet does on a rollout of a misconfigured operator: SIGTERM, then SIGKILL after
    terminationGracePeriodSeconds. It exits 0 (a graceful stop) well before."""
    operator, grace = _never_ready(control_plane, shared=release, jobs=jobs_namespace, tmp=tmp_path)
    began = time.monotonic()
    code = operator.process.stop(timeout=grace)
    took = time.monotonic() - began
    assert code == 0, operator.process.output()[-3000:]
    assert took < grace, f"stopped in {took:.1f} s; the chart's grace period is {grace} s"


def test_an_operator_whose_kopf_gave_up_exits_within_the_grace_period(
        control_plane: ControlPlane, release: Release, jobs_namespace: str, tmp_path: Path) -> None:
    """kopf retries a forbidden list 9 times (about 55 s), then fails as a whole; a watch it was
    re-authenticating could then hang its exit for ever, SIGTERM included (the pod terminating until
    the kubelet's SIGKILL, or, not signalled, never restarted: /healthz stayed 200). Now the process
    exits 1 (kopf's error, or kopf left behind, `run.KopfStuck`) within the grace period of kopf's
    failure, SIGTERM or not.

    The hang came in 3 of 4 runs of the old code, so this test alone does not always catch its return;
    ``tests/podmortem_operator/test_kopf_stop.py`` does, with a kopf that ignores cancellation."""
    operator, grace = _never_ready(control_plane, shared=release, jobs=jobs_namespace, tmp=tmp_path)
    failed = "Multidimensional multitasker has failed"
    operator.process.wait_log(failed, timeout=120)
    began = time.monotonic()
    if operator.process.alive():
        operator.process.proc.terminate()
    try:
        code = operator.process.proc.wait(grace)
    except subprocess.TimeoutExpired:
        operator.process.proc.kill()
        tail = operator.process.output()[-3000:]
        raise AssertionError(f"still running {grace} s after kopf failed:\n{tail}") from None
    took = time.monotonic() - began
    assert code == 1, (code, operator.process.output()[-3000:])
    assert took < grace, took
