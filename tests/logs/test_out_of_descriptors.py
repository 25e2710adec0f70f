"""Out of file descriptors, a follower waits and resumes on its own: nothing stops for good.

The kernel's own EMFILE: the test lowers this process's soft ``RLIMIT_NOFILE`` to the descriptors
it has open, so the next ``open`` fails as it does on a node under containerd's 1,024, and raises
it again once the follower has waited. Before, every follower that met EMFILE stopped until its
pod's next event, which a running pod may never have.
"""

from __future__ import annotations

import errno
import itertools
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import pytest

from podmortem import open_files
from podmortem.logs.following.pod_log_api import PodLogApi
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.operator import metrics
from podmortem.operator.followed_pods import Following
from podmortem_demo.emulated import PodLogsApi, plain_text

from .conftest import FAST
from .stored import until


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


@contextmanager
def no_free_descriptor() -> Iterator[None]:
    """Every new descriptor of this process fails with EMFILE until the block ends.

    A new descriptor takes the lowest free number, and the limit bounds the number: the soft limit
    goes down to the lowest free one, whatever the holes above it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = next(n for n in itertools.count() if not _is_open(n))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_emfile_is_read_through_the_errors_that_wrap_it() -> None:
    emfile = OSError(errno.EMFILE, "Too many open files")
    assert open_files.out_of_descriptors(emfile)
    assert open_files.out_of_descriptors(OSError(errno.ENFILE, "Too many open files in system"))
    connector = aiohttp.ClientConnectorError(aiohttp.client_reqrep.ConnectionKey(
        "api", 443, True, None, None, None, None), emfile)
    assert open_files.out_of_descriptors(connector)
    try:
        try:
            raise emfile
        except OSError as inner:
            raise RuntimeError("opening the segment failed") from inner
    except RuntimeError as outer:
        assert open_files.out_of_descriptors(outer)
    assert not open_files.out_of_descriptors(OSError(errno.ENOSPC, "No space left on device"))
    assert not open_files.out_of_descriptors(ValueError("bad"))


async def test_a_follower_out_of_descriptors_waits_and_resumes_without_losing_a_line(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, tmp_path: Path
) -> None:
    api, _ = cluster
    main = api.add_pod("trainer-0", namespace="ml", text=plain_text).containers["main"]
    main.write(500)
    waits_before = metrics.DESCRIPTOR_WAITS._value.get()
    async with LogStore(tmp_path / "store", settings=StoreSettings(fsync_interval_s=None)) as st:

        async def make_sink(namespace: str, name: str, _uid: str) -> object:
            (tmp_path / "probe").open("w").close()  # the store's own first open, as the real kernel sees it
            return st.sink(namespace=namespace, pod=name, job="train")

        following = Following(api=pod_api, make_sink=make_sink, settings=FAST)  # type: ignore[arg-type]
        with no_free_descriptor():
            assert following.ensure(namespace="ml", pod="trainer-0", pod_uid="uid-1", containers=None)
            await until(lambda: metrics.DESCRIPTOR_WAITS._value.get() >= waits_before + 2)
            assert following.is_following("uid-1")  # waiting, not stopped
        facts = following.facts("uid-1")
        assert facts is not None and facts.error is None
        await until(lambda: st.lines_total >= 500)  # resumed by itself: no pod event came
        main.write(100)
        await until(lambda: st.lines_total >= 600)
        assert facts.error is None and facts.lines == 600
        await following.stop()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
async def test_other_os_errors_still_stop_the_follower_until_the_next_event(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, code: int
) -> None:
    api, _ = cluster
    api.add_pod("trainer-0", namespace="ml", text=plain_text).containers["main"].write(10)

    async def make_sink(namespace: str, name: str, _uid: str) -> object:
        raise OSError(code, os.strerror(code))

    following = Following(api=pod_api, make_sink=make_sink, settings=FAST)  # type: ignore[arg-type]
    assert following.ensure(namespace="ml", pod="trainer-0", pod_uid="uid-1", containers=None)
    facts = following.facts("uid-1")
    assert facts is not None
    await until(lambda: facts.error is not None)
    assert not following.is_following("uid-1")
    await following.stop()
