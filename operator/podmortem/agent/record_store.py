"""The kernel records the agent has placed, kept on disk so that a restart does not lose them.

The kernel log position (`position`) moves past a record once it is handed over,
so a record held only in memory would be gone for good if the agent restarted
between the kill and the operator's question. The file is small (records per pod
are bounded, and pods are forgotten when they leave the node) and is written only
when a record is placed or a pod with records is forgotten: at OOM-kill rate,
never at sampling rate. It is written before the position is saved, so a crash in
between repeats a record (dropped again by its key), never loses one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from podmortem import files
from podmortem.reports.oom_record import OomKillRecord

logger = logging.getLogger(__name__)

#: The file's format; a file of another version is ignored (a fresh start), never misread.
VERSION = 1


@dataclass(frozen=True)
class PodRecords:
    """One pod's placed records, with the names its metrics and evidence carry."""

    uid: str
    namespace: str
    name: str
    records: tuple[OomKillRecord, ...]


def save(path: Path, pods: Iterable[PodRecords]) -> None:
    """Replace the file atomically (temporary file, fsync, rename)."""
    files.write_json_atomic(
        path,
        {
            "version": VERSION,
            "pods": [
                {
                    "uid": p.uid,
                    "namespace": p.namespace,
                    "name": p.name,
                    "records": [r.model_dump(mode="json") for r in p.records],
                }
                for p in pods
                if p.records
            ],
        },
    )


def load(path: Path) -> list[PodRecords]:
    """What the file holds; nothing when it is missing, of another version or unreadable (logged)."""
    data = files.read_json(path)
    if data is None:
        return []
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("pods"), list):
        logger.warning("kernel records file %s: not a version %d file; starting without it", path, VERSION)
        return []
    out: list[PodRecords] = []
    for entry in data["pods"]:
        try:
            out.append(
                PodRecords(
                    uid=str(entry["uid"]),
                    namespace=str(entry.get("namespace", "")),
                    name=str(entry.get("name", "")),
                    records=tuple(OomKillRecord.model_validate(r) for r in entry["records"]),
                )
            )
        except (KeyError, TypeError, AttributeError, ValidationError) as exc:
            logger.warning("kernel records file %s: skipping an unreadable entry: %s", path, exc)
    return out
