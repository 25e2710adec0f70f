"""An emulated cluster on a local port: the API with logging pods, plus a kubeconfig for it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import kmock

from podmortem_demo.emulated.apiserver import write_kubeconfig
from podmortem_demo.emulated.kubelet import PodLogsApi


@contextlib.asynccontextmanager
async def running_cluster(*, strict: bool = False) -> AsyncIterator[tuple[PodLogsApi, str]]:
    """Start :class:`PodLogsApi` on 127.0.0.1 and yield it with its base URL."""
    api = PodLogsApi(strict=strict)
    async with api, kmock.Server(api) as server:
        yield api, str(server.url).rstrip("/")


def kubeconfig_for(url: str, path: Path, *, namespace: str = "default") -> Path:
    """Write a kubeconfig that points kubectl, kubernetes_asyncio and ``podmortem logs`` at ``url``."""
    return write_kubeconfig(path, server=url, namespace=namespace)
