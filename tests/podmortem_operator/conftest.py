"""Fixtures the operator's tests share: an open store, an API that answers, a running operator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import kmock
import pytest
from kubernetes_asyncio import client as k8s

from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem_demo.harness import Harness, harness


@pytest.fixture
async def log_store(tmp_path: Path) -> AsyncIterator[LogStore]:
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None)) as st:
        yield st


@pytest.fixture
async def api() -> AsyncIterator[kmock.RawHandler]:
    async with kmock.RawHandler() as handler, kmock.Server(handler):
        yield handler


@pytest.fixture
async def api_client(api: kmock.RawHandler) -> AsyncIterator[k8s.ApiClient]:
    async with k8s.ApiClient(k8s.Configuration(host=str(api.url).rstrip("/"))) as c:
        yield c


@pytest.fixture(scope="module")
def agent_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    """The emulated cluster with a node agent and the operator running (log server without auth)."""
    with harness(tmp_path_factory.mktemp("operator")) as h:
        h.add_agent_pod()
        h.start_operator(h.settings(log_http_auth=False))
        yield h
        assert h.operator_error is None, h.operator_error
