"""The token of an ``Authorization: Bearer <token>`` header, taken only as RFC 6750 spells it.

A header is whatever the client sent: aiohttp hands over its bytes decoded as UTF-8 with lone
surrogates for the rest, so ``Bearer \\xff`` reaches a handler as a string that cannot be encoded
again, and hashing or comparing it raised (a 500 with a traceback, and no failure counted). A
token is therefore checked against RFC 6750's ``b64token`` (ASCII letters, digits and
``-._~+/``, then ``=`` padding) before anything else looks at it; anything else is no token, and
its server answers 401. Kubernetes' tokens (JWTs, ``<id>.<secret>`` bootstrap tokens) and the
agent's generated token all fit.
"""

from __future__ import annotations

import re

#: RFC 6750 section 2.1: ``b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="``.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
#: Longest token taken (a service account JWT is 1-2 KiB; aiohttp caps a header line at 8 KiB).
MAX_TOKEN = 8190


class NotBearer(ValueError):
    """The header holds no well-formed bearer token; ``reason`` says what is wrong, for a 401."""


def token(authorization: str | None) -> str:
    """The token of the header; raises :class:`NotBearer` for anything but ``Bearer <b64token>``."""
    if not authorization:
        raise NotBearer("missing Authorization: Bearer token")
    scheme, _, value = authorization.partition(" ")
    value = value.strip(" \t")
    if scheme.lower() != "bearer" or not value:
        raise NotBearer("the Authorization header must be 'Bearer <token>'")
    if len(value) > MAX_TOKEN or not _B64TOKEN.fullmatch(value):
        raise NotBearer("the bearer token is malformed (RFC 6750: ASCII letters, digits and -._~+/ only)")
    return value
