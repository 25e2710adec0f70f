"""The admission webhook's transport: deadlines and connection caps over TLS, and the namespaces it
leaves alone in code.

The webhook's port is open to every pod by design: 1,000 TLS connections sending a byte every 5 s
were all held after 30 s (+196 MB, +1,000 descriptors). Each test serves the webhook with
``admission.serve``, as the operator does, with deadlines short enough to need no long wait.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.malformed_requests import assert_parser_errors_say_no_store_and_nosniff

from podmortem.cli import main as cli_main
from podmortem.cli import operator as operator_cli
from podmortem.operator.settings import SidecarInjectionSettings, WebhookSettings
from podmortem.operator.watching import admission
from podmortem.serving_limits import ServerLimits
from podmortem_demo.emulated.tls import Pki, make_pki

from .test_admission import pod_request
from .test_sidecar_injection import IMAGE, restricted_pod

pytest.importorskip("cryptography")

PATIENCE_S = 20.0
SHORT = ServerLimits(header_timeout_s=0.3, body_timeout_s=0.3, idle_timeout_s=0.3,
                     max_connections=16, max_connections_per_peer=4)


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@asynccontextmanager
async def webhook(pki: Pki, tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[int, ssl.SSLContext]]:
    (tmp_path / "tls.crt").write_bytes(pki.server_pem)
    (tmp_path / "tls.key").write_bytes(pki.server_key)
    conf = WebhookSettings(tls_cert_file=tmp_path / "tls.crt", tls_key_file=tmp_path / "tls.key", port=0,
                           **settings)
    async with admission.serve(webhook=conf, sidecar=SidecarInjectionSettings(image=IMAGE),
                               host="127.0.0.1") as serving:
        client = ssl.create_default_context(cadata=pki.ca_pem.decode())
        client.check_hostname = False
        yield int(serving.url.rsplit(":", 1)[1]), client


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    try:
        async with asyncio.timeout(PATIENCE_S):
            while chunk := await reader.read(65536):
                chunks.append(chunk)
    except (ConnectionResetError, ssl.SSLError):
        pass
    return b"".join(chunks)


async def test_slow_tls_clients_are_cut_at_each_deadline(pki: Pki, tmp_path: Path) -> None:
    async with webhook(pki, tmp_path, connections=SHORT) as (port, tls):
        # A handshake that never completes.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x16\x03\x01")
        assert await closed_by_server(reader) == b""
        writer.close()
        # A header that never completes, and a body that never does.
        for sent in (b"POST /mutate/pods HTTP/1.1\r\nHost: x\r\n",
                     b"POST /mutate/pods HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"a\""):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
            writer.write(sent)
            await writer.drain()
            assert await closed_by_server(reader) == b""
            writer.close()


async def test_connections_beyond_the_cap_per_peer_are_refused_at_once(pki: Pki, tmp_path: Path) -> None:
    limits = ServerLimits(header_timeout_s=PATIENCE_S, max_connections=16, max_connections_per_peer=4)
    async with webhook(pki, tmp_path, connections=limits) as (port, tls):
        held = [await asyncio.open_connection("127.0.0.1", port, ssl=tls) for _ in range(4)]
        for _ in range(3):  # dropped before a handshake: no TLS state is made for them
            with pytest.raises((ConnectionError, ssl.SSLError)):
                await asyncio.open_connection("127.0.0.1", port, ssl=tls)
        for _, w in held:
            w.close()


def test_the_webhook_has_deadlines_by_default() -> None:
    conf = WebhookSettings(tls_cert_file=Path("c"), tls_key_file=Path("k"))
    assert conf.connections.header_timeout_s <= 10 and conf.connections.max_connections_per_peer <= 64
    assert "kube-system" in conf.excluded_namespaces


async def post_review(port: int, tls: ssl.SSLContext, review: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps(review).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    writer.write(b"POST /mutate/pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    answer = await closed_by_server(reader)
    writer.close()
    head, _, text = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer
    result: dict[str, Any] = json.loads(text)
    return result


@pytest.mark.parametrize("namespace", ["kube-system", "podmortem-system"])
async def test_pods_of_excluded_namespaces_are_admitted_unchanged_whatever_the_selector(
    pki: Pki, tmp_path: Path, namespace: str
) -> None:
    excluded = ("podmortem-system", "kube-system")
    async with webhook(pki, tmp_path, excluded_namespaces=excluded) as (port, tls):
        pod = restricted_pod()
        pod["metadata"]["namespace"] = namespace
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": pod_request(pod, uid="u-1")}
        response = (await post_review(port, tls, review))["response"]
        assert response == {"uid": "u-1", "allowed": True}  # no patch, no warning
        pod["metadata"]["namespace"] = "team-a"  # the same pod elsewhere gets the sidecar
        review["request"] = pod_request(pod, uid="u-2")
        assert "patch" in (await post_review(port, tls, review))["response"]


def test_the_operator_command_excludes_its_own_namespace(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    for name, value in {"PODMORTEM_POD_NAMESPACE": "obs", "PODMORTEM_WEBHOOK_PORT": "9443",
                        "PODMORTEM_WEBHOOK_TLS_CERT_FILE": str(tmp_path / "c"),
                        "PODMORTEM_WEBHOOK_TLS_KEY_FILE": str(tmp_path / "k"),
                        "PODMORTEM_INJECT_SIDECAR_IMAGE": IMAGE}.items():
        monkeypatch.setenv(name, value)
    settings = operator_cli.settings_from(cli_main.build_parser().parse_args(["operator"]))
    assert settings.webhook is not None and settings.webhook.excluded_namespaces == ("obs", "kube-system")
    monkeypatch.setenv("PODMORTEM_WEBHOOK_EXCLUDE_NAMESPACES", "kube-system,gpu-operator,obs")
    settings = operator_cli.settings_from(cli_main.build_parser().parse_args(["operator"]))
    assert settings.webhook is not None
    assert settings.webhook.excluded_namespaces == ("obs", "kube-system", "gpu-operator")


async def test_what_aiohttp_cannot_parse_is_400_with_safe_headers(pki: Pki, tmp_path: Path) -> None:
    async with webhook(pki, tmp_path) as (port, tls):
        await assert_parser_errors_say_no_store_and_nosniff(port, tls)
