"""Where a followed container's lines go: the sink interface, and the sinks that are not the store.

A follower hands every batch of lines, in order and exactly once, to a
:class:`LogSink` together with the cursor after them. The sinks:

- ``podmortem.logs.storage.store.PodLogSink``: the durable store (the operator's; ``podmortem logs
  --store``);
- :class:`StdoutSink`: ``podmortem logs`` printing to the terminal;
- :class:`TeeSink`: the store and the terminal at once;
- ``podmortem.operator.followed_pods.WatchingSink``: the store, while keeping what the operator's
  reports need (last line time, gaps, the per-epoch memory lines).

A new sink is one class here implementing :class:`LogSink`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import GapMarker, LogEnd
from podmortem.logs.following.outcomes import Reconnect
from podmortem.logs.lines import LineBatch


class LogSink(Protocol):
    """Receives a container's lines in order, exactly once, together with the advanced cursor.

    A durable sink must persist ``cursor`` atomically with ``lines``: a restart
    then resumes from the stored cursor and neither loses nor repeats a line.

    A sink may also have a ``splits_lines`` attribute (read with ``getattr``, False if missing): True
    when it splits every batch into lines (printing without stamps), so that the parser counts a
    block's lines with that split instead of a scan of its own (``StreamParser.split_lines``).
    """

    async def load_cursor(self, container: str) -> LogCursor | None: ...

    async def write(self, container: str, batch: LineBatch, cursor: LogCursor) -> None: ...

    async def gap(self, marker: GapMarker) -> None: ...

    async def end(self, end: LogEnd) -> None: ...


class StdoutSink:
    """Writes lines to stdout as raw bytes; notes go to stderr.

    Lines are gathered and written in large blocks: when the gathered bytes
    pass :attr:`FLUSH_BYTES`, and whenever the follower waits for the network
    (a flush scheduled with ``call_soon`` runs only when the event loop is idle),
    so a live follow shows each line as soon as it arrived and a fast stream
    costs one ``write`` per megabyte.
    """

    #: Bytes gathered before a write even while more lines are ready.
    FLUSH_BYTES = 1 << 20

    def __init__(self, out: BinaryIO, *, timestamps: bool, prefix: bool | Callable[[str], bytes],
                 err: Any = None) -> None:
        self._out = out
        self._timestamps = timestamps
        #: Tag each line with ``[container]`` (several containers share stdout), or with what the
        #: callable gives for the container (``podmortem logs``: ``pod container``, maybe coloured).
        self.prefix = prefix
        self._err = err if err is not None else sys.stderr
        #: Printing without stamps splits every batch into lines (see `LogSink`).
        self.splits_lines = not timestamps
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._scheduled = False
        self.ends: list[LogEnd] = []

    async def load_cursor(self, container: str) -> LogCursor | None:
        return None

    async def write(self, container: str, batch: LineBatch, cursor: LogCursor) -> None:
        block = batch.text_block(timestamps=self._timestamps)
        if self.prefix:
            # Only "\n" ends a line: "\r" (progress bars) stays inside it, as kubectl prints it.
            tag = self.prefix(container) if callable(self.prefix) else f"[{container}] ".encode()
            block = tag + block[:-1].replace(b"\n", b"\n" + tag) + b"\n"
        self._pending.append(block)
        self._pending_bytes += len(block)
        if self._pending_bytes >= self.FLUSH_BYTES:
            self.flush()
        elif not self._scheduled:
            import asyncio

            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write what was gathered, then flush the stream."""
        self._scheduled = False
        if self._pending:
            data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            self._pending.clear()
            self._pending_bytes = 0
            self._out.write(data)
        self._out.flush()

    def note(self, text: str) -> None:
        """A line on stderr, after the lines printed so far."""
        self.flush()
        print(f"podmortem: {text}", file=self._err, flush=True)

    def reconnect(self, event: Reconnect) -> None:
        wait = f"; retrying in {event.delay_s:.1f} s" if event.delay_s >= 0.05 else "; reconnecting"
        detail = f": {event.detail}" if event.detail else ""
        self.note(f"[{event.container}] stream ended ({event.reason}){detail}{wait}")

    async def gap(self, marker: GapMarker) -> None:
        from podmortem.logs import timestamps

        def when(ts: int | None) -> str:
            return timestamps.format_ns(ts) if ts is not None else "?"
        self.note(f"[{marker.container}] possible gap ({marker.reason}) between "
                  f"{when(marker.after_ts_ns)} and {when(marker.before_ts_ns)}: {marker.detail}")

    async def end(self, end: LogEnd) -> None:
        self.ends.append(end)
        self.flush()


class TeeSink:
    """Stores lines durably first, then prints them; the store's cursor is the resume point."""

    def __init__(self, store_sink: Any, printer: StdoutSink) -> None:
        self._store = store_sink
        self._printer = printer
        self.splits_lines = printer.splits_lines

    async def load_cursor(self, container: str) -> LogCursor | None:
        cursor: LogCursor | None = await self._store.load_cursor(container)
        return cursor

    async def write(self, container: str, batch: LineBatch, cursor: LogCursor) -> None:
        await self._store.write(container, batch, cursor)
        await self._printer.write(container, batch, cursor)

    async def gap(self, marker: GapMarker) -> None:
        await self._store.gap(marker)
        await self._printer.gap(marker)

    async def end(self, end: LogEnd) -> None:
        await self._store.end(end)
        await self._printer.end(end)
