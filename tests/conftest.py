"""Fixtures shared by every test area: leak checks and real-kernel cgroups."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from podmortem_demo import sandbox

#: No test here is timed: hypothesis's deadline and its "input generation is slow" check measure the
#: machine's load (a busy CI runner failed one once), not the code, so both are off for the suite.
settings.register_profile("podmortem", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("podmortem")

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


def _is_async_test(item: pytest.Function) -> bool:
    # pytest-asyncio replaces ``obj`` with a sync wrapper; ``function`` is the test as written.
    return inspect.iscoroutinefunction(item.function) or item.get_closest_marker("asyncio") is not None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[object]:
    """Close the event loop looptime's hook opens even for sync tests.

    looptime 0.9 asks the policy for a loop around every test; for a sync test
    nobody closes it, and with ``filterwarnings = error`` the next test fails on
    a ResourceWarning about an unclosed loop.
    """
    try:
        return (yield)
    finally:
        if not _is_async_test(pyfuncitem):
            policy = asyncio.get_event_loop_policy()
            try:
                loop = policy.get_event_loop()
            except RuntimeError:
                loop = None
            if loop is not None and not loop.is_running():
                loop.close()
                policy.set_event_loop(None)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Say the pytest-randomly seed at the end too: ``-q`` hides the header that names it."""
    seed = getattr(config.option, "randomly_seed", None)
    if seed is not None:
        terminalreporter.write_line(f"random order: replay with -p randomly --randomly-seed={seed}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and _is_async_test(item):
            item.add_marker(pytest.mark.usefixtures("_no_leaked_tasks"))


@pytest.fixture
async def _no_leaked_tasks() -> AsyncIterator[None]:
    """Fail any async test that leaves asyncio tasks running behind it (kopf's habit)."""
    before = asyncio.all_tasks()
    yield
    current = asyncio.current_task()
    leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    if leaked:
        for task in leaked:
            task.cancel()
        pytest.fail(f"test left {len(leaked)} asyncio task(s) running: {leaked!r}")


@pytest.fixture
def cgroup_root() -> sandbox.CgroupRoot:
    """A place for throwaway memory cgroups, or a skip that says why there is none."""
    try:
        return sandbox.find_root()
    except sandbox.CgroupUnavailable as exc:
        pytest.skip(f"needs a writable memory cgroup: {exc}")


@pytest.fixture
def make_cgroup(cgroup_root: sandbox.CgroupRoot) -> Iterator[Callable[..., sandbox.MemoryCgroup]]:
    """Factory for throwaway memory cgroups: ``make_cgroup(limit_bytes=...)``. All are removed.

    Only the processes started with ``cg.popen`` join; the pytest process never does.
    """
    made: list[sandbox.MemoryCgroup] = []

    def make(*, limit_bytes: int | None = None) -> sandbox.MemoryCgroup:
        cg = sandbox.MemoryCgroup(root=cgroup_root, prefix="podmortem-test", limit_bytes=limit_bytes)
        try:
            cg.create()
        except sandbox.CgroupUnavailable as exc:
            pytest.skip(f"needs a writable memory cgroup: {exc}")
        made.append(cg)
        return cg

    try:
        yield make
    finally:
        for cg in made:
            cg.remove()
