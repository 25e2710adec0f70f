"""Diagnosis rules: pure functions from evidence to findings, and ``diagnose`` that runs them all.

Each rule returns a `Finding` with a stable code, or None when it does not apply.
"""

from podmortem.diagnosis.categories import dominant_category
from podmortem.diagnosis.forks import fork_copies, fork_view, shared_pages_double_counted
from podmortem.diagnosis.from_record import diagnose
from podmortem.diagnosis.kill_causes import eviction, global_oom, memcg_limit, sigkill_not_oom
from podmortem.diagnosis.log_staleness import stale_log

__all__ = [
    "diagnose",
    "dominant_category",
    "eviction",
    "fork_copies",
    "fork_view",
    "global_oom",
    "memcg_limit",
    "shared_pages_double_counted",
    "sigkill_not_oom",
    "stale_log",
]
