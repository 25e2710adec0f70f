"""``podmortem diagnose pod/NAME``'s logs the kubelet no longer has: the operator's stored tails.

A container's earlier instance, or a pod whose node is gone, has no log left on the kubelet; the
podmortem operator, where the chart runs one, kept it. The tails are read as ``podmortem logs -p``
reads them (`podmortem.cli.logs_stored`: the operator's Service found by label, a port-forward
through the API server, the user's own token, so the log server's own ``get pods/log`` check
decides), into memory, bounded, instead of onto stdout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from podmortem.kube.config import ClusterAccess
    from podmortem.logs.cursor import LogCursor
    from podmortem.logs.lines import LineBatch

#: (pod, container, previous): a log wanted from the store.
Wanted = tuple[str, str, bool]


class TailSink:
    """Keeps the last ``keep`` lines a stored log's reader writes (the sink `logs_stored` writes to)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.lines: list[bytes] = []

    async def write(self, container: str, batch: LineBatch, cursor: LogCursor) -> None:
        self.lines.extend(batch.raw.splitlines())
        del self.lines[: -self.keep]


async def stored_tails(access: ClusterAccess, namespace: str, wanted: Sequence[Wanted], *, keep: int,
                       operator_namespace: str | None = None
                       ) -> tuple[dict[tuple[str, str], list[bytes]], list[str]]:
    """The stored tails found, by (pod, container), and one note for each that could not be read."""
    from podmortem.cli import logs_stored
    from podmortem.kube import clients
    from podmortem.kube.session import ApiSession

    found: dict[tuple[str, str], list[bytes]] = {}
    notes: list[str] = []
    try:
        plain = await clients.resolve_plugin(access)  # the store is asked with the user's bearer token
        async with ApiSession(plain) as api:
            target = await logs_stored.find_operator(logs_stored.ApiReader(api), namespace=operator_namespace)
            async with logs_stored.connected(plain, target) as store:
                for pod, container, previous in wanted:
                    sink = TailSink(keep)
                    try:
                        await store.read(namespace=namespace, pod=pod, container=container,
                                         sink=cast(Any, sink), previous=previous, tail=keep, since=None,
                                         follow=False, note=lambda _said: None, opened=lambda: None)
                    except logs_stored.StoredCopyError as exc:
                        notes.append(f"no stored copy of {pod}/{container}'s log either: {exc}")
                        continue
                    if sink.lines:
                        found[pod, container] = sink.lines
    except logs_stored.StoredCopyError as exc:
        notes.append(f"the operator's stored logs cannot be read: {exc}")
    return found, notes
