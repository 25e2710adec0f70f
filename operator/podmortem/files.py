"""Small state files written whole: a JSON file is replaced atomically, never left torn or half-written.

The agent's kernel-log position and records, the log store's instance metadata,
tombstones and per-job retention all go through here, so a crash at any moment
leaves either the old file or the new one, and no temporary file behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path


def write_json_atomic(path: Path, data: object) -> None:
    """Replace ``path`` with ``data`` as JSON: a temporary file beside it, fsync, rename."""
    write_text_atomic(path, json.dumps(data))


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: a new temporary file beside it (no link followed), fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> object | None:
    """The file's JSON, or None when it is missing or unreadable (a fresh start, never an error)."""
    try:
        data: object = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def open_nofollow(path: os.PathLike[str] | str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symbolic link as the last component (ELOOP).

    The log store's files are ours: a link planted inside the store directory must not make
    a reader serve, or retention delete, a file outside it.
    """
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def read_nofollow(path: os.PathLike[str] | str) -> bytes:
    """The whole file, refusing a symbolic link (see `open_nofollow`)."""
    fd = open_nofollow(path, os.O_RDONLY)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def is_real_dir(path: os.PathLike[str] | str) -> bool:
    """A directory that is not a symbolic link (``Path.is_dir`` follows links)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode)
