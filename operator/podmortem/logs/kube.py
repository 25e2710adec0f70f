"""The two API calls a follower needs: read a pod, open its log stream.

kubernetes_asyncio's ``read_namespaced_pod_log`` has no ``since_time`` and
sends booleans as ``True``/``False``, so the log path goes through
``ApiClient.call_api`` with our own query parameters and
``_preload_content=False``. Then no ApiException is raised: the status is
checked here and turned into the follower's error classes. Pods are read the
same way and parsed as plain JSON, which skips the slow model classes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from podmortem.logs import errors
from podmortem.logs.settings import FollowSettings

_LOG_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/log"
_POD_PATH = "/api/v1/namespaces/{namespace}/pods/{name}"
#: Enough of an error body to say what went wrong, never a whole log.
_ERROR_BODY_LIMIT = 4096


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from the apiserver; the back-off covers it


def _message(body: bytes, status: int) -> str:
    try:
        status_obj = json.loads(body)
        if isinstance(status_obj, dict) and status_obj.get("message"):
            return f"HTTP {status}: {status_obj['message']}"
    except ValueError:
        pass
    text = body.decode("utf-8", "replace").strip().splitlines()
    return f"HTTP {status}: {text[0][:200]}" if text else f"HTTP {status}"


def error_for(status: int, headers: Mapping[str, str], body: bytes, *, what: str) -> errors.LogApiError:
    """Classify a non-2xx answer by what the follower should do about it."""
    message = f"{what}: {_message(body, status)}"
    if status == 404:
        return errors.PodGone(message, status=status)
    if status == 429 or status >= 500:
        return errors.ApiUnavailable(message, status=status, retry_after_s=_retry_after(headers))
    if status == 400:
        return errors.LogNotReady(message, status=status)
    return errors.ApiFatal(message, status=status)


class PodLogApi:
    """Reads pods and opens log streams through one kubernetes_asyncio ``ApiClient``."""

    def __init__(self, api_client: client.ApiClient, *, settings: FollowSettings) -> None:
        self._api = api_client
        self._settings = settings

    async def _call(
        self, path: str, *, namespace: str, name: str,
        query: list[tuple[str, str]], client_timeout: aiohttp.ClientTimeout, what: str,
    ) -> aiohttp.ClientResponse:
        try:
            response: aiohttp.ClientResponse = await self._api.call_api(
                path, "GET",
                path_params={"namespace": namespace, "name": name},
                query_params=query,
                header_params={"Accept": "*/*"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=client_timeout,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise errors.ApiUnavailable(f"{what}: {type(exc).__name__}: {exc}".rstrip(": ")) from exc
        if response.status != 200:
            try:
                body = await response.content.read(_ERROR_BODY_LIMIT)
            except (TimeoutError, aiohttp.ClientError, OSError):
                body = b""
            finally:
                response.release()
            raise error_for(response.status, response.headers, body, what=what)
        return response

    async def read_pod(self, *, namespace: str, name: str) -> dict[str, Any]:
        """The pod as a plain dict; raises :class:`errors.PodGone` on 404."""
        s = self._settings
        timeout = aiohttp.ClientTimeout(total=s.pod_read_timeout_s)
        what = f"reading pod {namespace}/{name}"
        response = await self._call(_POD_PATH, namespace=namespace, name=name, query=[],
                                    client_timeout=timeout, what=what)
        try:
            body = await response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise errors.ApiUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
        finally:
            response.release()
        try:
            pod = json.loads(body)
        except ValueError as exc:
            raise errors.ApiUnavailable(f"{what}: the API sent invalid JSON") from exc
        if not isinstance(pod, dict):
            raise errors.ApiUnavailable(f"{what}: the API sent no object")
        return pod

    @contextlib.asynccontextmanager
    async def open_log(
        self, *, namespace: str, name: str, container: str,
        follow: bool, previous: bool = False, since_time: str | None = None,
        limit_bytes: int | None = None, tail_lines: int | None = None,
    ) -> AsyncIterator[aiohttp.StreamReader]:
        """Open one log request with ``timestamps=true``; yields the body to read in chunks."""
        s = self._settings
        query = [("container", container), ("timestamps", "true")]
        if follow:
            query.append(("follow", "true"))
        if previous:
            query.append(("previous", "true"))
        if since_time is not None:
            query.append(("sinceTime", since_time))
        if limit_bytes is not None:
            query.append(("limitBytes", str(limit_bytes)))
        if tail_lines is not None:
            query.append(("tailLines", str(tail_lines)))
        timeout = aiohttp.ClientTimeout(
            total=None, connect=s.connect_timeout_s, sock_connect=s.connect_timeout_s,
            sock_read=s.read_timeout_s,
        )
        what = f"log of {namespace}/{name}/{container}"
        response = await self._call(_LOG_PATH, namespace=namespace, name=name, query=query,
                                    client_timeout=timeout, what=what)
        try:
            yield response.content
        finally:
            # A follow stream never ends by itself: close the connection rather than drain it.
            response.close()
