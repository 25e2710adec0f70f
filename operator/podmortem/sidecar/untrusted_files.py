"""Reading files in a mount the trainer may control: only the kernel's cgroup files, bounded, never blocking.

The trainer's cgroup is read through ``/proc/<pid>/root``, the trainer's own mount namespace. A
trainer that can make a user namespace can mount anything there: a tmpfs of made-up numbers, a
FIFO that blocks a reader for ever, a 2 GiB sparse file, or one real cgroup file bound over
another. So every file is opened with ``O_NONBLOCK | O_NOFOLLOW`` relative to the directory the
sidecar holds open, and read only when:

- ``fstat`` says it is a regular file (cgroup files are; a FIFO, a socket or a device is refused);
- ``fstatfs`` says it is on a cgroup filesystem (`CGROUP_SUPER_MAGIC` v1, `CGROUP2_SUPER_MAGIC` v2),
  so its contents are the kernel's own: Python has no ``fstatfs``, so libc's is called through
  ctypes (``int fstatfs(int fd, struct statfs *buf)``; ``f_type`` is the struct's first member, a
  C ``long`` on every Linux ABI);
- its mount is the directory's (``mnt_id`` of ``/proc/self/fdinfo/<fd>``), so nothing was mounted
  over that one file;
- and at most a stated number of bytes is read (one more is asked for, to tell a longer file).

Any refusal raises `FileRefused`, an ``OSError`` (``EPERM``-free: errno ``EINVAL``) whose text says
which check failed; callers treat it like a missing file and say so in the evidence.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from functools import cache

#: ``f_type`` of a cgroup v1 and a cgroup v2 filesystem (linux/magic.h).
CGROUP_SUPER_MAGIC = 0x27E0EB
CGROUP2_SUPER_MAGIC = 0x63677270
CGROUP_MAGICS = frozenset({CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC})
#: Bytes of ``struct statfs`` reserved for the call: 120 on x86_64 and aarch64; twice that is safe.
_STATFS_BYTES = 256

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


class FileRefused(OSError):
    """A file that is not what the kernel's cgroup file would be; ``str(exc)`` says which check failed."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EINVAL, message)

    def __str__(self) -> str:
        return str(self.strerror)


@cache
def _libc_fstatfs() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: libc's, no ldconfig run
        fstatfs = libc.fstatfs
    except (OSError, AttributeError):
        return None
    fstatfs.argtypes = (ctypes.c_int, ctypes.c_void_p)
    fstatfs.restype = ctypes.c_int
    return fstatfs


def filesystem_type(fd: int) -> int:
    """``f_type`` of the filesystem ``fd`` is on (libc ``fstatfs``); raises OSError when it fails."""
    fstatfs = _libc_fstatfs()
    if fstatfs is None:
        raise OSError(errno.ENOSYS, "libc has no fstatfs")
    buffer = ctypes.create_string_buffer(_STATFS_BYTES)
    if fstatfs(fd, buffer) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(ctypes.c_long.from_buffer(buffer).value) & 0xFFFFFFFF


def mount_id(fd: int) -> int | None:
    """The mount ``fd`` is on (``mnt_id`` of the sidecar's own /proc/self/fdinfo), None if unsaid."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as info:
            text = info.read(4096)
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(b"mnt_id:"):
            value = line[7:].strip()
            return int(value) if value.isdigit() else None
    return None


def check_directory(fd: int) -> None:
    """Refuse a directory that is not on a cgroup filesystem."""
    kind = filesystem_type(fd)
    if kind not in CGROUP_MAGICS:
        raise FileRefused(f"on a filesystem of type 0x{kind:x}, not a cgroup filesystem")


def read_bounded(
    dir_fd: int, name: str, *, max_bytes: int, cgroupfs: bool, dir_mount: int | None = None
) -> str:
    """The text of ``name`` in the directory ``dir_fd``, at most ``max_bytes`` bytes (module docstring).

    ``cgroupfs``: the file must be on a cgroup filesystem and (``dir_mount`` given) on the directory's
    mount. Off only for test trees of plain files, which are not the kernel's.
    """
    fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{name} is not a regular file")
        if cgroupfs:
            kind = filesystem_type(fd)
            if kind not in CGROUP_MAGICS:
                raise FileRefused(f"{name} is on a filesystem of type 0x{kind:x}, not a cgroup filesystem")
            if dir_mount is not None and mount_id(fd) != dir_mount:
                raise FileRefused(f"{name} is on another mount than its directory (mounted over)")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise FileRefused(f"{name} is over {max_bytes} bytes")
        return b"".join(chunks).decode("utf-8", "replace")
    except BlockingIOError as exc:
        raise FileRefused(f"{name} would block") from exc
    finally:
        os.close(fd)
