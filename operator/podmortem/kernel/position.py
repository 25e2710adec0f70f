"""Where the agent stopped reading /dev/kmsg, kept on disk so a restart resumes instead of rescanning.

Sequence numbers restart at every boot, so the position carries the boot id
(``/proc/sys/kernel/random/boot_id``). The rule at start:

- no saved position: start at the end of the buffer (history before the first
  start is not this agent's to report, and a node's buffer can hold days);
- saved position from this boot: resume right after it;
- saved position from another boot: start at the beginning of this boot's
  buffer, since none of it has been seen.

Writes are atomic (temporary file, fsync, rename), so a crash mid-write leaves
the previous position, never a torn file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from podmortem import files


@dataclass(frozen=True)
class KmsgPosition:
    """The last sequence number fully processed, and the boot it belongs to."""

    boot_id: str
    seq: int


def read_boot_id(proc_root: Path) -> str:
    try:
        return (proc_root / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def load(path: Path) -> KmsgPosition | None:
    """The saved position, or None when there is none or it is unreadable (a fresh start)."""
    data = files.read_json(path)
    try:
        return KmsgPosition(boot_id=str(data["boot_id"]), seq=int(data["seq"]))  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return None


def save(path: Path, position: KmsgPosition) -> None:
    files.write_json_atomic(path, {"boot_id": position.boot_id, "seq": position.seq})


def start_after(saved: KmsgPosition | None, *, boot_id: str) -> int | None:
    """The sequence number to read after: None = from the end now; -1 = from the very beginning."""
    if saved is None:
        return None
    if boot_id and saved.boot_id != boot_id:
        return -1
    return saved.seq
