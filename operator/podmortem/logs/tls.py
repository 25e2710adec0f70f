"""The log server's TLS certificate, reloaded in place when its files are replaced.

cert-manager renews a certificate by rewriting its Secret, and the kubelet swaps the mounted
files (a symlink flip, so the inode changes). A context loaded once would serve the old, soon
expired, certificate until a restart; this one is checked every ``interval_s`` and loaded
again into the same ``SSLContext``, which new connections then use. A pair that does not load
(half written, mismatched) keeps the previous one and is logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from pathlib import Path

logger = logging.getLogger(__name__)

Stamp = tuple[tuple[int, int, int], ...]


def _stamp(*paths: Path) -> Stamp:
    out = []
    for p in paths:
        st = os.stat(p)
        out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


class ServerCertificate:
    """A server ``SSLContext`` over a PEM certificate chain and key that may be replaced."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp = _stamp(cert_file, key_file)
        self.context.load_cert_chain(cert_file, key_file)  # raises: a bad pair at start is an error
        #: Times the files were loaded again after a change.
        self.reloads = 0

    def reload_if_changed(self) -> bool:
        """Load the files again if they changed since the last load; True when a new pair is in use."""
        try:
            stamp = _stamp(self.cert_file, self.key_file)
        except OSError as exc:
            logger.warning("log API TLS: cannot read %s or %s: %s", self.cert_file, self.key_file, exc)
            return False
        if stamp == self._stamp:
            return False
        try:
            # A scratch context first: a pair that fails half way must not leave the live one with a
            # new certificate and the old key.
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(self.cert_file, self.key_file)
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            logger.warning("log API TLS: the replaced certificate does not load; keeping the previous one: "
                           "%s", exc)
            return False
        self._stamp = stamp
        self.reloads += 1
        logger.info("log API TLS: loaded the renewed certificate %s", self.cert_file)
        return True

    async def watch(self, *, interval_s: float = 30.0) -> None:
        """Check for new files every ``interval_s`` until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.to_thread(self.reload_if_changed)
