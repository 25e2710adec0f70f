"""A JSON merge patch applied as the real API server applies one.

RFC 7386: objects merge member by member, a member whose value is null is removed, anything else
replaces. The API server (evanphx/json-patch's ``MergePatch``) also prunes every value it takes
from the patch: a null object member is dropped at any depth, in objects inside arrays too, while
a null array item stays. Measured on kube-apiserver v1.36 (tests/controlplane/test_status_schema.py,
``merged``). kmock applies RFC 7386 alone, so an object member set to null inside an array came
back as null from the emulation and was gone on a real cluster.
"""

from __future__ import annotations

from typing import Any


def pruned(value: Any) -> Any:
    """``value`` as the API server keeps it when a merge patch sets it: null object members dropped
    at any depth (inside arrays too), null array items kept."""
    if isinstance(value, dict):
        return {k: pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [pruned(v) for v in value]
    return value


def applied(stored: Any, patch: Any) -> Any:
    """``stored`` after the merge patch ``patch``."""
    if not isinstance(patch, dict):
        return pruned(patch)
    result = dict(stored) if isinstance(stored, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = applied(result[key], value)
        else:
            result[key] = pruned(value)
    return result


def as_kmock_patch(patch: Any) -> Any:
    """``patch`` for kmock's RFC 7386 merge to give what `applied` gives: the arrays in it pruned
    beforehand (kmock already drops null members of the objects it merges or adds); the nulls that
    remove a member stay."""
    if isinstance(patch, dict):
        return {k: as_kmock_patch(v) for k, v in patch.items()}
    return pruned(patch)
