"""Fixtures the operator's report-page and Event tests share: an open store, an API that answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import kmock
import pytest
from kubernetes_asyncio import client as k8s

from podmortem.logs.store import LogStore, StoreSettings


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
