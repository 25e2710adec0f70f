"""The kernel log through syslog(2), for containers that may not open /dev/kmsg.

Container runtimes allow a hostPath /dev/kmsg only to privileged containers
(node-problem-detector#698); syslog(2) needs nothing but CAP_SYSLOG. glibc and
musl expose it as ``klogctl``. ``SYSLOG_ACTION_READ_ALL`` copies the ring buffer
as text and, unlike ``SYSLOG_ACTION_READ``, consumes nothing, so the agent does
not steal lines from a host's klogd. The buffer's size is asked for first
(``SYSLOG_ACTION_SIZE_BUFFER``), so a node booted with a large ``log_buf_len``
is read whole.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from typing import Any

from podmortem.errors import PodmortemError

#: From include/linux/syslog.h.
SYSLOG_ACTION_READ_ALL = 3
SYSLOG_ACTION_SIZE_BUFFER = 10


class SyslogUnavailable(PodmortemError, OSError):
    """syslog(2) cannot be used here: no klogctl (not Linux), or no CAP_SYSLOG (``str()`` says which)."""


_klogctl: Any = None


def _function() -> Any:
    global _klogctl
    if _klogctl is None:
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name, use_errno=True)
            function = libc.klogctl
        except (OSError, AttributeError) as exc:
            raise SyslogUnavailable(
                errno.ENOSYS, f"klogctl is not available in {name or 'libc'}: {exc}"
            ) from exc
        function.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int)
        function.restype = ctypes.c_int
        _klogctl = function
    return _klogctl


def _call(action: int, buffer: Any, size: int) -> int:
    result = int(_function()(action, buffer, size))
    if result < 0:
        code = ctypes.get_errno()
        hint = " (reading the kernel log needs CAP_SYSLOG)" if code == errno.EPERM else ""
        raise SyslogUnavailable(code, f"syslog(2) action {action}: {os.strerror(code)}{hint}")
    return result


def buffer_size() -> int:
    """Bytes in the kernel's log ring buffer (``log_buf_len``)."""
    return _call(SYSLOG_ACTION_SIZE_BUFFER, None, 0)


def read_all() -> bytes:
    """The whole ring buffer as ``<prio>[seconds] message`` lines; consumes nothing."""
    size = buffer_size()
    buffer = ctypes.create_string_buffer(size)
    used = _call(SYSLOG_ACTION_READ_ALL, buffer, size)
    return buffer.raw[:used]
