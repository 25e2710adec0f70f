"""The operator's pod spec with the sidecar, run by podman (``podman kube play``), OOM-killed for real.

The TrainingJob's pod is made by the operator's own `jobs.build_pod` with the sidecar injected,
then played by podman with runc and this repository's containers.conf, as the image tests run it:
the trainer container (the image's python, a forked worker) has a 160 MiB memory limit and grows
until the kernel kills it; the sidecar, from the same image, watches it through the shared PID
namespace and writes its evidence. What podman here cannot do, and how the test stands in:

- podman 4.3 runs every init container to its end before the others, so a native sidecar (an
  init container with ``restartPolicy: Always``) would hold the pod forever: the sidecar becomes an
  ordinary container of the pod, the same spec otherwise;
- podman has no termination messages: the sidecar's ``--termination-log`` is a file in a volume
  the test reads, as the kubelet would read ``/dev/termination-log``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podmortem.operator import jobs
from podmortem.operator.settings import SidecarInjectionSettings
from podmortem.reports import sidecar_evidence as ev

from .test_image_build import _SKIP_REASON, IMAGE_USER, build_image, podman_env

pytestmark = [pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or ""),
              pytest.mark.timeout(1200), pytest.mark.kernel]

LIMIT_MIB = 160
UID = int(IMAGE_USER.split(":")[0])

#: Holds 40 MiB, forks a worker holding 24 MiB, lets the sidecar sample both, then grows until killed.
TRAINER = r"""
import os, time
MIB = 1 << 20
def hold(mib):
    b = bytearray(mib * MIB)
    b[::4096] = b"x" * len(b[::4096])
    return b
held = [hold(40)]
if os.fork() == 0:
    mine = hold(24)
    while True:
        time.sleep(1)
time.sleep(6)
while True:
    held.append(hold(4))
    time.sleep(0.02)
"""


_B64 = base64.b64encode(TRAINER.encode()).decode()


def _pod(image: str, evidence_dir: Path) -> dict[str, Any]:
    trainingjob = {
        "metadata": {"name": "kubeplay", "namespace": "default", "uid": "tj-uid"},
        "spec": {"sidecar": True, "template": {"spec": {
            "securityContext": {"runAsUser": UID, "runAsGroup": UID, "runAsNonRoot": True},
            "containers": [{"name": "trainer", "image": image, "imagePullPolicy": "Never",
                            # base64: podman 4.3's YAML reader chokes on the script's newlines and quotes
                            "command": ["python3", "-c", f"import base64; exec(base64.b64decode('{_B64}'))"],
                            "resources": {"limits": {"memory": f"{LIMIT_MIB}Mi"}}}],
        }}},
    }
    settings = SidecarInjectionSettings(trainingjobs=True, image=image, pull_policy="Never",
                                        comm="python.*")
    pod = jobs.build_pod(trainingjob, sidecar=settings)
    spec = pod["spec"]
    [sidecar] = [c for c in spec.get("initContainers", []) if c["name"] == "podmortem-sidecar"]
    assert spec["shareProcessNamespace"] is True and sidecar["restartPolicy"] == "Always"
    # What podman 4.3 cannot run as the kubelet would (see the module's docstring).
    spec["initContainers"] = [c for c in spec["initContainers"] if c is not sidecar]
    sidecar = {k: v for k, v in sidecar.items() if k != "restartPolicy"}
    sidecar["command"] = [*sidecar["command"], "--termination-log", "/evidence/termination-log",
                          "--interval", "0.5"]
    mount = {"name": "evidence", "mountPath": "/evidence"}
    sidecar["volumeMounts"] = [*sidecar.get("volumeMounts", []), mount]
    spec["containers"].append(sidecar)
    spec["volumes"] = [*spec.get("volumes", []),
                       {"name": "evidence", "hostPath": {"path": str(evidence_dir), "type": "Directory"}}]
    spec["restartPolicy"] = "Never"
    pod["metadata"] = {"name": f"podmortem-kubeplay-{uuid.uuid4().hex[:8]}"}
    return pod


@pytest.fixture(scope="module")
def image() -> str:
    return build_image()


@pytest.fixture
def evidence_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="podmortem-kubeplay-"))
    os.chown(path, UID, UID)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _podman(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """podman, run in ``cwd``: conmon leaves a file named ``oom`` in its working directory when the
    kernel OOM-kills a container, which must not land in the repository."""
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=podman_env(),
                          timeout=timeout, check=False, cwd=cwd)


def test_the_operators_pod_with_the_sidecar_under_podman_leaves_the_evidence_of_a_real_kill(
    image: str, evidence_dir: Path, tmp_path: Path
) -> None:
    pod = _pod(image, evidence_dir)
    name = pod["metadata"]["name"]
    spec_file = tmp_path / "pod.yaml"
    spec_file.write_text(json.dumps(pod))  # JSON is YAML, and podman's YAML reader takes it as written
    played = _podman("kube", "play", str(spec_file), cwd=tmp_path)
    try:
        if played.returncode != 0:
            pytest.fail(f"podman kube play failed:\n{played.stdout}\n{played.stderr}"[-4000:], pytrace=False)
        message = evidence_dir / "termination-log"
        deadline = time.monotonic() + 120
        while not message.exists() or not message.read_text().strip():
            assert time.monotonic() < deadline, _podman("pod", "logs", name, cwd=tmp_path).stdout[-3000:]
            time.sleep(0.2)
        doc = ev.parse(message.read_text())
        trainer = json.loads(_podman("inspect", f"{name}-trainer", cwd=tmp_path).stdout)[0]["State"]
        assert trainer["OOMKilled"] or trainer["ExitCode"] == 137, trainer
        assert doc.kill is not None and doc.kill.victim.comm.startswith("python"), doc
        assert doc.oom.after is not None and doc.oom.after >= 1 and (doc.oom.before or 0) < doc.oom.after
        assert doc.mem is not None and doc.mem.limit == LIMIT_MIB << 20
        assert doc.top and any(p.role == "worker" for p in doc.top), doc.top
    finally:
        _podman("kube", "down", str(spec_file), cwd=tmp_path)
        _podman("pod", "rm", "--force", "--ignore", name, cwd=tmp_path)
