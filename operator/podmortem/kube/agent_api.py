"""The few Kubernetes API reads the agent makes, as JSON GETs with the status checked here.

The agent lists its node's pods, asks API discovery which kind a configured
resource is, and reads the objects that own pods. Going through
kubernetes_asyncio's ``ApiClient`` keeps its authentication (service account,
kubeconfig, exec plugins) and TLS; reading raw JSON keeps the agent's view of a
pod the same dict the operator sees, without the typed models' conversions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from podmortem.errors import PodmortemError

#: Seconds for one API call. Listing a node's pods is small; a slow API server must not hold up the
#: sampling round for long, since the previous pod set is reused when a listing fails.
REQUEST_TIMEOUT_S = 10.0


class ApiError(PodmortemError):
    """The API server answered with an error status; ``status`` is the HTTP code (0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status


class KubeApi(Protocol):
    """One JSON GET; raises `ApiError` for any non-2xx answer."""

    async def get_json(self, path: str, *, query: list[tuple[str, str]] | None = None) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class ApiClientApi:
    """`KubeApi` on a kubernetes_asyncio ``ApiClient``."""

    def __init__(self, api_client: Any) -> None:
        self._api = api_client

    async def get_json(self, path: str, *, query: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        import aiohttp

        try:
            response = await self._api.call_api(
                path,
                "GET",
                query_params=query or [],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(0, f"GET {path}: {type(exc).__name__}: {exc}") from exc
        try:
            body = await response.read()
            status = int(response.status)
        finally:
            response.release()
        if not 200 <= status <= 299:
            raise ApiError(status, f"GET {path}: {_message(body)}")
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise ApiError(status, f"GET {path}: the answer is not JSON") from exc
        if not isinstance(data, dict):
            raise ApiError(status, f"GET {path}: the answer is not a JSON object")
        return data

    async def close(self) -> None:
        await self._api.close()


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body).get("message") or body[:200].decode(errors="replace"))
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace") or "(no body)"


async def connect(kubeconfig: Path | None) -> ApiClientApi:
    """``kubeconfig``, else ``$KUBECONFIG``, the pod's service account, ``~/.kube/config``
    (:func:`podmortem.kube.config.load`, as the operator and the CLI find it)."""
    from kubernetes_asyncio import client

    from podmortem.kube import clients, config

    access = config.load(kubeconfig)
    return ApiClientApi(client.ApiClient(await clients.api_configuration(access)))
