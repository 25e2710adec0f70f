"""The emulated apiserver + kubelet answer log requests as the real ones do, and faults do what they say.

Plain aiohttp requests, no follower: if the emulation were wrong, every
follower test built on it would prove nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from podmortem.logs import timestamps
from podmortem_demo.emulated import Pod, PodLogsApi, faults, running_cluster

NS = 1_000_000_000


@pytest.fixture
async def emulated() -> AsyncIterator[tuple[PodLogsApi, str]]:
    async with running_cluster() as (api, url):
        yield api, url


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        yield s


def log_url(url: str, pod: str = "p", namespace: str = "default") -> str:
    return f"{url}/api/v1/namespaces/{namespace}/pods/{pod}/log"


async def get_log(session: aiohttp.ClientSession, url: str, **params: str) -> tuple[int, bytes]:
    async with session.get(log_url(url), params=params) as resp:
        return resp.status, await resp.read()


def rendered(pod: Pod, container: str = "main", instance: int = -1) -> bytes:
    return bytes(pod.containers[container].instances[instance].log.data)


def lines(data: bytes) -> list[bytes]:
    return [line + b"\n" for line in data.split(b"\n")[:-1]]


async def test_timestamps_on_and_off(
    emulated: tuple[PodLogsApi, str], session: aiohttp.ClientSession
) -> None:
    api, url = emulated
    pod = api.add_pod("p", max_burst=5)
    pod.containers["main"].write(300)
    status, with_ts = await get_log(session, url, timestamps="true")
    assert status == 200
    assert with_ts == rendered(pod)
    stamps = [timestamps.parse_ns(line.split(b" ", 1)[0]) for line in lines(with_ts)]
    assert stamps == sorted(stamps) and len(set(stamps)) < len(stamps)  # bursts share a timestamp
    assert all(len(line.split(b" ", 1)[0]) == 30 for line in lines(with_ts))  # RFC3339 with 9 digits
    _, plain = await get_log(session, url)
    assert plain == b"".join(line.split(b" ", 1)[1] for line in lines(with_ts))


async def test_without_timestamps_lines_stay_whole_across_chunks(
    emulated: tuple[PodLogsApi, str], session: aiohttp.ClientSession
) -> None:
    """More than one 256 KiB write: no chunk boundary may glue a stamp fragment onto a line."""
    api, url = emulated
    pod = api.add_pod("p")
    pod.containers["main"].write(20_000)
    with_ts = rendered(pod)
    assert len(with_ts) > 3 * 256 * 1024
    _, plain = await get_log(session, url)
    assert plain == b"".join(line.split(b" ", 1)[1] for line in lines(with_ts))


async def test_since_time_is_truncated_to_whole_seconds(
    emulated: tuple[PodLogsApi, str],
    session: aiohttp.ClientSession,
) -> None:
    api, url = emulated
    pod = api.add_pod("p", max_burst=1, max_step_ns=150_000_000)  # a few lines per second
    pod.containers["main"].write(60)
    all_lines = lines(rendered(pod))
    stamps = [timestamps.parse_ns(line.split(b" ", 1)[0]) for line in all_lines]
    k = next(i for i, ts in enumerate(stamps) if ts % NS > NS // 2 and ts // NS == stamps[i - 1] // NS)
    since = timestamps.format_ns(stamps[k])  # with a fraction, which the apiserver drops
    _, body = await get_log(session, url, timestamps="true", sinceTime=since)
    first = next(i for i, ts in enumerate(stamps) if ts >= stamps[k] // NS * NS)
    assert first < k
    assert body == b"".join(all_lines[first:])
    _, body = await get_log(session, url, timestamps="true", sinceTime="2000-01-01T00:00:00Z")
    assert body == rendered(pod)
    status, _ = await get_log(session, url, sinceTime="yesterday")
    assert status == 400


async def test_tail_lines_and_limit_bytes(
    emulated: tuple[PodLogsApi, str], session: aiohttp.ClientSession
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    pod.containers["main"].write(100)
    _, body = await get_log(session, url, timestamps="true", tailLines="7")
    assert body == b"".join(lines(rendered(pod))[-7:])
    _, body = await get_log(session, url, timestamps="true", limitBytes="1000")
    assert body == rendered(pod)[:1000]  # cut anywhere, even inside a line
    _, body = await get_log(session, url, timestamps="true", limitBytes="1000", follow="true")
    assert body == rendered(pod)[:1000]  # limitBytes ends even a follow


async def test_follow_streams_new_lines_until_the_container_ends(
    emulated: tuple[PodLogsApi, str],
    session: aiohttp.ClientSession,
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(10)
    async with session.get(log_url(url), params={"follow": "true", "timestamps": "true"}) as resp:
        got = b""
        while got.count(b"\n") < 10:
            got += await resp.content.readany()
        main.write(5)
        while got.count(b"\n") < 15:
            got += await resp.content.readany()
        main.terminate(0)
        got += await resp.content.read()
    assert got == rendered(pod)


async def test_containers_and_previous(
    emulated: tuple[PodLogsApi, str], session: aiohttp.ClientSession
) -> None:
    api, url = emulated
    pod = api.add_pod("p", containers=("main", "sidecar"))
    pod.containers["main"].write(20)
    pod.containers["sidecar"].write(3)
    status, _ = await get_log(session, url)
    assert status == 400  # several containers: one must be named
    _, body = await get_log(session, url, container="sidecar", timestamps="true")
    assert body == rendered(pod, "sidecar")
    status, _ = await get_log(session, url, container="nope")
    assert status == 400
    status, _ = await get_log(session, url, container="main", previous="true")
    assert status == 400  # no previous instance yet
    pod.containers["main"].restart(new_lines=4)
    _, body = await get_log(session, url, container="main", previous="true", timestamps="true")
    assert body == rendered(pod, "main", 0) and len(lines(body)) == 20
    _, body = await get_log(session, url, container="main", timestamps="true")
    assert body == rendered(pod, "main", 1) and len(lines(body)) == 4


async def test_pod_status_follows_restarts_and_termination(
    emulated: tuple[PodLogsApi, str],
    session: aiohttp.ClientSession,
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    main = pod.containers["main"]

    async def status() -> dict[str, object]:
        async with session.get(f"{url}/api/v1/namespaces/default/pods/p") as resp:
            assert resp.status == 200
            body = await resp.json()
            return body["status"]["containerStatuses"][0]  # type: ignore[no-any-return]

    first = await status()
    assert "running" in first["state"] and first["restartCount"] == 0  # type: ignore[operator]
    main.restart()
    second = await status()
    assert second["containerID"] != first["containerID"] and second["restartCount"] == 1
    assert second["lastState"] == {
        "terminated": {"exitCode": 1, "containerID": first["containerID"], "reason": "Error"}
    }
    main.terminate(0)
    third = await status()
    assert third["state"]["terminated"]["exitCode"] == 0  # type: ignore[index]
    pod.pod_faults.append(faults.HttpError(503, retry_after=2))
    async with session.get(f"{url}/api/v1/namespaces/default/pods/p") as resp:
        assert resp.status == 503 and resp.headers["Retry-After"] == "2"


# -- faults --------------------------------------------------------------------------------------------


async def test_eof_after_lines_and_inside_a_line(
    emulated: tuple[PodLogsApi, str],
    session: aiohttp.ClientSession,
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(50)
    main.faults.extend([faults.EofAfter(20), faults.EofAfter(20, extra_bytes=9)])
    all_lines = lines(rendered(pod))
    _, body = await get_log(session, url, timestamps="true", follow="true")
    assert body == b"".join(all_lines[:20])
    _, body = await get_log(session, url, timestamps="true", follow="true", limitBytes="100000")
    assert body == b"".join(all_lines[:20]) + all_lines[20][:9]


async def test_eof_after_seconds_ends_a_follow(
    emulated: tuple[PodLogsApi, str],
    session: aiohttp.ClientSession,
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    pod.containers["main"].write(5)
    pod.containers["main"].faults.append(faults.EofAfterSeconds(0.05))
    _, body = await get_log(session, url, timestamps="true", follow="true")
    assert body == rendered(pod)  # it ended by itself although the container still runs


async def test_stall_sends_nothing_until_the_client_gives_up(
    emulated: tuple[PodLogsApi, str],
    session: aiohttp.ClientSession,
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    pod.containers["main"].write(30)
    pod.containers["main"].faults.append(faults.Stall(10, extra_bytes=3))
    got = b""
    with pytest.raises((TimeoutError, aiohttp.ServerTimeoutError)):
        async with session.get(
            log_url(url),
            params={"timestamps": "true", "follow": "true"},
            timeout=aiohttp.ClientTimeout(sock_read=0.2),
        ) as resp:
            while True:
                chunk = await resp.content.readany()
                if not chunk:
                    break
                got += chunk
    assert got == b"".join(lines(rendered(pod))[:10]) + lines(rendered(pod))[10][:3]
    pod.containers["main"].write(1)  # the emulation keeps serving after a stalled client left
    _, body = await get_log(session, url, timestamps="true")
    assert body == rendered(pod)


async def test_reset_aborts_the_connection(
    emulated: tuple[PodLogsApi, str], session: aiohttp.ClientSession
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    pod.containers["main"].write(30)
    pod.containers["main"].faults.append(faults.Reset(5, extra_bytes=2))
    got = b""
    with pytest.raises(aiohttp.ClientPayloadError):
        async with session.get(log_url(url), params={"timestamps": "true", "follow": "true"}) as resp:
            while chunk := await resp.content.readany():
                got += chunk
    assert got == b"".join(lines(rendered(pod))[:5]) + lines(rendered(pod))[5][:2]


@pytest.mark.parametrize(("status", "retry_after"), [(500, None), (503, None), (429, 1.5)])
async def test_http_errors(
    emulated: tuple[PodLogsApi, str], session: aiohttp.ClientSession, status: int, retry_after: float | None
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    pod.containers["main"].faults.append(faults.HttpError(status, retry_after=retry_after))
    async with session.get(log_url(url), params={"follow": "true"}) as resp:
        assert resp.status == status
        assert resp.headers.get("Retry-After") == (None if retry_after is None else f"{retry_after:g}")
        assert (await resp.json())["kind"] == "Status"
    assert (await get_log(session, url))[0] == 200  # one fault per request


async def test_rotation_drops_earlier_lines_and_keep_splits_a_burst(
    emulated: tuple[PodLogsApi, str],
    session: aiohttp.ClientSession,
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(40)
    main.faults.extend([faults.Rotate(write_before=10), faults.Rotate(write_before=6, keep=4)])
    _, body = await get_log(session, url, timestamps="true")
    assert body == b""  # everything written before the rotation is in the old file
    assert main.current.log.rotations == [50]
    _, body = await get_log(session, url, timestamps="true")
    assert body == b"".join(lines(rendered(pod))[52:])  # the new file starts 4 lines before the end
    assert main.current.log.rotations == [50, 52]


async def test_restart_ends_the_stream_and_starts_a_new_instance(
    emulated: tuple[PodLogsApi, str],
    session: aiohttp.ClientSession,
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(20)
    main.faults.append(faults.Restart(after_lines=8, new_lines=3))
    _, body = await get_log(session, url, timestamps="true", follow="true")
    assert body == b"".join(lines(rendered(pod, instance=0))[:8])
    assert len(main.instances) == 2 and main.instances[0].exit_code == 1
    _, body = await get_log(
        session, url, timestamps="true", previous="true", sinceTime="2000-01-01T00:00:00Z"
    )
    assert len(lines(body)) == 20  # the unread lines stay readable in the previous instance
    _, body = await get_log(session, url, timestamps="true")
    assert len(lines(body)) == 3


async def test_delete_ends_the_stream_and_then_404(
    emulated: tuple[PodLogsApi, str],
    session: aiohttp.ClientSession,
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    pod.containers["main"].write(20)
    pod.containers["main"].faults.append(faults.Delete(after_lines=12))
    _, body = await get_log(session, url, timestamps="true", follow="true")
    assert len(lines(body)) == 12
    assert (await get_log(session, url))[0] == 404
    async with session.get(f"{url}/api/v1/namespaces/default/pods/p") as resp:
        assert resp.status == 404


async def test_write_fault_adds_lines_before_serving(
    emulated: tuple[PodLogsApi, str],
    session: aiohttp.ClientSession,
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    pod.containers["main"].faults.append(faults.Write(7))
    _, body = await get_log(session, url)
    assert len(lines(body)) == 7


async def test_terminate_when_faults_done(
    emulated: tuple[PodLogsApi, str], session: aiohttp.ClientSession
) -> None:
    api, url = emulated
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(3)
    main.faults.append(faults.EofAfter(1))
    main.terminate_when_faults_done = True
    await get_log(session, url, follow="true")
    assert main.current.exit_code is None
    async with asyncio.timeout(10):
        _, body = await get_log(session, url, follow="true")  # no fault left: it terminates, so this ends
    assert main.current.exit_code == 0 and len(lines(body)) == 3


# -- the API around the logs ----------------------------------------------------------------------------


async def test_objects_get_uid_and_resource_version_and_bad_patches_are_refused(
    emulated: tuple[PodLogsApi, str],
    session: aiohttp.ClientSession,
) -> None:
    api, url = emulated
    cm_url = f"{url}/api/v1/namespaces/default/configmaps"
    async with session.post(
        cm_url, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    ) as resp:
        assert resp.status in (200, 201)
        created = await resp.json()
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    async with session.patch(f"{cm_url}/c", json={"data": {"a": "2"}}) as resp:
        assert resp.status == 415  # application/json is not a patch type
    assert len(api.refused_patches) == 1
    async with session.patch(
        f"{cm_url}/c", data=b'{"data": {"a": "2"}}', headers={"Content-Type": "application/merge-patch+json"}
    ) as resp:
        assert resp.status == 200
        patched = await resp.json()
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
