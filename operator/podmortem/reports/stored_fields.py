"""Fields read from a stored report document, in either of its forms, whatever was edited in it.

A report is kept whole in the job's status and as a summary in the pod's annotation; both may
have been edited by hand. What several readers (the operator, the report page, the demo) take
from it is read here once, each field checked for its type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def kernel_record_state(document: Mapping[str, Any] | None) -> str | None:
    """``attached``, ``pending``, ``not-found`` or ``not-sought``: ``evidence.kernelRecord.state``
    of a status report, or the annotation summary's ``kernelRecord``; None when absent or malformed.
    """
    if not isinstance(document, Mapping):
        return None
    summary_state = document.get("kernelRecord")  # the annotation's summary keeps the state alone
    if isinstance(summary_state, str):
        return summary_state
    evidence = document.get("evidence")
    record = evidence.get("kernelRecord") if isinstance(evidence, Mapping) else None
    state = record.get("state") if isinstance(record, Mapping) else None
    return state if isinstance(state, str) else None
