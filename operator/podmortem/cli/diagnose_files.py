"""Opening ``podmortem diagnose``'s input files: plain or gzip'ed, a path or standard input, read in
lines of bounded length, and told binary when they are.

Both readers of the command use it: the kernel-text report (`podmortem.cli.diagnose`) and the reading
of pod objects, describe output and training logs (`podmortem.cli.diagnose_inputs`).
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Iterator
from typing import IO

#: Bytes looked at to tell a binary file from a log, for the error message.
SNIFF_BYTES = 8192

#: Bytes of one line handed to the kernel parser; the rest of a longer line is skipped unread into
#: memory (the parser keeps 8 KiB of a line: `podmortem.kernel.log_lines.MAX_LINE`).
LINE_MAX = 64 * 1024


def lines(stream: IO[bytes]) -> Iterator[str]:
    """The stream's lines, each cut at `LINE_MAX` bytes: a line without end costs bounded memory (read
    whole, one line of 256 MiB would take 566 MiB)."""
    while raw := stream.readline(LINE_MAX):
        if len(raw) == LINE_MAX and not raw.endswith(b"\n"):
            while (rest := stream.readline(LINE_MAX)) and not rest.endswith(b"\n"):
                pass
            raw += b"\n"
        yield raw.decode("utf-8", errors="replace")


def looks_binary(head: bytes) -> bool:
    """Whether a file's first bytes are binary data rather than text: a NUL, or over a tenth of them
    control characters or invalid UTF-8."""
    if not head:
        return False
    if b"\x00" in head:
        return True
    text = head.decode("utf-8", errors="replace")
    odd = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\r\n\f"))
    return odd > len(text) * 0.1


def open_input(path: str | None) -> tuple[IO[bytes], list[IO[bytes]]]:
    """The byte stream to read, and what to close afterwards (stdin is left open)."""
    if path is None:
        return sys.stdin.buffer, []
    raw = open(path, "rb")  # noqa: SIM115 (closed by the caller)
    if raw.peek(2)[:2] == b"\x1f\x8b":
        packed: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]  # messages.1.gz
        return packed, [packed, raw]
    return raw, [raw]
