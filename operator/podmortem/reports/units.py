"""Byte and page units as kernel OOM records print them, and one way to show them to people."""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

#: The page size assumed for task-table values (printed in pages) when the record does not tell.
DEFAULT_PAGE_SIZE = 4096


def human_bytes(value: int | float | None) -> str:
    """``133636096`` → ``"127.4 MiB"``: binary units, one decimal, for tables and sentences."""
    if value is None:
        return "?"
    size = float(value)
    sign = "-" if size < 0 else ""
    size = abs(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{sign}{size:.0f} {unit}" if unit == "B" else f"{sign}{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover
