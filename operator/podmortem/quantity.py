"""Kubernetes resource quantities for memory (``256Mi``, ``1G``, ``512000k``), read as the kubelet reads them.

Used wherever a size comes from a Kubernetes object or the chart: a pod's memory limit
(the demo's kubelet), an emptyDir's ``sizeLimit`` (the /dev/shm finding, the log store's
budget). One reading of the notation the apiserver accepts.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from podmortem.errors import PodmortemError

_SUFFIXES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?([a-zA-Z]*)\s*$")


class BadQuantity(PodmortemError, ValueError):
    """Not a Kubernetes quantity; ``str(exc)`` names the value and what is accepted."""


def parse_bytes(value: str | int) -> int:
    """A memory quantity in bytes, rounded up like the kubelet does (``1.5Ki`` → 1536)."""
    if isinstance(value, int):
        if value < 0:
            raise BadQuantity(f"memory quantity {value} is negative")
        return value
    match = _QUANTITY.match(value)
    suffix = match.group(3) if match else ""
    if match is None or suffix not in _SUFFIXES:
        raise BadQuantity(
            f"{value!r} is not a memory quantity; use e.g. 256Mi, 1Gi, 512M or a plain number of bytes"
        )
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise BadQuantity(f"{value!r} is not a memory quantity") from exc
    if match.group(2):
        number = number.scaleb(int(match.group(2)))
    total = number * _SUFFIXES[suffix]
    whole = int(total)
    return whole + (1 if total > whole else 0)


def format_mib(value: int) -> str:
    """Bytes as the shortest exact quantity the demo prints: ``256Mi``, ``1Gi``, or plain bytes."""
    for suffix in ("Gi", "Mi", "Ki"):
        size = _SUFFIXES[suffix]
        if value and value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)
