"""What a read of a stored log yields: blocks of lines, markers of gaps, damage and retention.

Reads go batch by batch, not line by line: a reader yields whole decoded batches
(``LinesBlock``), so a server can pass a batch's text to a socket as one buffer; a batch bigger
than a read chunk comes as a ``LargeLinesBlock``, served in pieces.
"""

from __future__ import annotations

from dataclasses import dataclass

from podmortem.logs.events import GapMarker, LogEnd, LogLine
from podmortem.logs.storage import segments


@dataclass(frozen=True, slots=True)
class LinesBlock:
    """Lines ``start..n`` of one stored batch; ``index`` is the running index of line ``start``."""

    container: str
    index: int
    start: int
    payload: segments.AnyLinesPayload

    def __len__(self) -> int:
        return len(self.payload) - self.start

    def text_bytes(self, *, timestamps: bool = False) -> bytes:
        """The lines as ``text\\n`` each, or ``<RFC3339> text\\n`` as the API sends them."""
        if timestamps:
            return self.payload.raw_block(self.start)
        return self.payload.text_block(self.start)

    def stamps(self) -> list[int]:
        return list(self.payload.stamps()[self.start:])

    def lines(self) -> list[LogLine]:
        c = self.container
        texts = self.payload.texts(self.start)
        return [LogLine(c, ts, text) for ts, text in zip(self.stamps(), texts, strict=True)]


@dataclass(frozen=True, slots=True)
class LargeLinesBlock:
    """A stored batch bigger than `READ_CHUNK` (its CRC already checked): served in pieces.

    Nothing of it is held but the piece being rendered (`rendering.serve_large`), so a reader of a
    log of 16 MiB lines holds what a reader of short lines holds.
    """

    container: str
    #: Running index of the first line served, and that line's position in the batch.
    index: int
    start: int
    path: str
    offset: int
    head: segments.BatchHeader
    since_ns: int | None = None

    def __len__(self) -> int:
        return self.head.n_lines - self.start


@dataclass(frozen=True, slots=True)
class RetentionCut:
    """Earlier lines of this log were deleted by retention."""

    container: str
    removed_lines: int


@dataclass(frozen=True, slots=True)
class Damaged:
    """Bytes of the stored log that are no intact batch: set aside (or met by a reader), not served."""

    container: str
    length: int
    #: ``corrupt``, ``torn`` (a write a crash interrupted) or ``truncated`` (the file got shorter
    #: under the reader).
    why: str = "corrupt"
    #: Lines that the damaged bytes held, where the batches around them tell (0: unknown or none).
    lines: int = 0


LogItem = LinesBlock | LargeLinesBlock | GapMarker | LogEnd | RetentionCut | Damaged


class Idle:
    """A following read is about to wait for new lines (with ``idle_marks``): time to flush."""

    __slots__ = ()


IDLE = Idle()
