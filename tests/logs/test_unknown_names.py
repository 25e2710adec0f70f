"""Asking the log server about names it does not hold changes nothing it keeps.

A reader names any namespace and pod in ``GET /logs/{namespace}/{pod}``; 200,000 lookups of unknown
namespaces once left 200,000 entries in the store's pod index (47.7 MiB). What the index holds is
compared before and after, through the served API, not estimated from memory use.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import test_utils
from tests.logs.test_http import write

from podmortem.logs.cursor import LogCursor
from podmortem.logs.serving import auth, http
from podmortem.logs.storage.store import LogStore, StoreSettings

OPEN = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))


@pytest.fixture(params=[False, True], ids=["writable", "read-only"])
async def log_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LogStore]:
    root = tmp_path / "store"
    async with LogStore(root, settings=StoreSettings(fsync_interval_s=None)) as st:
        await write(st.sink(namespace="ns", pod="p"), "main", [b"hello"], LogCursor(container_id="c"))
    async with LogStore(root, settings=StoreSettings(fsync_interval_s=None), read_only=request.param) as st:
        yield st


@pytest.fixture
async def client(log_store: LogStore) -> AsyncIterator[test_utils.TestClient[Any, Any]]:
    c = test_utils.TestClient(test_utils.TestServer(http.make_app(log_store=log_store, reviewer=OPEN)))
    await c.start_server()
    yield c
    await c.close()


def held(log_store: LogStore) -> tuple[int, int, int]:
    """Namespaces scanned, pod names indexed in them, and pods held by the store's index."""
    index = log_store._pods
    return len(index._pod_dirs), sum(len(pods) for pods in index._pod_dirs.values()), len(index._by_name)


async def test_unknown_namespaces_and_pods_leave_nothing_in_the_index(
    log_store: LogStore, client: test_utils.TestClient[Any, Any]
) -> None:
    async with client.get("/logs/ns/p") as r:
        assert r.status == 200 and await r.read() == b"hello\n"
    before = held(log_store)
    for i in range(3000):
        async with client.get(f"/logs/unknown-{i}/p") as r:
            assert r.status == 404
        async with client.get(f"/logs/ns/unknown-{i}") as r:
            assert r.status == 404
    assert held(log_store) == before
    async with client.get("/logs/ns/p") as r:  # and what is held is still found
        assert r.status == 200 and await r.read() == b"hello\n"
