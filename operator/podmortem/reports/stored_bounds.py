"""The bounds a stored report is read within, before `ReportDocument.parse` reads it.

Anyone who may edit an object can edit the report stored on it (a TrainingJob's
``status.failureReport``, the ``podmortem.io/failure-report`` annotation), and a person may hand
``podmortem report`` any file. So a document too big, nested too deep or not a JSON object is
`Unreadable`, never a RecursionError out of a handler or a page of any size.
"""

from __future__ import annotations

import json
import math
from typing import Any

from podmortem.errors import PodmortemError

#: Bytes of JSON a stored report may take to be read back. The operator writes at most
#: ``--status-report-max-bytes`` (16 KiB by default, 1 MiB at most) into a status and
#: ``--annotation-report-max-bytes`` (4 KiB, 256 KiB at most) into the annotation; a bigger
#: document was not written by it, and parsing or drawing it would cost memory for nothing.
MAX_BYTES = 1 << 20
#: Bytes of the annotation: all of an object's annotations together are capped at 256 KiB by the
#: API server, which is also the most ``--annotation-report-max-bytes`` accepts.
ANNOTATION_MAX_BYTES = 256 << 10
#: Nesting depth of a stored report. The operator's documents are 6 levels deep at most
#: (``evidence.workingSet.points[i][j]``); a much deeper one is an edit, and Python's JSON
#: parser and ``str()`` recurse (RecursionError at about 1,000 levels).
MAX_DEPTH = 32
#: Integers read back lie in int64, ``-MAX_INT`` to ``MAX_INT - 1``: what Kubernetes keeps as an
#: integer (the real API server turns 2**63 into the float 9223372036854775808.0, so a report holding
#: it would not read back as written); a bigger one (Python parses any) would overflow a float where
#: the page scales or formats it.
MAX_INT = 1 << 63


class Unreadable(PodmortemError, ValueError):
    """A stored report that is not read back: too big, too deep, not JSON or not an object."""


def parse_annotation(raw: object) -> dict[str, Any]:
    """The ``podmortem.io/failure-report`` annotation's JSON object, within the bounds above.

    Raises `Unreadable` (and nothing else) for any other value: the bytes are counted before
    parsing, and the parser's own RecursionError, ValueError and TypeError are caught.
    """
    if not isinstance(raw, str):
        raise Unreadable(f"the annotation is not text but {type(raw).__name__}")
    size = len(raw) if len(raw) > ANNOTATION_MAX_BYTES else len(raw.encode("utf-8", "surrogatepass"))
    if size > ANNOTATION_MAX_BYTES:
        raise Unreadable(
            f"{size:,} bytes of JSON or more, over the {ANNOTATION_MAX_BYTES:,} an annotation may take"
        )
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise Unreadable(f"nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, TypeError) as exc:
        raise Unreadable(f"not JSON: {str(exc)[:100]}") from None
    return checked(doc)


def checked(document: object) -> dict[str, Any]:
    """``document`` (parsed JSON, e.g. a ``status.failureReport``) if it is an object within the bounds.

    The walk is iterative, so a document of any depth is measured without recursing;
    raises `Unreadable` otherwise.
    """
    if not isinstance(document, dict):
        raise Unreadable(f"not a JSON object but {type(document).__name__}")
    size = 0
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise Unreadable(f"nested deeper than {MAX_DEPTH} levels")
            size += 2
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                size += len(key) + 4 if isinstance(key, str) else 1
                stack.append((item, depth + 1))
        elif isinstance(value, str):
            size += len(value) + 2
        elif isinstance(value, bool) or value is None:
            size += 5
        elif isinstance(value, int):
            if not -MAX_INT <= value < MAX_INT:
                raise Unreadable("a number beyond 64 bits")
            size += 20
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise Unreadable("a number that is not finite")
            size += 24
        else:
            raise Unreadable(f"not JSON: a {type(value).__name__}")
        if size > MAX_BYTES:
            raise Unreadable(f"over {MAX_BYTES:,} bytes of JSON, the most a stored report may take")
    return document
