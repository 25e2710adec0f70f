"""Build the real image with hack/build-image.sh (podman, a local mmdebstrap base) and run it.

The image is built once per session (a minute or so the first time; podman's layer cache
makes a rebuild of an unchanged tree take seconds) and run the way a cluster runs it:
read-only root filesystem, uid 65532, host network. Skips where podman, mmdebstrap or runc
is missing (hack/ci-install.sh installs them) or where we are not root.

`run_in_image` is meant for other tests too, e.g. running `podmortem operator` from the image
against an API server emulated on the host network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "hack" / "build-image.sh"
CONTAINERS_CONF = ROOT / "hack" / "containers.conf"
LOCK = ROOT / "constraints" / "image.txt"
RECORD = ROOT / "tests" / "fixtures" / "oom-records" / "08-kind-v2-dmesgT-uwsgi-partial"
IMAGE = os.environ.get("PODMORTEM_TEST_IMAGE", "localhost/podmortem:test")
IMAGE_USER = "65532:65532"


def _missing_prerequisites() -> str | None:
    if os.geteuid() != 0:
        return "building the image needs root (mmdebstrap --mode=root, rootful podman)"
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    missing = [tool for tool in ("podman", "mmdebstrap", "runc") if shutil.which(tool, path=search) is None]
    if missing:
        return f"{', '.join(missing)} not installed (hack/ci-install.sh installs podman, mmdebstrap, runc)"
    return None


_SKIP_REASON = _missing_prerequisites()
pytestmark = [
    pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or ""),
    # The first test pays for the build (base included) in its setup.
    pytest.mark.timeout(1200),
]


def podman_env() -> dict[str, str]:
    """The environment to run podman in: this repository's containers.conf (runc, ulimits)."""
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = os.environ.get("PODMORTEM_CONTAINERS_CONF", str(CONTAINERS_CONF))
    return env


def image_command(
    image: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[str | tuple[str | Path, str]] = (),
    name: str | None = None,
    interactive: bool = False,
    entrypoint: str | None = None,
) -> list[str]:
    """The `podman run` command line `run_in_image` uses, for callers that need a Popen.

    Run it with `env=podman_env()`. Read-only root filesystem (podman still puts a tmpfs on
    /tmp, /var/tmp and /run), uid/gid 65532, host network, removed on exit.
    """
    command = ["podman", "run", "--rm", "--read-only", "--user", IMAGE_USER, "--network", "host"]
    if name is not None:
        command += ["--name", name]
    if interactive:
        command.append("--interactive")
    if entrypoint is not None:
        command += ["--entrypoint", entrypoint]
    for key, value in (env or {}).items():
        command += ["--env", f"{key}={value}"]
    for mount in mounts:
        if isinstance(mount, tuple):
            source, target = mount
            mount = f"{Path(source).resolve()}:{target}:ro"
        command += ["--volume", mount]
    return [*command, image, *args]


def run_in_image(
    image: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[str | tuple[str | Path, str]] = (),
    timeout: float = 60,
    input: str | None = None,
    entrypoint: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `args` (after the image's `podmortem` entrypoint) in `image` and wait for it.

    Read-only, uid 65532, host network, `--rm`. `env` becomes the container's --env;
    `mounts` are "HOST:CONTAINER[:OPTIONS]" strings or (host, container) pairs mounted
    read-only. `input` is fed on stdin. Output is captured as text; the exit status is not
    checked. On timeout the container is removed and subprocess.TimeoutExpired raised.
    """
    name = f"podmortem-test-{uuid.uuid4().hex[:12]}"
    command = image_command(
        image, args, env=env, mounts=mounts, name=name, interactive=input is not None, entrypoint=entrypoint
    )
    try:
        return subprocess.run(
            command,
            input=input,
            capture_output=True,
            text=True,
            env=podman_env(),
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        subprocess.run(
            ["podman", "rm", "--force", "--ignore", name], capture_output=True, env=podman_env(), check=False
        )
        raise


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=podman_env(), timeout=120)


@pytest.fixture(scope="module")
def image() -> str:
    return build_image()


def build_image() -> str:
    """Build the image (podman's layer cache makes a rebuild of an unchanged tree take seconds); its tag."""
    result = subprocess.run(
        [str(BUILD_SCRIPT), "--tag", IMAGE], capture_output=True, text=True, timeout=1100, check=False
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-6000:]
        pytest.fail(f"hack/build-image.sh failed ({result.returncode}):\n{output}", pytrace=False)
    return IMAGE


def test_version(image: str) -> None:
    result = run_in_image(image, ["--version"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "podmortem 0.1.0"


def test_operator_help(image: str) -> None:
    result = run_in_image(image, ["operator", "--help"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: podmortem operator")
    assert "--kubeconfig" in result.stdout


def test_diagnose_reads_a_kernel_record_on_stdin(image: str) -> None:
    truth = json.loads(RECORD.with_suffix(".json").read_text())
    log = RECORD.with_suffix(".log").read_text()

    result = run_in_image(image, ["diagnose", "--json", "-"], input=log)
    assert result.returncode == 0, result.stderr
    (report,) = json.loads(result.stdout)["reports"]
    assert report["verdict"] == "memcg-limit"
    kill = report["kill"]
    assert (kill["pid"], kill["comm"]) == (truth["killed_pid"], truth["killed_comm"])
    assert kill["constraint"] == truth["constraint"]
    assert (kill["pod_uid"], kill["container_id"]) == (truth["pod_uid"], truth["container_id"])
    assert report["cgroup"]["version"] == truth["cgroup_version"]

    text = run_in_image(image, ["diagnose"], input=log)
    assert text.returncode == 0, text.stderr
    assert truth["killed_comm"] in text.stdout
    assert str(truth["killed_pid"]) in text.stdout


def test_diagnose_without_a_kill_exits_3(image: str) -> None:
    no_kill = "[    1.000000] Linux version 6.1.0 (nothing to see here)\n"
    result = run_in_image(image, ["diagnose", "-"], input=no_kill)
    assert result.returncode == 3, (result.stdout, result.stderr)


def test_image_runs_as_uid_65532_by_default(image: str) -> None:
    inspect = _podman("image", "inspect", "--format", "{{.Config.User}}", image)
    assert inspect.returncode == 0, inspect.stderr
    assert inspect.stdout.strip() == IMAGE_USER
    # Without --user: the image's own USER applies.
    probe_uid = ["--entrypoint", "python3", image, "-c", "import os; print(os.getuid(), os.getgid())"]
    probe = _podman("run", "--rm", "--read-only", "--network", "host", *probe_uid)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["65532", "65532"]


_LIST_DISTRIBUTIONS = """
import importlib.metadata as md, importlib.util, json, re
print(json.dumps({
    "dists": sorted({re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() + "==" + d.version
                     for d in md.distributions()}),
    "importable": [m for m in ("torch", "kmock", "pytest", "numpy") if importlib.util.find_spec(m)],
}))
"""


def _image_contents(image: str) -> dict[str, list[str]]:
    result = run_in_image(image, ["-c", _LIST_DISTRIBUTIONS], entrypoint="python3")
    assert result.returncode == 0, result.stderr
    contents: dict[str, list[str]] = json.loads(result.stdout)
    return contents


def test_image_has_no_test_or_trainer_packages(image: str) -> None:
    contents = _image_contents(image)
    names = {pin.split("==")[0] for pin in contents["dists"]}
    assert not names & {"torch", "kmock", "pytest", "numpy", "hypothesis"}
    assert contents["importable"] == []
    assert {"podmortem", "kopf", "aiohttp", "kubernetes-asyncio", "pydantic"} <= names


def test_installed_versions_are_exactly_the_lock(image: str) -> None:
    lines = [line.strip() for line in LOCK.read_text().splitlines()]
    locked = {line for line in lines if line and not line.startswith("#")}
    installed = {
        pin
        for pin in _image_contents(image)["dists"]
        if pin.split("==")[0] not in {"podmortem", "pip", "setuptools", "wheel"}
    }
    assert installed == locked


def test_the_operator_from_the_image_logs_in_and_reports(image: str, tmp_path: Path) -> None:
    """`podmortem operator` from the image, read-only as uid 65532 on the host network, logs in to the
    emulated API over TLS with a mounted kubeconfig and writes a TrainingJob's failure report."""
    pytest.importorskip("cryptography")
    from tests.cli import entrypoints as ep

    from podmortem_demo.emulated.tls import make_pki
    from podmortem_demo.harness import harness

    pki = make_pki()
    with harness(tmp_path / "cluster", pki=pki, tokens={"admin", "operator"}, admin_token="admin") as h:
        h.add_agent_pod()
        config = tmp_path / "config"
        config.mkdir()
        ep.write_kubeconfig(config / "kubeconfig", server=h.url, token="operator", ca_pem=pki.ca_pem)
        (config / "agent-token").write_text("s3cret-agent-token")
        store = tmp_path / "store"
        store.mkdir()
        os.chown(store, 65532, 65532)
        env = {k: v for k, v in ep.operator_env(h, tmp_path).items() if k.startswith("PODMORTEM_")}
        env.update(PODMORTEM_LOG_STORE_DIR="/var/lib/podmortem/logs",
                   PODMORTEM_AGENT_TOKEN_FILE="/etc/podmortem/agent-token")
        name = f"podmortem-test-{uuid.uuid4().hex[:8]}"
        command = image_command(image, ["operator", "--kubeconfig", "/etc/podmortem/kubeconfig"], env=env,
                                mounts=[(config, "/etc/podmortem"), f"{store}:/var/lib/podmortem/logs:rw"],
                                name=name)
        log = tmp_path / "operator.log"
        process = ep.Process(command, podman_env(), log).start()
        try:
            process.wait_http(f"http://127.0.0.1:{env['PODMORTEM_HEALTH_PORT']}/readyz", timeout=120)
            report = ep.follow_to_report(h, "from-the-image")
            assert report["verdict"] == "memcg-limit"
            assert "connected to the API server at https://127.0.0.1" in process.output()
        finally:
            _podman("stop", "--time", "20", name)
            process.stop()
