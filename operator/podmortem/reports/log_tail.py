"""How much of a container's log a failure report keeps: its last lines, each clipped, bounded in bytes.

The operator keeps such a tail of every followed container (`podmortem.operator.followed_pods`), and
``podmortem diagnose`` of a training log it is given (`podmortem.diagnosis.offline`,
`podmortem.cli.diagnose_inputs`): the same lines then reach the same rules, so both take the bounds
and the clipping from here.
"""

from __future__ import annotations

#: Log lines kept per container for the report: a traceback's end and torch's messages fit in 50.
TAIL_LINES = 50
#: Bytes kept of one line; the rest is cut, with a marker saying how much. CUDA OOM, NCCL and
#: Python exception messages say what they are in their first few hundred bytes (torch's longest,
#: the 2.x CUDA OOM, is under 1 KiB), while a progress bar redrawn with ``\r`` can be megabytes.
TAIL_LINE_BYTES = 4096
#: Bytes kept per container, markers included: 50 lines of up to ~1.3 KiB each, or at least 15
#: clipped ones: 2 pods x 3 containers printing 16 MiB lines would otherwise hold 4.9 GB.
TAIL_BYTES = 64 * 1024


def clip(head: bytes, length: int, start: int = 0) -> bytes:
    """The line of ``length`` bytes at ``head[start:]``, cut at `TAIL_LINE_BYTES` (never inside a UTF-8
    character) with a marker saying how many bytes were left out.

    ``head`` need hold only the line's first ``TAIL_LINE_BYTES + 1`` bytes (a reader of a line of a
    gigabyte keeps no more), and only what is kept is copied (a 16 MiB line inside a block is not).
    """
    if length <= TAIL_LINE_BYTES:
        return head[start:start + length]
    cut = start + TAIL_LINE_BYTES
    for _ in range(3):  # back up over UTF-8 continuation bytes to a character's start
        if head[cut] & 0xC0 != 0x80:
            break
        cut -= 1
    return head[start:cut] + b" [podmortem: %d more bytes]" % (start + length - cut)
