"""Every verdict and finding code podmortem writes: the one list, which tools and alerts match on.

A verdict is the code of the finding that names the cause; every other finding
adds to it. Adding a verdict is one rule in :mod:`podmortem.diagnosis` plus one
code here; ``tests/reports/test_codes.py`` fails when a rule writes a code not
listed, or the CRD's description of ``failureReport.verdict`` disagrees.
"""

from __future__ import annotations

#: Cause codes, in the order a report picks its verdict (the first cause finding wins).
VERDICTS: tuple[str, ...] = (
    "memcg-limit",
    "global-oom",
    "eviction",
    "sigkill-not-oom",
    # Deaths that are not the kernel OOM killer's (diagnosis.exit_causes), read from the log tail
    # and the pod status: ``eviction`` stays the node-memory-pressure eviction it always was.
    "ephemeral-storage-eviction",
    "node-pressure-eviction",
    "preempted",
    # Another container of the pod (a sidecar) was OOM-killed before this one failed.
    "sidecar-oom",
    "cuda-oom",
    "shm-full",
    "segfault",
    "python-exception",
)

#: Finding codes that add to the verdict.
FINDINGS: tuple[str, ...] = (
    "anon-dominant",
    "shmem-dominant",
    "kernel-dominant",
    "file-dominant",
    # What filled it, finer (issue 22): v2 socket buffers and hugetlb pages (categories of their own,
    # outside v2's ``kernel``), and the parts of kernel and file memory that have a cure of their own.
    "sock-dominant",
    "hugetlb-dominant",
    "slab-dominant",
    "pagetables-dominant",
    "percpu-dominant",
    "kernel-stack-dominant",
    "zswap-dominant",
    "file-dirty-dominant",
    "fork-copies",
    "shared-pages-double-counted",
    "page-tables-large",
    "swapped-out",
    "victim-not-largest",
    "oom-group-kill",
    "runtime-process-killed",
    "no-killable-process",
    "kill-frees-little",
    "stale-log",
    "cuda-fragmentation",
    "exception-chain",
    "memory-growing",
    "sidecar-evidence",
    # The sidecar saw an OOM kill in the container, but the kubelet reports another end (issue 36):
    # the pod's own testimony, beside the kubelet's verdict, never in its place.
    "in-pod-oom-kill",
)

ALL: frozenset[str] = frozenset(VERDICTS + FINDINGS)


def verdict_of(codes: list[str]) -> str | None:
    """The report's verdict: the first cause code among a report's finding codes, in their order."""
    return next((code for code in codes if code in VERDICTS), None)
