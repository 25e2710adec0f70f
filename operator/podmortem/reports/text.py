"""Cutting a report's text to fit, the one way every part of a report does it.

Annotations, job sections, Events and pages have size limits, so long texts (a finding's
message, a log line quoted as a pod's cause, an error) are cut. A cut in the middle of a word,
without a mark, reads like a whole text that says something else ("... (evidence.kernelR"):
so a cut ends at the last word that fits and says so with an ellipsis. Pure.
"""

from __future__ import annotations

#: What ends a cut text (one character).
ELLIPSIS = "…"


def shorten(text: str, limit: int) -> str:
    """``text`` when it has at most ``limit`` characters; else its start, cut at a word, plus ``…``.

    The result has at most ``limit`` characters (the ellipsis included). It ends at the last
    whitespace within the limit; only a first word longer than the limit is cut inside, as far
    as fits. A ``limit`` below 1 gives the empty string.
    """
    if len(text) <= limit:
        return text
    if limit < 1:
        return ""
    room = limit - len(ELLIPSIS)
    # the character just past the room may be the space that ends the last word that fits
    end = next((i for i in range(room, 0, -1) if text[i].isspace() and not text[i - 1].isspace()), room)
    return text[:end] + ELLIPSIS
