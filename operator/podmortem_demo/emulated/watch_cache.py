"""What kube-apiserver's watch cache and etcd give a client that lists and watches, for the emulated API.

Measured against kube-apiserver v1.36.3 (``tests/controlplane/test_emulation_matches.py`` runs the same
assertions against both):

- every change takes the next number of one cluster-wide counter as its ``resourceVersion`` (etcd's
  revision), a deletion included; a list's ``resourceVersion`` is the counter's current value;
- a list with ``limit`` is cut into pages in key order (``/namespace/name``), each but the last with
  ``metadata.continue`` and ``metadata.remainingItemCount``; the pages after the first show the objects
  as they were at the first (a snapshot, :class:`Snapshots`);
- a watch from ``resourceVersion`` N gets the changes after N, in order (:class:`Feed`); from 0 or
  none, an ADDED for each object there is now, then the changes; ``timeoutSeconds`` ends it;
- with ``allowWatchBookmarks=true``, a BOOKMARK carries the cache's resourceVersion (its resource's
  newest change, in any namespace) 2 s before the watch's timeout, or about a minute in if that is
  sooner (the cacher's ``bookmarkFrequency``; the minute itself is not measured here); none that would
  not move the watcher past where it started (the cache's version then); a watch from 0 or none gets
  one at once after its ADDEDs;
- the cache keeps 75 s of changes, at least the newest 100 (its ``eventFreshDuration`` and smallest
  size; from the apiserver's source, not measured);
- etcd compaction alone changes nothing a client sees (measured: the watch cache and its list snapshots
  still serve); once the history is gone (an API server restarted after etcd compacted its revisions:
  :meth:`KubernetesApi.forget_history`), a watch from an older version gets one ERROR event with a 410
  ``Expired`` Status ("too old resource version: N (M)") in an HTTP 200 stream, and a list's old
  ``continue`` gets HTTP 410 with a fresh token in the Status's ``metadata.continue`` that continues
  at the newest version ("inconsistent" continue).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import collections
import contextlib
import json
from dataclasses import dataclass
from typing import Any

#: The watch cache's size bounds: it grows from 100 events up to 100 x 1024 while its oldest event is
#: fresh (``eventFreshDuration``, 75 s) and gives up older events beyond 100. A watch from before the
#: oldest event kept gets 410.
CAPACITY = 100 * 1024
MIN_CAPACITY = 100
FRESH_S = 75.0
#: How often a watch that asked for them gets a BOOKMARK (the cacher's ``bookmarkFrequency``).
BOOKMARK_INTERVAL_S = 60.0
#: A watch with a timeout gets its last BOOKMARK this long before the timeout (the cacher's choice).
BOOKMARK_BEFORE_TIMEOUT_S = 2.0
#: Lists whose later pages stay servable (their snapshots); an older one's ``continue`` gets 410.
SNAPSHOTS = 32

INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a "
    "new list without the continue parameter, or use the continue token in this response to retrieve "
    "the remainder of the results. Continuing with the provided token results in an inconsistent list "
    "- objects that were created, modified, or deleted between the time the first chunk was returned "
    "and now may show up in the list.")


@dataclass(frozen=True)
class Change:
    """One recorded change of one object: its resourceVersion and the watch event that tells it."""

    rv: int
    namespace: str | None
    name: str
    event: dict[str, Any]
    #: When it was recorded (monotonic seconds).
    at: float = 0.0


class Feed:
    """The changes of one resource (all namespaces), oldest first, up to :data:`CAPACITY`.

    Positions are sequence numbers that stay valid while older changes are dropped."""

    def __init__(self, *, floor: int, latest: int, capacity: int = CAPACITY) -> None:
        self._items: list[Change] = []
        self._head = 0  # index in _items of the oldest change kept
        self._base = 0  # sequence number of _items[0]
        #: Changes at or before this resourceVersion are gone: a watch from before it gets 410.
        self.floor = floor
        #: The cache's resourceVersion: its newest change's, or where it started (what BOOKMARKs carry).
        #: Changes of other resources do not move it (measured: a quiet resource gets no BOOKMARK).
        self.latest = latest
        self.capacity = capacity
        self._changed = asyncio.Event()

    @property
    def end(self) -> int:
        """The sequence number the next change will get."""
        return self._base + len(self._items)

    @property
    def start(self) -> int:
        return self._base + self._head

    def record(self, change: Change) -> None:
        self._items.append(change)
        self.latest = max(self.latest, change.rv)
        kept = self.end - self.start
        stale_before = change.at - FRESH_S
        while kept > self.capacity or (kept > MIN_CAPACITY and self._items[self._head].at < stale_before):
            self.floor = self._items[self._head].rv
            self._head += 1
            kept -= 1
        if self._head >= 4096 and 2 * self._head >= len(self._items):
            del self._items[:self._head]
            self._base += self._head
            self._head = 0
        self._changed.set()
        self._changed = asyncio.Event()

    def after(self, rv: int) -> int:
        """The sequence number of the first change newer than ``rv``."""
        return self._base + bisect.bisect_right(self._items, rv, lo=self._head, key=lambda c: c.rv)

    def read(self, seq: int) -> list[Change]:
        """The changes from sequence number ``seq`` on (``seq`` must be >= :attr:`start`)."""
        return self._items[seq - self._base:]

    def forget(self, *, floor: int) -> None:
        """Drop every change: the cache starts again at ``floor``."""
        self._base = self.end
        self._items = []
        self._head = 0
        self.floor = floor
        self.latest = max(self.latest, floor)

    async def wait(self, within_s: float | None) -> None:
        """Return at the next change, or after ``within_s`` seconds (None: no limit)."""
        changed = self._changed
        if within_s is None:
            await changed.wait()
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, within_s)):
                await changed.wait()


class Snapshots:
    """The items of recent paged lists, by list: what their later pages are cut from."""

    def __init__(self, *, keep: int = SNAPSHOTS) -> None:
        self.keep = keep
        self._lists: collections.OrderedDict[tuple[Any, ...], tuple[list[str], list[dict[str, Any]]]] = \
            collections.OrderedDict()

    def put(self, key: tuple[Any, ...], keys: list[str], items: list[dict[str, Any]]) -> None:
        self._lists[key] = (keys, items)
        self._lists.move_to_end(key)
        while len(self._lists) > self.keep:
            self._lists.popitem(last=False)

    def get(self, key: tuple[Any, ...]) -> tuple[list[str], list[dict[str, Any]]] | None:
        return self._lists.get(key)

    def forget_before(self, rv: int) -> None:
        """Drop the lists taken before ``rv`` (etcd compacted at ``rv`` can still be read at ``rv``)."""
        for key in [k for k in self._lists if k[-1] < rv]:
            del self._lists[key]


def merged(stored: Any, patch: Any) -> Any:
    """``stored`` after a JSON merge patch (RFC 7386: objects merge, ``null`` removes, the rest replaces)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(stored) if isinstance(stored, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merged(result.get(key), value)
    return result


class BadContinue(ValueError):
    """A ``continue`` token that is not one this server wrote."""


def encode_continue(rv: int, start: str) -> str:
    """A continue token as the apiserver writes it: base64 of ``{"v", "rv", "start"}``, the next key
    after ``start`` (``start`` + NUL)."""
    body = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start + "\x00"}, separators=(",", ":"))
    return base64.b64encode(body.encode()).decode()


def decode_continue(token: str) -> tuple[int, str]:
    """(resourceVersion, the last key served) of a continue token; rv -1: continue at the newest."""
    try:
        body = json.loads(base64.b64decode(token + "=" * (-len(token) % 4), validate=True))
        rv, start = int(body["rv"]), str(body["start"])
        if body.get("v") != "meta.k8s.io/v1" or not start.endswith("\x00"):
            raise ValueError(body)
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise BadContinue(f"invalid continue token: {exc}") from exc
    return rv, start[:-1]


def parse_resource_version(value: str | None) -> int | None:
    """A request's ``resourceVersion`` (None when absent or empty); ValueError for what the apiserver
    refuses: anything but an unsigned decimal (its ``strconv.ParseUint``)."""
    if value is None or value == "":
        return None
    if not value.isdigit() or not value.isascii():
        raise ValueError(f'resourceVersion: Invalid value: "{value}": '
                         f'strconv.ParseUint: parsing "{value}": invalid syntax')
    return int(value)


def too_old(rv: int, floor: int) -> dict[str, Any]:
    """The watch event the apiserver sends for a resourceVersion it no longer has."""
    return {"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"too old resource version: {rv} ({floor})", "reason": "Expired", "code": 410}}


def status(code: int, reason: str, message: str, *, details: dict[str, Any] | None = None,
           continue_: str | None = None) -> dict[str, Any]:
    """A ``Status`` as the apiserver answers a refused request (no ``reason`` when ``reason`` is "")."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1",
                            "metadata": {"continue": continue_} if continue_ else {},
                            "status": "Failure", "message": message}
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    body["code"] = code
    return body
