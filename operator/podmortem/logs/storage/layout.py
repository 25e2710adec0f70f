"""Where the log store keeps what: its directory layout, and the names allowed into its paths.

Layout::

    <root>/<namespace>/<job>/<pod>/<container>/<instance>/
        instance.json         the container ID of this instance (written once, atomically)
        00000000.seg ...      segments: batches of lines, gap and end markers (see segments.py)
        cursor.json           only once retention deleted the last segment: its resume point

``<instance>`` is a 4-digit sequence per container: a container restart (a new
``containerID``) starts a new instance, as the kubelet starts a new log file.
A pod outside any job is filed under its own name as the job. Names become path components, so
only Kubernetes names are let in (`check_name`), and nothing is read or written through a
symbolic link planted in the store (`no_links`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from podmortem import files
from podmortem.logs.storage import retention

#: The lock file that keeps a second writer out (one process writes a store).
LOCK_NAME = ".lock"

#: Matched whole (``fullmatch``): ``$`` would let a trailing newline through into a path.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
#: Namespaces and containers are RFC 1123 labels: no dots, at most 63 characters.
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_KINDS = frozenset({"namespace", "container"})


def check_name(kind: str, name: str) -> str:
    """Accept only Kubernetes object names: they become path components."""
    rule = _LABEL if kind in _LABEL_KINDS else _NAME
    if not isinstance(name, str) or not rule.fullmatch(name):
        shown = name if not isinstance(name, str) or len(name) <= 80 else name[:80] + "..."
        raise ValueError(f"{kind} {shown!r} is not a valid Kubernetes name")
    return name


def segment_name(seq: int) -> str:
    """The file name of an instance's segment ``seq``."""
    return f"{seq:08d}{retention.SEGMENT_SUFFIX}"


def instance_dir_name(seq: int) -> str:
    """The directory name of a container's instance ``seq``."""
    return f"{seq:04d}"


def create_instance_dir(path: Path, meta: dict[str, Any]) -> bool:
    """Make an instance's directory and write its meta (atomically, fsynced): blocking file I/O.

    True when this made the job's directory (``path``'s great-grandparent): the job holds nothing
    else yet, so its bytes need no count from disk.
    """
    job_dir = path.parent.parent.parent
    made_job = not job_dir.exists()
    path.mkdir(parents=True, exist_ok=True)
    files.write_json_atomic(path / retention.INSTANCE_META, meta)
    return made_job


def no_links(root: Path, path: Path) -> bool:
    """No component of ``path`` below ``root`` is a symbolic link (of those that exist)."""
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            return False
    return True
