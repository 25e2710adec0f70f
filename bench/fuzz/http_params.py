"""Fuzz target: the log server's query string, parsed as aiohttp parses it, then validated.

`podmortem.logs.serving.http.parse_query` documents `BadParams`; any other exception is a finding.
A query string yarl itself refuses never reaches the handler and is skipped.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

import _harness

SEEDS = ("tests/fixtures/fuzz/http_params/seed-*",)


def check(data: bytes) -> None:
    import yarl

    from podmortem.logs.serving import http

    try:
        query = yarl.URL("/logs/ns/pod?" + data.decode("latin-1")).query
    except (ValueError, UnicodeError):
        return
    with contextlib.suppress(http.BadParams):
        http.parse_query(query)


if __name__ == "__main__":
    _harness.main(check)
