"""The emulated cluster, a fake node agent and the real operator on threads of their own, for benchmarks.

A copy of the end-to-end tests' harness (tests/handlers/harness.py) plus the pod
helpers, so that bench/ does not import tests/. kopf runs on its own loop and
thread; the cluster (kmock, the emulated kubelet, an agent evidence server) on
another.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import kmock
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from podmortem.control.settings import AgentSettings, ForeignKind, OperatorSettings, PrometheusSettings
from podmortem.handlers import runtime
from podmortem.logs.settings import FollowSettings
from podmortem.reports.evidence import PodEvidence
from podmortem.testing import PodLogsApi

T = TypeVar("T")
NODE = "node-a"
AGENT_TOKEN = "s3cret-agent-token"
AGENT_NS = "podmortem"
AGENT_LABELS = {"app.kubernetes.io/name": "podmortem", "app.kubernetes.io/component": "agent"}


class AgentDouble:
    """The node agent's evidence endpoint: a real aiohttp server with the agent's token check."""

    def __init__(self) -> None:
        self.evidence: dict[str, PodEvidence] = {}
        self.requests: list[str] = []
        self.available = True
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _serve(self, request: web.Request) -> web.Response:
        self.requests.append(request.match_info["uid"])
        if request.headers.get("Authorization") != f"Bearer {AGENT_TOKEN}":
            return web.json_response({"error": "bad token"}, status=401)
        if not self.available:
            return web.json_response({"error": "agent is starting"}, status=503)
        found = self.evidence.get(request.match_info["uid"])
        if found is None:
            return web.json_response({"error": "unknown pod"}, status=404)
        return web.Response(body=found.model_dump_json(by_alias=True), content_type="application/json")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/pods/{uid}/evidence", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.loop = asyncio.new_event_loop()
        self.api: PodLogsApi
        self.url = ""
        self.agent = AgentDouble()
        self._cluster_ready = threading.Event()
        self._cluster_stop: asyncio.Event | None = None
        self._cluster_thread = threading.Thread(target=self._cluster_main, name="cluster", daemon=True)
        self._operator_thread: threading.Thread | None = None
        self._operator_stop = threading.Event()
        self.running: list[runtime.Running] = []
        self.operator_error: BaseException | None = None

    # --- the cluster's own thread --------------------------------------------------------------

    def _cluster_main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._cluster())

    async def _cluster(self) -> None:
        self._cluster_stop = asyncio.Event()
        api = PodLogsApi()
        api.resources["podmortem.io/v1alpha1/trainingjobs"] = kmock.ResourceInfo(
            kind="TrainingJob",
            namespaced=True,
            subresources={"status"},
            verbs={"get", "list", "watch", "create", "patch", "delete"},
        )
        api.resources["batch/v1/jobs"] = kmock.ResourceInfo(
            kind="Job", namespaced=True, verbs={"get", "list", "watch", "create", "patch", "delete"}
        )
        api.resources["v1/pods"] = kmock.ResourceInfo(
            kind="Pod",
            namespaced=True,
            subresources={"status", "log"},
            verbs={"get", "list", "watch", "create", "patch", "delete"},
        )
        # kopf waits for namespaces to be discoverable even when it runs cluster-wide (and never lists them).
        api.resources["v1/namespaces"] = kmock.ResourceInfo(
            kind="Namespace", namespaced=False, verbs={"get", "list", "watch"}
        )
        api.resources["coordination.k8s.io/v1/leases"] = kmock.ResourceInfo(
            kind="Lease",
            namespaced=True,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
        )
        api.resources["v1/events"] = kmock.ResourceInfo(
            kind="Event", namespaced=True, verbs={"create", "list"}
        )
        async with api, kmock.Server(api) as server:
            self.api = api
            self.url = str(server.url).rstrip("/")
            await self.agent.start()
            self._cluster_ready.set()
            await self._cluster_stop.wait()
            await self.agent.stop()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the cluster's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def sync(self, fn: Callable[[], T]) -> T:
        """Run a plain function on the cluster's loop (kmock's state is not thread-safe)."""

        async def wrap() -> T:
            return fn()

        return self.call(wrap())

    # --- the operator's own thread --------------------------------------------------------------

    def settings(self, **overrides: Any) -> OperatorSettings:
        token = self.tmp / "agent-token"
        token.write_text(AGENT_TOKEN + "\n")
        base: dict[str, Any] = dict(
            agent=AgentSettings(
                namespace=AGENT_NS,
                port=self.agent.port,
                token_path=token,
                timeout_s=1.0,
                label_selector=",".join(f"{k}={v}" for k, v in AGENT_LABELS.items()),
            ),
            prometheus=PrometheusSettings(url=None),
            store_dir=self.tmp / "store",
            foreign_kinds=(ForeignKind("batch", "v1", "jobs"),),
            listen_host="127.0.0.1",
            metrics_port=0,
            health_port=0,
            log_http_port=0,
            stale_log_threshold_s=600.0,
        )
        base.update(overrides)
        return OperatorSettings(**base)

    def start_operator(self, settings: OperatorSettings) -> runtime.Running:
        config = Configuration(host=self.url)
        follow = FollowSettings(read_timeout_s=5.0, backoff_min_s=0.05, backoff_max_s=0.2)

        def main() -> None:
            try:
                asyncio.run(
                    runtime.run_operator(
                        settings=settings,
                        api_config=config,
                        server=self.url,
                        stop_flag=self._operator_stop,
                        running=self.running,
                        follow_settings=follow,
                    )
                )
            except BaseException as exc:  # reported by the fixture
                self.operator_error = exc

        self._operator_thread = threading.Thread(target=main, name="operator", daemon=True)
        self._operator_thread.start()
        return self.wait(lambda: self.running[0] if self.running else None, what="operator start")

    def delete(self, path: str) -> None:
        self.call(self._request("DELETE", path))

    def http_get(self, url: str) -> tuple[int, bytes]:
        """A plain GET from the test's thread (the operator's own servers)."""
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def stop_operator(self) -> None:
        self._operator_stop.set()
        if self._operator_thread is not None:
            self._operator_thread.join(30)

    def start(self) -> None:
        self._cluster_thread.start()
        if not self._cluster_ready.wait(30):
            raise RuntimeError("the emulated cluster did not start")

    def stop(self) -> None:
        self.stop_operator()
        if self._cluster_stop is not None:
            self.loop.call_soon_threadsafe(self._cluster_stop.set)
        self._cluster_thread.join(30)
        self.loop.close()

    # --- API helpers (run on the cluster loop) --------------------------------------------------

    async def _request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        client = self.api.servers[0].client
        data = json.dumps(body) if body is not None else None
        async with client.request(method, path, data=data, headers={"Content-Type": content_type}) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {text[:300]}")
            return json.loads(text) if text else {}

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call(self._request("POST", path, body))

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call(self._request("PATCH", path, body, "application/merge-patch+json"))

    def get(self, path: str) -> dict[str, Any] | None:
        async def get() -> dict[str, Any] | None:
            try:
                return await self._request("GET", path)
            except RuntimeError:
                return None

        return self.call(get())

    def objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            out = []
            for (res, ns, _name), obj in self.api.objects.items():
                if (
                    f"{res.group}/{res.version}/{res.plural}".lstrip("/") == resource
                    and not obj.deleted
                    and (namespace is None or ns == namespace)
                ):
                    out.append(json.loads(json.dumps(obj.raw)))
            return out

        return self.sync(read)

    def stored(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as kmock stores it (GET of a pod answers with the emulated kubelet's view)."""
        return next((o for o in self.objects(resource, namespace) if o["metadata"]["name"] == name), None)

    def events_for(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.objects("v1/events") if e.get("involvedObject", {}).get("name") == name]

    def add_agent_pod(self) -> None:
        self.create(
            f"/api/v1/namespaces/{AGENT_NS}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"agent-{NODE}", "namespace": AGENT_NS, "labels": AGENT_LABELS},
                "spec": {"nodeName": NODE, "containers": [{"name": "agent", "image": "podmortem"}]},
                "status": {"phase": "Running", "podIP": "127.0.0.1"},
            },
        )

    @staticmethod
    def wait(probe: Callable[[], T | None], *, what: str, timeout: float = 20.0) -> T:
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.02)


@contextlib.contextmanager
def harness(tmp: Path) -> Iterator[Harness]:
    h = Harness(tmp)
    h.start()
    try:
        yield h
    finally:
        h.stop()


RECORDS = Path("/work/shared/data/oom-records")
GIB = 2**30


def evidence_for(uid: str, record_file: str) -> PodEvidence:
    """Agent evidence with a real kernel record and five rising samples."""
    from datetime import UTC, datetime, timedelta

    from podmortem.kernel import oom_parser
    from podmortem.reports.memory import MemorySample

    record = oom_parser.parse_text((RECORDS / record_file).read_text())[0]
    now = datetime.now(UTC)
    samples = [
        MemorySample(
            at=now - timedelta(seconds=10 * (5 - i)),
            usage_bytes=(20 + 2 * i) * GIB,
            limit_bytes=32 * GIB,
            peak_bytes=(21 + 2 * i) * GIB,
        )
        for i in range(5)
    ]
    return PodEvidence(pod_uid=uid, node=NODE, samples=samples, kernel_records=[record])


def run_pod(h: Harness, *, name: str, namespace: str = "default") -> str:
    """Give an existing pod emulated container logs and a Running status; its uid."""
    pod = h.wait(lambda: h.get(f"/api/v1/namespaces/{namespace}/pods/{name}"), what=f"pod {name}")
    emulated = h.sync(lambda: h.api.add_pod(name, namespace=namespace, containers=("trainer",)))
    cid = emulated.containers["trainer"].current.container_id
    h.patch(
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        {
            "spec": {"nodeName": NODE},
            "status": {
                "phase": "Running",
                "startTime": "2024-05-01T10:00:00Z",
                "containerStatuses": [
                    {
                        "name": "trainer",
                        "containerID": cid,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": "2024-05-01T10:00:00Z"}},
                    }
                ],
            },
        },
    )
    return str(pod["metadata"]["uid"])


def kill(h: Harness, *, name: str, namespace: str = "default") -> None:
    """Exit 137, OOMKilled, as the kubelet would report it."""
    from datetime import UTC, datetime

    container = h.sync(lambda: h.api.pods[namespace, name]).containers["trainer"]
    h.sync(lambda: container.terminate(137))
    cid = container.current.container_id
    finished = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    h.patch(
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        {
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "trainer",
                        "containerID": cid,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 137,
                                "reason": "OOMKilled",
                                "containerID": cid,
                                "startedAt": "2024-05-01T10:00:00Z",
                                "finishedAt": finished,
                            }
                        },
                    }
                ],
            }
        },
    )
