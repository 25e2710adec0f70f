"""Memory quantities as the kubelet reads a limit."""

from __future__ import annotations

import pytest

from podmortem import quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("256Mi", 256 * 2**20),
        ("1Gi", 2**30),
        ("1.5Ki", 1536),
        ("512M", 512 * 10**6),
        ("1e3", 1000),
        ("100", 100),
        (" 2Gi ", 2 * 2**30),
        ("0.5", 1),
        (".5Ki", 512),
        (4096, 4096),
    ],
)
def test_parse_bytes(text: str | int, expected: int) -> None:
    assert quantity.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "Mi", "256MB", "-1Gi", "1.2.3", "ten"])
def test_bad_quantities_say_what_is_accepted(text: str) -> None:
    with pytest.raises(quantity.BadQuantity, match="256Mi"):
        quantity.parse_bytes(text)


def test_format_mib_is_exact() -> None:
    assert quantity.format_mib(256 * 2**20) == "256Mi"
    assert quantity.format_mib(2**30) == "1Gi"
    assert quantity.format_mib(1536) == "1536"
    assert quantity.format_mib(3 * 1024) == "3Ki"
    assert quantity.format_mib(1000) == "1000"
