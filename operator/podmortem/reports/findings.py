"""A finding: one thing the diagnosis concluded, said plainly, with its numbers and what to do."""

from __future__ import annotations

import enum

from pydantic import BaseModel, Field

EvidenceValue = int | float | str | bool | list[int] | None


class Severity(enum.StrEnum):
    #: The cause of the kill (memcg-limit, global-oom, eviction, sigkill-not-oom).
    CRITICAL = "critical"
    #: Something that grew memory or hid the cause; worth fixing.
    WARNING = "warning"
    #: Context that helps read the record correctly.
    INFO = "info"


class Finding(BaseModel):
    """One conclusion. ``code`` is stable: tools and alerts match on it, people read ``message``."""

    code: str
    severity: Severity
    #: One plain sentence an on-call engineer understands at 3 a.m.
    message: str
    #: The numbers behind it (bytes, pids, paths), so the sentence can be checked.
    evidence: dict[str, EvidenceValue] = Field(default_factory=dict)
    #: What to do about it.
    action: str = ""
