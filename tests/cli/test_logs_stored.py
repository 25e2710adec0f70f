"""The stored-copy path's pure parts: how the operator is found from what the API server lists, and how
the log server's answer is split into lines (to stdout) and the store's own lines (to stderr).

The whole path, through the real API server's port-forward with real RBAC, is
tests/controlplane/test_logs_cli_real.py.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from podmortem.cli import logs_stored
from podmortem.logs.following.sinks import StdoutSink

LABELS = {"app.kubernetes.io/part-of": "podmortem", "app.kubernetes.io/component": "operator"}


def service(namespace: str, name: str = "pm-podmortem-operator", *, target: Any = "http",
            app_protocol: str = "http") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "labels": LABELS},
            "spec": {"selector": {"app.kubernetes.io/instance": "pm",
                                  "app.kubernetes.io/component": "operator"},
                     "ports": [{"name": "metrics", "port": 9090, "targetPort": "metrics"},
                               {"name": "http", "port": 8080, "targetPort": target,
                                "appProtocol": app_protocol}]}}


def pod(name: str, *, ready: bool = True, phase: str = "Running", port: int = 8081) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"containers": [{"name": "operator",
                                     "ports": [{"name": "http", "containerPort": port},
                                               {"name": "metrics", "containerPort": 9090}]}]},
            "status": {"phase": phase,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


@dataclass
class FakeApi:
    """Answers GETs by path; records what was asked."""

    answers: dict[str, tuple[int, Any]]
    asked: list[tuple[str, dict[str, str] | None]] = field(default_factory=list)

    async def get(self, path: str, query: dict[str, str] | None = None) -> tuple[int, Any]:
        self.asked.append((path, query))
        return self.answers.get(path, (404, {"message": f"{path} not found"}))


async def test_found_across_namespaces_a_ready_pod_and_its_named_port() -> None:
    api = FakeApi({
        "/api/v1/services": (200, {"items": [service("tools", app_protocol="https")]}),
        "/api/v1/namespaces/tools/pods": (200, {"items": [pod("op-b", ready=False), pod("op-a", port=9443),
                                                          pod("op-c", phase="Pending")]}),
    })
    target = await logs_stored.find_operator(api, namespace=None)  # type: ignore[arg-type]
    assert target == logs_stored.OperatorTarget("tools", "pm-podmortem-operator", "op-a", 9443, "https")
    assert str(target) == "tools/pm-podmortem-operator"
    assert api.asked[0] == ("/api/v1/services", {"labelSelector": logs_stored.SERVICE_LABELS})
    assert api.asked[1][1] == {"labelSelector": "app.kubernetes.io/component=operator,"
                                                "app.kubernetes.io/instance=pm"}


async def test_a_user_who_may_not_list_services_everywhere_looks_in_podmortem() -> None:
    api = FakeApi({
        "/api/v1/services": (403, {"message": "forbidden"}),
        "/api/v1/namespaces/podmortem/services": (200, {"items": [service("podmortem", target=8080)]}),
        "/api/v1/namespaces/podmortem/pods": (200, {"items": [pod("op", ready=False)]}),
    })
    target = await logs_stored.find_operator(api, namespace=None)  # type: ignore[arg-type]
    assert (target.namespace, target.pod, target.port, target.scheme) == ("podmortem", "op", 8080, "http")


@pytest.mark.parametrize(("answers", "namespace", "message"), [
    ({"/api/v1/services": (200, {"items": []})}, None,
     "no podmortem operator found: no Service labelled app.kubernetes.io/part-of=podmortem,"
     "app.kubernetes.io/component=operator in any namespace"),
    ({"/api/v1/services": (200, {"items": [service("a"), service("b")]})}, None,
     "podmortem operators in several namespaces (a, b): choose one with --operator-namespace"),
    ({"/api/v1/namespaces/x/services": (403, {"message": 'services is forbidden: User "u" cannot list'})},
     "x",
     'cannot look for the podmortem operator in namespace x: HTTP 403: services is forbidden: User "u"'),
    ({"/api/v1/namespaces/x/services": (200, {"items": [service("x")]}),
      "/api/v1/namespaces/x/pods": (200, {"items": [pod("op", phase="Pending")]})}, "x",
     "the podmortem operator (x/pm-podmortem-operator) has no running pod"),
])
async def test_what_goes_wrong_is_said(answers: dict[str, tuple[int, Any]], namespace: str | None,
                                       message: str) -> None:
    with pytest.raises(logs_stored.StoredCopyError) as caught:
        await logs_stored.find_operator(FakeApi(answers), namespace=namespace)  # type: ignore[arg-type]
    assert message in str(caught.value)


class Chunks:
    """A response body handing out ``data`` in the given pieces."""

    def __init__(self, data: bytes, cuts: list[int]) -> None:
        edges = [0, *sorted(set(cuts)), len(data)]
        self._pieces = [data[a:b] for a, b in itertools.pairwise(edges) if b > a]

    async def readany(self) -> bytes:
        return self._pieces.pop(0) if self._pieces else b""


class Out:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def flush(self) -> None:
        pass


STORED = (b"2024-05-01T12:00:00.000000001Z epoch 0\r progress\n"
          b"2024-05-01T12:00:00.000000002Z \xff\xfe not utf-8\n"
          b"--- podmortem: lines may be missing here (rotation) between a and b ---\n"
          b"2024-05-01T12:00:01.000000000Z --- podmortem: a line the workload printed ---\n"
          b"2024-05-01T12:00:02.000000000Z \n"
          b"--- podmortem: end of log (pod-deleted) ---\n")


@pytest.mark.parametrize("seed", range(20))
async def test_lines_to_stdout_and_the_stores_own_to_notes_however_the_answer_is_cut(seed: int) -> None:
    rng = random.Random(seed)
    body = Chunks(STORED, [rng.randrange(len(STORED)) for _ in range(rng.randrange(8))])
    out = Out()
    notes: list[str] = []
    sink = StdoutSink(out, timestamps=False, prefix=False)  # type: ignore[arg-type]
    await logs_stored._print(body, container="main", sink=sink, note=notes.append)  # type: ignore[arg-type]
    sink.flush()
    assert bytes(out.data) == (b"epoch 0\r progress\n\xff\xfe not utf-8\n"
                               b"--- podmortem: a line the workload printed ---\n\n")
    assert notes == ["lines may be missing here (rotation) between a and b", "end of log (pod-deleted)"]


async def test_a_long_line_in_many_chunks_is_printed_whole() -> None:
    line = b"2024-05-01T12:00:00.000000001Z " + b"x" * (1 << 20) + b"\n"
    data = line + b"2024-05-01T12:00:00.000000002Z after\n"
    body = Chunks(data, list(range(4096, len(data), 4096)))
    out = Out()
    sink = StdoutSink(out, timestamps=True, prefix=False)  # type: ignore[arg-type]
    await logs_stored._print(body, container="main", sink=sink, note=print)  # type: ignore[arg-type]
    sink.flush()
    assert bytes(out.data) == data


async def test_the_api_reader_reads_through_an_api_session_within_its_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from aiohttp import web

    from podmortem.kube.config import ClusterAccess
    from podmortem.kube.session import ApiSession

    async def services(request: web.Request) -> web.Response:
        assert request.headers.get("Authorization") == "Bearer user"
        assert request.query.get("labelSelector") == "a=b"
        return web.json_response({"items": [{"metadata": {"name": "x" * 100}}]})

    app = web.Application()
    app.router.add_get("/api/v1/services", services)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    access = ClusterAccess(server=f"http://127.0.0.1:{runner.addresses[0][1]}", authorization="Bearer user")
    try:
        async with ApiSession(access) as api:
            reader = logs_stored.ApiReader(api)
            status, body = await reader.get("/api/v1/services", {"labelSelector": "a=b"})
            assert status == 200 and body["items"][0]["metadata"]["name"] == "x" * 100
            monkeypatch.setattr(logs_stored, "API_ANSWER_MAX_BYTES", 64)
            with pytest.raises(logs_stored.StoredCopyError, match="over 64 bytes"):
                await reader.get("/api/v1/services", {"labelSelector": "a=b"})
    finally:
        await runner.cleanup()
