"""A log store's running totals since it opened: what its metrics export when scraped."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StoreTotals:
    """Counted by the write path, the damage ledger and the store; read by ``metrics.StoreCollector``."""

    #: Lines and bytes stored since the store opened.
    lines_total: int = 0
    bytes_total: int = 0
    #: Gap markers stored since the store opened.
    gaps_total: int = 0
    #: Damaged bytes found in segments (at a load or by a reader), each range counted once.
    corrupt_bytes_total: int = 0
    #: Since when (epoch seconds) writes fail for a full volume; None while they succeed.
    full_since: float | None = None
