"""A service-account token rotated under a reader that has read it, as the kubelet swaps a projected
token: the file's content changes and its times do not, so nothing but a refused request says so."""

from __future__ import annotations

import os
from pathlib import Path

from podmortem.kube.config import ClusterAccess


def rotate_unnoticed(token: Path, new: str) -> None:
    """Write ``new`` into ``token`` and put its times back: only a 401 can tell it changed."""
    before = token.stat()
    token.write_text(new)
    os.utime(token, ns=(before.st_atime_ns, before.st_mtime_ns))


def access_with_rotated_token(tmp_path: Path, *, server: str = "") -> ClusterAccess:
    """Access whose token file read ``old`` (and keeps it) and now holds ``new``, unnoticed."""
    token = tmp_path / "token"
    token.write_text("old")
    access = ClusterAccess(server=server, token_file=token)
    access.headers()  # read now: "old"
    rotate_unnoticed(token, "new")
    return access
