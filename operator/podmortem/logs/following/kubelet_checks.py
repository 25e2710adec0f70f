"""Two short log requests that tell a follower where it stands, beside its main stream.

The follower's replay check (see ``follower``'s docstring) cannot always tell from a stream
itself which instance it served, or whether a finished log really ended: then it asks the
kubelet. ``previous_holds``: does the ``previous=true`` log hold the cursor's last lines (then
our instance has ended)? ``tail_ends_at_cursor``: are a finished log's last lines the cursor's?
"""

from __future__ import annotations

import aiohttp

from podmortem.logs import errors, timestamps
from podmortem.logs.cursor import LogCursor
from podmortem.logs.following.pod_log_api import PodLogApi


async def tail_ends_at_cursor(api: PodLogApi, *, namespace: str, pod: str, container: str,
                              cursor: LogCursor, previous: bool) -> bool | None:
    """Whether the log's last lines are the cursor's (True), or lines we lack (False).

    None when the answer is empty or cut: an empty log, or a request cut
    before its first byte, cannot be told apart.
    """
    last = cursor.last_ts_ns
    try:
        async with api.open_log(
            namespace=namespace, name=pod, container=container, follow=False,
            previous=previous, tail_lines=cursor.count_at_last + 1 if last is not None else 1,
        ) as body:
            data = await body.read()
    except (errors.LogApiError, TimeoutError, aiohttp.ClientError, ConnectionError):
        return None
    complete = data[:data.rfind(b"\n") + 1]
    if not complete:
        return None
    if last is None:
        return False  # the log has lines and we have none
    at_last = 0
    for line in complete[:-1].split(b"\n"):
        try:
            ts = timestamps.parse_ns(line.partition(b" ")[0])
        except timestamps.BadTimestamp:
            return None
        if ts > last:
            return False
        at_last += ts == last
    return at_last <= cursor.count_at_last


async def previous_holds(api: PodLogApi, *, namespace: str, pod: str, container: str,
                         saved: LogCursor) -> bool:
    """Whether the kubelet's ``previous=true`` log holds the cursor's last delivered lines."""
    assert saved.last_ts_ns is not None
    last, wanted = saved.last_ts_ns, saved.count_at_last
    seen = 0
    partial = b""
    try:
        async with api.open_log(namespace=namespace, name=pod, container=container,
                                follow=False, previous=True, since_time=saved.since_time_param(),
                                ) as body:
            while seen < wanted:
                data = await body.readany()
                if not data:
                    return False
                data = partial + data
                cut = data.rfind(b"\n") + 1
                partial = data[cut:]
                for line in data[:cut].split(b"\n")[:-1]:
                    ts = timestamps.parse_ns(line.partition(b" ")[0])
                    if ts > last:
                        return False
                    seen += ts == last
            return True
    except (errors.LogNotReady, errors.PodGone):
        return False  # no previous instance (or no pod): the stream is the cursor's instance
    except (TimeoutError, aiohttp.ClientError, ConnectionError, timestamps.BadTimestamp) as exc:
        raise errors.ApiUnavailable(f"{container}: asking the kubelet for the previous instance:"
                                    f" {type(exc).__name__}: {exc}") from exc
