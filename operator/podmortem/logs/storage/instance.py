"""One container instance's stored log: its files on disk and, while open, its writer's state."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from podmortem.files import open_nofollow
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogEnd
from podmortem.logs.storage import layout, retention, segments
from podmortem.logs.storage.errors import StoreError
from podmortem.logs.wakeup import Wakeup

#: Where a reader reports damage it met in a segment: (path, offset, length).
DamageSink = Callable[[Path, int, int], None]


def _ignore_damage(_path: Path, _offset: int, _length: int) -> None:
    """An instance read outside a store (a test, a tool) counts no damage."""


class Instance:
    """One container instance's log: its files on disk and, while open, its writer state."""

    def __init__(self, *, path: Path, container: str, seq: int, container_id: str | None,
                 sync: bytes | None = None, on_damage: DamageSink | None = None) -> None:
        self.path = path
        self.container = container
        self.seq = seq
        self.container_id = container_id
        #: The instance's secret sync marker (its meta keeps it; None: made before format 2).
        self.sync = sync
        #: Each segment's framing, read once from its file header.
        self._framings: dict[int, segments.Framing | None] = {}
        #: How the active segment frames batches (set when it is opened for writing).
        self.writing: segments.Framing | None = None
        #: Lines stored so far (the running index after the last batch).
        self.index = 0
        #: The cursor as handed over with the last batch.
        self.cursor = segments.CursorFields(segments.NO_TS, 0, 0)
        #: Set once an end marker is stored.
        self.ended: LogEnd | None = None
        #: The segment being appended to and its committed size (valid batches only).
        self.active_seq: int | None = None
        self.active_size = 0
        self.fd: int | None = None
        self.dirty = False
        self.lock = asyncio.Lock()
        self.changed = Wakeup()
        #: Set when a newer instance of the same container appears.
        self.superseded = False
        #: Damage the load found (segment, range); the store counts it once.
        self.damage_found: list[tuple[Path, segments.Damage]] = []
        #: Called by readers for damage they meet: the store's own count (each range once).
        self.on_damage: DamageSink = on_damage if on_damage is not None else _ignore_damage

    def segment_path(self, seq: int) -> Path:
        return self.path / layout.segment_name(seq)

    def framing(self, seq: int) -> segments.Framing | None:
        """How segment ``seq`` frames its batches (blocking: reads its file header once).

        None when the header is damaged and the instance keeps no marker: the segment is then
        read as damage, never resynchronised on a guess.
        """
        if seq in self._framings:
            return self._framings[seq]
        try:
            fd = open_nofollow(self.segment_path(seq), os.O_RDONLY)
        except OSError:  # gone, or a link planted in the store: nothing to frame
            return None
        try:
            found = segments.read_framing(fd, self.sync)
        finally:
            os.close(fd)
        if found is not None:  # a file too short to tell (being created) is asked again later
            self._framings[seq] = found
        return found

    def known_framing(self, seq: int, framing: segments.Framing) -> None:
        self._framings[seq] = framing

    def instance_framing(self) -> segments.Framing:
        """The framing of the segments this instance writes (its own sync marker)."""
        if self.sync is None:
            raise StoreError(f"{self.path}: an instance without a sync marker cannot be written")
        return segments.Framing(self.sync)

    def forget_framing(self, seq: int) -> None:
        self._framings.pop(seq, None)

    def segment_seqs(self) -> list[int]:
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        suffix = retention.SEGMENT_SUFFIX
        stems = [n[: -len(suffix)] for n in names if n.endswith(suffix)]
        return sorted(int(stem) for stem in stems if stem.isdigit())

    def committed_size(self, seq: int) -> int | None:
        """Bytes of a segment that readers may read; None if the file is gone."""
        if seq == self.active_seq:
            return self.active_size
        try:
            return os.stat(self.segment_path(seq)).st_size
        except FileNotFoundError:
            return None

    def log_cursor(self) -> LogCursor:
        c = self.cursor
        return LogCursor(
            container_id=self.container_id,
            last_ts_ns=None if c.last_ts == segments.NO_TS else c.last_ts,
            count_at_last=c.count,
            delivered=c.delivered,
            last_line_crc=c.line_crc,
        )

    def notify(self) -> None:
        self.changed.set()
        self.changed = Wakeup()

    @property
    def finished(self) -> bool:
        """No more lines will come to this instance."""
        return self.ended is not None or self.superseded
