"""asyncio's TLS read buffer, 256 KiB for every connection, cut to one TLS record (16 KiB).

``asyncio.sslproto.SSLProtocol`` (CPython 3.11 and later) gives each TLS connection a zero-filled
``bytearray`` of ``max_size`` bytes, 256 KiB, that it reads the socket into, and reads up to as much
plaintext at a time. The operator holds one log stream per followed pod, each a TLS connection to
the API server: against a real control plane that buffer was most of its memory
(``bench/operator_scale.py --cluster real``: 448 MiB with 1,000 followed pods, 328 KiB a pod,
against 209 MiB and 86 KiB a pod with 16 KiB; 10,000 pods would have held 2.5 GiB of buffers). The
emulated cluster serves plain HTTP, which is why its figures never showed it.

A TLS record carries at most 16 KiB of plaintext (RFC 8446, section 5.1), so a 16 KiB buffer still
takes a whole record per read; a bulk transfer costs more turns of the loop, which a log stream
(lines, a few KiB a second) does not notice. The buffer is the class's, so this is set once per
process, at start-up (``podmortem operator``), before any connection is made.
"""

from __future__ import annotations

import asyncio.sslproto

#: Bytes read at a time per TLS connection: the largest plaintext of one TLS record.
READ_BUFFER_BYTES = 16 * 1024


def shrink(size: int = READ_BUFFER_BYTES) -> int | None:
    """Make TLS connections opened from now on read ``size`` bytes at a time; the size before.

    None (and nothing changed) where asyncio has no such buffer (an implementation before 3.11's).
    """
    protocol = asyncio.sslproto.SSLProtocol
    before = getattr(protocol, "max_size", None)
    if not isinstance(before, int):
        return None
    protocol.max_size = size
    return before
