"""RFC 6902 JSON Patch, applied as the API server applies an admission webhook's patch.

The operations the webhook may send (``add``, ``replace``, ``remove``, ``test``) on JSON
Pointers (RFC 6901, ``~1`` and ``~0`` escapes, ``-`` for the end of an array), strictly: a path
that does not exist is an error, as it is for the API server (the pod is then refused, or, with
``failurePolicy: Ignore``, admitted unchanged). Where the ``jsonpatch`` package is installed the
tests apply the patch with it too and compare.
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """The patch does not apply to the document."""


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"not a JSON pointer: {pointer!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(container: list[Any], token: str, *, adding: bool) -> int:
    if token == "-" and adding:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"bad array index {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not adding):
        raise PatchError(f"array index {index} out of range")
    return index


def apply(document: Any, patch: list[dict[str, Any]]) -> Any:
    """``document`` with ``patch`` applied (a copy)."""
    doc = copy.deepcopy(document)
    for op in patch:
        kind, tokens = op["op"], _tokens(op["path"])
        if not tokens:
            raise PatchError("patching the whole document is not done by a webhook")
        parent: Any = doc
        for token in tokens[:-1]:
            if isinstance(parent, dict):
                if token not in parent:
                    raise PatchError(f"{op['path']}: {token!r} does not exist")
                parent = parent[token]
            elif isinstance(parent, list):
                parent = parent[_index(parent, token, adding=False)]
            else:
                raise PatchError(f"{op['path']}: not a container at {token!r}")
        last = tokens[-1]
        if kind == "add":
            value = copy.deepcopy(op["value"])
            if isinstance(parent, dict):
                parent[last] = value
            elif isinstance(parent, list):
                parent.insert(_index(parent, last, adding=True), value)
            else:
                raise PatchError(f"{op['path']}: parent is not a container")
        elif kind in ("replace", "remove", "test"):
            if isinstance(parent, dict):
                if last not in parent:
                    raise PatchError(f"{op['path']} does not exist")
                key: Any = last
            elif isinstance(parent, list):
                key = _index(parent, last, adding=False)
            else:
                raise PatchError(f"{op['path']}: parent is not a container")
            if kind == "replace":
                parent[key] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del parent[key]
            elif parent[key] != op["value"]:
                raise PatchError(f"test failed at {op['path']}")
        else:
            raise PatchError(f"operation {kind!r} is not one a webhook sends")
    return doc


def apply_checked(document: Any, patch: list[dict[str, Any]]) -> Any:
    """:func:`apply`, and the same result from the ``jsonpatch`` package where it is installed."""
    out = apply(document, patch)
    try:
        import jsonpatch
    except ImportError:
        return out
    assert jsonpatch.apply_patch(document, patch) == out
    return out
