"""The demo kubelet: real processes as pods, their output as the pod log, their exit as the pod status."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest

from podmortem.logs import timestamps
from podmortem_demo import kubelet as kubelet_mod
from podmortem_demo import sandbox, watchdog
from podmortem_demo.cluster import DemoApi
from podmortem_demo.kubelet import DemoKubelet, KubeletSettings, PodRun

MIB = 2**20
#: Grows by 4 MiB steps to 400 MiB, touching every page; far past the tests' 64 Mi limits.
GROW = (
    "import time\nx = []\nfor i in range(100):\n"
    "    x.append(bytearray(4 << 20)); time.sleep(0.002)\nprint('survived')"
)


def test_command_resolution_env_and_limits() -> None:
    container = {
        "name": "t",
        "command": ["python", "-m", "x"],
        "args": ["--a", 1],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {}}],
        "resources": {"limits": {"memory": "64Mi"}},
    }
    assert kubelet_mod.resolve_argv(container) == [sys.executable, "-m", "x", "--a", "1"]
    env = kubelet_mod.container_env(container, {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "A": "1", "PYTHONUNBUFFERED": "1"}
    assert kubelet_mod.memory_limit(container) == 64 * MIB
    assert kubelet_mod.memory_limit({"name": "t"}) is None
    with pytest.raises(ValueError, match="no command"):
        kubelet_mod.resolve_argv({"name": "t", "image": "busybox"})


def test_exit_codes_and_reasons_as_a_runtime_reports_them() -> None:
    assert kubelet_mod.exit_code_of(-9) == 137
    assert kubelet_mod.exit_code_of(3) == 3
    assert kubelet_mod.termination_reason(137, oom_killed=True) == "OOMKilled"
    assert kubelet_mod.termination_reason(1, oom_killed=True) == "OOMKilled"  # a worker was the victim
    assert kubelet_mod.termination_reason(0, oom_killed=False) == "Completed"
    assert kubelet_mod.termination_reason(137, oom_killed=False) == "Error"
    assert (
        kubelet_mod.container_id("u", "c")
        == kubelet_mod.container_id("u", "c")
        != kubelet_mod.container_id("v", "c")
    )


class Node:
    """The emulated API and a kubelet on the test's loop, with a small client."""

    def __init__(self, api: DemoApi, url: str, kubelet: DemoKubelet, session: aiohttp.ClientSession) -> None:
        self.api, self.url, self.kubelet, self.session = api, url, kubelet, session

    async def create_pod(self, name: str, container: dict[str, Any]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [container]},
        }
        async with self.session.post(
            f"{self.url}/api/v1/namespaces/default/pods",
            data=json.dumps(body),
            headers={"Content-Type": "application/json"},
        ) as resp:
            assert resp.status < 400, await resp.text()

    async def run(self, name: str, container: dict[str, Any]) -> tuple[PodRun, dict[str, Any]]:
        await self.create_pod(name, container)
        run = await self.kubelet.wait_for("default", name, within_s=10)
        await asyncio.wait_for(run.done.wait(), 60)
        return run, await self.get(f"/api/v1/namespaces/default/pods/{name}")

    async def get(self, path: str) -> Any:
        async with self.session.get(self.url + path) as resp:
            assert resp.status == 200, await resp.text()
            return json.loads(await resp.read()) if "json" in resp.content_type else await resp.read()

    async def log(self, name: str) -> bytes:
        async with self.session.get(
            f"{self.url}/api/v1/namespaces/default/pods/{name}/log", params={"timestamps": "true"}
        ) as resp:
            assert resp.status == 200
            return await resp.read()


async def _node(
    tmp_path: Path, cgroup_root: sandbox.CgroupRoot | None, settings: KubeletSettings
) -> AsyncIterator[Node]:
    api = DemoApi()
    async with api, kmock.Server(api) as server, aiohttp.ClientSession() as session:
        url = str(server.url).rstrip("/")
        async with DemoKubelet(
            api=api, url=url, settings=settings, cgroup_root=cgroup_root, workdir=tmp_path
        ) as kubelet:
            yield Node(api, url, kubelet, session)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    async for n in _node(tmp_path, None, KubeletSettings(cut_after_lines=(3,))):
        yield n


async def test_a_pod_runs_logs_with_a_cut_and_completes(node: Node) -> None:
    script = "import sys\nfor i in range(10):\n    print(f'line {i}')\nprint('to stderr', file=sys.stderr)"
    run, pod = await node.run("p", {"name": "main", "command": ["python", "-c", script]})

    assert pod["spec"]["nodeName"] == "demo-node"  # bound by the kubelet
    status = pod["status"]
    assert status["phase"] == "Succeeded" and status["podIP"] == "127.0.0.1"
    cs = status["containerStatuses"][0]
    assert cs["containerID"] == run.container_id
    assert cs["state"]["terminated"]["exitCode"] == 0
    assert cs["state"]["terminated"]["reason"] == "Completed"
    texts = [t for _, t in run.produced]
    assert sorted(texts) == sorted([f"line {i}".encode() for i in range(10)] + [b"to stderr"])
    stamps = [ts for ts, _ in run.produced]
    assert stamps == sorted(stamps)

    # The first read is cut after 3 lines, inside the 4th; the next one serves the whole log.
    cut = await node.log("p")
    assert cut.count(b"\n") == 3 and not cut.endswith(b"\n")
    assert run.cuts_injected == 1 and run.cuts_served == 1
    whole = await node.log("p")
    served = [line.split(b" ", 1) for line in whole.splitlines()]
    assert [(timestamps.parse_ns(ts), text) for ts, text in served] == run.produced
    assert all(len(ts.split(b".")[1]) == 10 for ts, _ in served)  # 9 fractional digits + "Z"


async def test_a_failing_command_and_a_pod_without_command(node: Node) -> None:
    run, pod = await node.run("fails", {"name": "main", "command": ["python", "-c", "raise SystemExit(3)"]})
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (pod["status"]["phase"], term["exitCode"], term["reason"]) == ("Failed", 3, "Error")

    run, pod = await node.run("image-only", {"name": "main", "image": "busybox"})
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == "CreateContainerError"
    assert "no command" in pod["status"]["message"] and run.error


async def test_without_a_cgroup_the_watchdog_enforces_the_limit(node: Node) -> None:
    run, pod = await node.run(
        "grows",
        {"name": "main", "command": ["python", "-c", GROW], "resources": {"limits": {"memory": "64Mi"}}},
    )
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (137, "OOMKilled")
    assert run.watchdog is not None and run.watchdog.kill is not None
    assert run.watchdog.kill.pid == run.pid and run.watchdog.kill.total_pss_bytes > 64 * MIB
    assert b"survived" not in [t for _, t in run.produced]


PRINT_ENV = f"import os; print(repr(os.environ.get({watchdog.PSS_LIMIT_ENV!r})))"


async def test_without_a_cgroup_the_container_is_told_its_limit_is_enforced_on_pss(node: Node) -> None:
    """So the trainer reports the PSS sum the watchdog enforces, not the host cgroup it sits in."""
    limited = {
        "name": "main",
        "command": ["python", "-c", PRINT_ENV],
        "resources": {"limits": {"memory": "64Mi"}},
    }
    run, _ = await node.run("told", limited)
    assert [t for _, t in run.produced] == [repr(str(64 * MIB)).encode()]
    run, _ = await node.run("unlimited", {"name": "main", "command": ["python", "-c", PRINT_ENV]})
    assert [t for _, t in run.produced] == [b"''"]


@pytest.mark.kernel
async def test_in_a_real_cgroup_the_container_is_not_told_about_pss(
    tmp_path: Path, cgroup_root: sandbox.CgroupRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(watchdog.PSS_LIMIT_ENV, "1")  # even where the kubelet's own environment has it
    async for node in _node(tmp_path, cgroup_root, KubeletSettings(cut_after_lines=())):
        run, _ = await node.run(
            "real",
            {
                "name": "main",
                "command": ["python", "-c", PRINT_ENV],
                "resources": {"limits": {"memory": "64Mi"}},
            },
        )
        assert [t for _, t in run.produced] == [b"None"]


@pytest.mark.kernel
async def test_in_a_real_cgroup_the_kernel_kills_and_the_status_says_oomkilled(
    tmp_path: Path, cgroup_root: sandbox.CgroupRoot
) -> None:
    async for node in _node(tmp_path, cgroup_root, KubeletSettings(cut_after_lines=())):
        run, pod = await node.run(
            "grows",
            {"name": "main", "command": ["python", "-c", GROW], "resources": {"limits": {"memory": "64Mi"}}},
        )
        term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (term["exitCode"], term["reason"]) == (137, "OOMKilled")
        assert run.cgroup is not None and run.oom_kills >= 1
        assert run.cgroup_path == "/" + run.cgroup.name
        assert run.peak_bytes is not None and run.peak_bytes <= 64 * MIB
        assert run.watchdog is None
        cgroup_dir = run.cgroup.path
    assert not cgroup_dir.exists()  # removed when the kubelet stopped
