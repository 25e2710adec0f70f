"""Deaths that are not the kernel OOM killer's: CUDA OOM, a full /dev/shm, evictions, preemption, crashes.

Most failed training pods never meet the OOM killer: ``torch.OutOfMemoryError`` exits 1, a
DataLoader that fills ``/dev/shm`` dies of SIGBUS, the kubelet evicts for disk, the scheduler
preempts, a node is reclaimed. Each rule here takes plain facts (exit code, pod status, the
`training_log.LogFacts` of the container's tail, the pod's /dev/shm size) and returns a
`Finding` whose code is a verdict, or None. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podmortem import quantity
from podmortem.diagnosis.training_log import LogFacts
from podmortem.kube.bodies import PodBody
from podmortem.reports.findings import Finding, Severity
from podmortem.reports.units import human_bytes

SIGBUS_EXIT = 135
SIGSEGV_EXIT = 139
SIGTERM_EXIT = 143
#: Docker's, containerd's and CRI-O's /dev/shm when the pod mounts nothing there.
RUNTIME_SHM_DEFAULT = 64 * 2**20

def quantity_bytes(text: str) -> int | None:
    """A Kubernetes quantity (``1Gi``, ``512M``, ``64Mi``) in bytes; None if it is not one."""
    try:
        return quantity.parse_bytes(str(text))
    except quantity.BadQuantity:
        return None


@dataclass(frozen=True)
class ShmSize:
    """How big the container's /dev/shm is, and where that comes from."""

    bytes: int | None
    source: str


def shm_size(pod: Mapping[str, Any], container: str) -> ShmSize:
    """/dev/shm of ``container``: a memory-backed emptyDir mounted there, else the runtime's 64 MiB."""
    body = PodBody(pod)
    volumes = {v.get("name"): v for v in body.spec.get("volumes") or []}
    for c in body.containers:
        if c.get("name") != container:
            continue
        for mount in c.get("volumeMounts") or []:
            if str(mount.get("mountPath", "")).rstrip("/") != "/dev/shm":
                continue
            empty = (volumes.get(mount.get("name")) or {}).get("emptyDir")
            if empty is None:
                return ShmSize(None, f"volume {mount.get('name')!r} mounted at /dev/shm (size not known)")
            limit = empty.get("sizeLimit")
            if limit is not None:
                return ShmSize(
                    quantity_bytes(str(limit)), f"emptyDir {mount.get('name')!r} sizeLimit {limit}"
                )
            return ShmSize(
                None,
                f"emptyDir {mount.get('name')!r} without sizeLimit (bounded by the pod's "
                "memory limit, and counted in it)",
            )
    return ShmSize(RUNTIME_SHM_DEFAULT, "the container runtime's default (no volume mounted at /dev/shm)")


def _size(n: int | None) -> str:
    return human_bytes(n) if n is not None else "?"


#: What lowers a framework's GPU memory besides the batch size, by who printed the message.
_GPU_ACTIONS = {
    "PyTorch": "use activation checkpointing or mixed precision, or shard the model (FSDP/ZeRO)",
    "TensorFlow": "use mixed precision, or let the BFC allocator grow instead of taking the whole GPU "
                  "(tf.config.experimental.set_memory_growth) when another process shares it",
    "JAX/XLA": "use rematerialisation (jax.checkpoint) or sharding; XLA_PYTHON_CLIENT_PREALLOCATE=false or "
               "XLA_PYTHON_CLIENT_MEM_FRACTION when another process shares the GPU",
}


def cuda_oom(facts: LogFacts) -> list[Finding]:
    """A GPU ran out of memory, in any framework's words: the numbers the message gives (PyTorch's
    allocator's in full); fragmentation when PyTorch's reserve would have held the request."""
    oom = facts.cuda_oom
    if oom is None:
        return []
    device = f"GPU {oom.device}" if oom.device is not None else "a GPU"
    who = f"The {oom.framework}" if oom.framework == "CUDA runtime" else oom.framework
    if oom.tried is not None:
        parts = [f"{who} could not allocate {_size(oom.tried)} on {device}"]
    else:
        parts = [f"{who} ran out of memory on {device} ({oom.line[:200]})"]
    if oom.total is not None:
        parts.append(f"of {_size(oom.total)} ({_size(oom.free)} free)")
    held = []
    if oom.allocated is not None:
        held.append(f"{_size(oom.allocated)} allocated by PyTorch")
    if oom.reserved_unallocated is not None:
        held.append(f"{_size(oom.reserved_unallocated)} reserved but unallocated")
    if oom.self_seen_as is not None and oom.process_in_use is not None:
        held.append(
            f"{_size(oom.process_in_use)} held by this process in all (its reserve and the CUDA "
            f"context), which PyTorch printed as 'Process {oom.self_seen_as}': the host's pid for it, "
            "seen from another pid namespace (a pod without hostPID), not another process"
        )
    if oom.other_processes:
        held.append(
            f"{len(oom.other_processes)} other process(es) on the device holding "
            f"{_size(sum(b for _, b in oom.other_processes))}"
        )
    message = " ".join(parts) + ("; " + ", ".join(held) if held else "") + "."
    if oom.device is not None:
        message += (
            f" GPU {oom.device} is the index as this process sees it (after CUDA_VISIBLE_DEVICES), "
            "not necessarily the node's."
        )
    findings = [
        Finding(
            code="cuda-oom",
            severity=Severity.CRITICAL,
            message=message,
            evidence={
                "device": oom.device,
                "tried_bytes": oom.tried,
                "total_bytes": oom.total,
                "free_bytes": oom.free,
                "process_in_use_bytes": oom.process_in_use,
                "allocated_bytes": oom.allocated,
                "reserved_unallocated_bytes": oom.reserved_unallocated,
                "other_pids": [pid for pid, _ in oom.other_processes],
                "self_seen_as_pid": oom.self_seen_as,
                "form": oom.form,
                "framework": oom.framework,
                "line": oom.line[:300],
            },
            action=(
                f"Lower the batch size or sequence length, "
                f"{_GPU_ACTIONS.get(oom.framework, _GPU_ACTIONS['PyTorch'])}; a bigger "
                "resources.limits.memory does not help GPU memory."
            ),
        )
    ]
    if oom.fragmented:
        findings.append(
            Finding(
                code="cuda-fragmentation",
                severity=Severity.WARNING,
                message=(
                    f"{_size(oom.reserved_unallocated)} were reserved by PyTorch's allocator but not in use, "
                    f"at least the {_size(oom.tried)} requested: the memory was there but fragmented."
                ),
                evidence={"reserved_unallocated_bytes": oom.reserved_unallocated, "tried_bytes": oom.tried},
                action="Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the container's environment.",
            )
        )
    return findings


def shm_full(*, exit_code: int | None, facts: LogFacts, shm: ShmSize | None) -> Finding | None:
    """/dev/shm filled: exit 135 (SIGBUS), a worker killed by SIGBUS, or torch's "No space left" on shm.

    A bare "Bus error" printed by the program is not evidence: only the exit code, a launcher's
    child killed by SIGBUS (torchrun's -7 for a worker, ``training_log.child_signal``), or torch's
    own DataLoader and shared-memory messages count.
    """
    child = facts.child_signal if facts.child_signal is not None and facts.child_signal.signal == 7 else None
    if exit_code != SIGBUS_EXIT and facts.shm is None and child is None:
        return None
    if facts.shm is not None:
        shown = facts.shm.line
    elif child is not None:
        shown = f"{child.who} died of SIGBUS: {child.line.rstrip('.')}"
    else:
        shown = "exit code 135 (SIGBUS)"
    size = f" The pod's /dev/shm is {_size(shm.bytes)} ({shm.source})." if shm is not None else ""
    return Finding(
        code="shm-full",
        severity=Severity.CRITICAL,
        message=f"Shared memory (/dev/shm) ran out: {shown[:300]}.{size}",
        evidence={
            "exit_code": exit_code,
            "shm_bytes": shm.bytes if shm else None,
            "shm_source": shm.source if shm else None,
            "worker_pid": facts.shm.worker_pid if facts.shm else None,
            "line": shown[:300],
        },
        action=(
            "Mount an emptyDir with medium: Memory at /dev/shm (a sizeLimit that fits the DataLoader's "
            "batches times num_workers times prefetch_factor, counted in the memory limit), or lower "
            "num_workers."
        ),
    )


def segfault(*, exit_code: int | None, facts: LogFacts) -> Finding | None:
    """Exit 139 (SIGSEGV), or a launcher's child killed by SIGSEGV: torchrun's -11 for the worker
    that failed first, ``torch.distributed.launch``'s ``CalledProcessError ... died with
    <Signals.SIGSEGV: 11>``, a DataLoader worker ``killed by signal: Segmentation fault``, a shell's
    job report (``Segmentation fault (core dumped)``, zsh's ``segmentation fault``)."""
    child = facts.child_signal if facts.child_signal is not None and facts.child_signal.signal == 11 else None
    shell = facts.shell_segfault
    if exit_code != SIGSEGV_EXIT and child is None and facts.worker_segfault is None and shell is None:
        return None
    line = facts.worker_segfault or facts.segfault_line or shell or (
        f"{child.who} died of SIGSEGV: {child.line.rstrip('.')}"
        if child is not None
        else "exit code 139 (SIGSEGV)"
    )
    return Finding(
        code="segfault",
        severity=Severity.CRITICAL,
        message=f"The process crashed with a segmentation fault (SIGSEGV): {line.rstrip('.')}.",
        evidence={"exit_code": exit_code, "line": line[:300]},
        action=(
            "Run once with PYTHONFAULTHANDLER=1 (and CUDA_LAUNCH_BLOCKING=1 for GPU code) to get the "
            "Python stack; check native extensions built for another torch or CUDA version."
        ),
    )


def child_sigkill(*, exit_code: int | None, facts: LogFacts) -> Finding | None:
    """A launcher's child killed by SIGKILL: torchrun's -9 for the worker that failed first (the
    summary's ``Signal 9 (SIGKILL) received by PID N``), ``CalledProcessError ... died with
    <Signals.SIGKILL: 9>``, DeepSpeed's ``exits with return code = -9``.

    The launcher's own ``ChildFailedError`` or ``CalledProcessError`` traceback after it only
    reports the death: the worker did not end itself, something sent it SIGKILL.
    """
    child = facts.child_signal
    if child is None or child.signal != 9:
        return None
    return Finding(
        code="sigkill-not-oom",
        severity=Severity.CRITICAL,
        message=(
            f"{child.who} was killed by SIGKILL: {child.line[:300].rstrip('.')}. The program did not "
            "end itself; something outside it sent the signal. When one worker dies this way it is "
            "most often the kernel's OOM killer (the node's memory, or the container's limit), but no "
            "OOM-kill record was given, so the log alone cannot say."
        ),
        evidence={
            "exit_code": exit_code,
            "signal": child.signal,
            "pid": child.pid,
            "local_rank": child.local_rank,
            "source": child.source,
            "line": child.line[:300],
        },
        action=(
            "Read the node's kernel log (dmesg or journalctl -k) around that time for an oom-kill and give "
            "it to podmortem diagnose with this log (the kernel names the process by its node-wide pid, "
            "not the container's pid the launcher prints). Compare the workers' host memory (a model "
            "loaded once per rank multiplies it) with the container's memory limit and the node's memory."
        ),
    )


def batch_cgroup_oom(*, exit_code: int | None, facts: LogFacts) -> Finding | None:
    """A batch system's report that the kernel's OOM killer acted in the job's memory cgroup (Slurm's
    ``Detected N oom-kill event(s)``): the job hit its memory limit, whatever the shell then says
    (``Killed``) of the process it ran."""
    line = facts.cgroup_oom
    if line is None:
        return None
    return Finding(
        code="memcg-limit",
        severity=Severity.CRITICAL,
        message=(
            f"The job's memory cgroup hit its limit and the kernel's OOM killer killed a process in it: "
            f"'{line[:200]}'. The kernel's own record (which process, how much memory) is in the node's "
            "kernel log."
        ),
        evidence={"exit_code": exit_code, "line": line[:300], "source": "batch-system"},
        action=(
            "Raise the job's memory request (Slurm: --mem or --mem-per-cpu) to its peak use, or lower that "
            "peak (DataLoader workers, batch size, data held in memory); the node's dmesg names the process."
        ),
    )


def shell_sigkill(*, exit_code: int | None, facts: LogFacts) -> Finding | None:
    """A shell's job report ``Killed`` (bash, dash, ``zsh: killed``) or a DataLoader worker ``killed by
    signal: Killed``: the process got SIGKILL, and with no kernel record its cause is not known.

    Only what the shell or PyTorch wrote counts: the waiting process saw the signal itself.
    """
    kill = facts.shell_kill
    if kill is None:
        return None
    return Finding(
        code="sigkill-not-oom",
        severity=Severity.CRITICAL,
        message=(
            f"{kill.who[:1].upper()}{kill.who[1:]} was killed by SIGKILL ('{kill.line[:200]}'). The program "
            "did not end itself; no OOM-kill record was given, so what sent the signal is not known. The "
            "kernel's OOM killer is the commonest sender; a timeout, a liveness probe, a preemption or a "
            "person are the others."
        ),
        evidence={"exit_code": exit_code, "signal": 9, "pid": kill.pid, "source": kill.source,
                  "line": kill.line[:300]},
        action=(
            "Check, at the time of the kill: the node's kernel log (dmesg -T or journalctl -k) for an "
            "oom-kill naming the process, and give it to podmortem diagnose with this log; the pod's "
            "lastState (OOMKilled, exit code 137) and Events (Evicted, Killing, Preempting, a failed "
            "liveness probe); the container's memory limit against its peak use (a DataLoader's workers "
            "each hold a copy of what they touch); and whether a job timeout or a person stopped it."
        ),
    )


def python_exception(*, exit_code: int | None, facts: LogFacts) -> list[Finding]:
    """A non-zero exit after a traceback: the exception line is the finding, its chain a second one."""
    exc = facts.exception
    if exc is None or exit_code in (None, 0):
        return []
    findings = [
        Finding(
            code="python-exception",
            severity=Severity.CRITICAL,
            message=f"The program ended with an exception (exit {exit_code}): {exc.line[:400]}",
            evidence={"exit_code": exit_code, "exception": exc.name, "line": exc.line[:400]},
            action="Read the traceback in the log above this line.",
        )
    ]
    if exc.chain:
        findings.append(
            Finding(
                code="exception-chain",
                severity=Severity.INFO,
                message=f"It was raised while handling an earlier exception, where the trouble began: "
                f"{exc.origin[:400]}",
                evidence={"chain": len(exc.chain) + 1, "origin": exc.origin[:400]},
                action="Fix the first exception of the chain; the last one only reports it.",
            )
        )
    return findings


#: DisruptionTarget reasons (Kubernetes 1.26+), in words.
DISRUPTIONS = {
    "PreemptionByScheduler": "the scheduler preempted it for a higher-priority pod",
    "PreemptionByKubeScheduler": "the scheduler preempted it for a higher-priority pod",
    "DeletionByTaintManager": "its node got a NoExecute taint it does not tolerate (the node became "
    "unreachable or not ready, or is being reclaimed)",
    "EvictionByEvictionAPI": "it was evicted through the Eviction API (a node drain or an autoscaler "
    "scaling the node down)",
    "DeletionByPodGC": "its node no longer exists (a reclaimed spot or preemptible node)",
    "TerminationByKubelet": "the kubelet terminated it (a node shutdown, or node-pressure eviction)",
}


def disruption_of(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The pod's ``DisruptionTarget`` condition, when True: (reason, message)."""
    for c in PodBody(pod).conditions:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return str(c.get("reason") or ""), str(c.get("message") or "")
    return None


def preempted(*, disruption: tuple[str, str] | None, pod_reason: str | None) -> Finding | None:
    """A DisruptionTarget condition: preemption, a taint, a drain, a vanished node, a shutdown."""
    if disruption is None or pod_reason == "Evicted":
        return None
    reason, message = disruption
    why = DISRUPTIONS.get(reason, f"Kubernetes disrupted it ({reason})")
    return Finding(
        code="preempted",
        severity=Severity.CRITICAL,
        message=f"The pod was stopped from outside: {why}." + (f" ({message})" if message else ""),
        evidence={"disruption_reason": reason, "disruption_message": message[:300]},
        action=(
            "Checkpoint often enough to lose little, set a PriorityClass for training jobs, and for spot "
            "nodes let the job restart (backoffLimit, or a podFailurePolicy that ignores DisruptionTarget)."
        ),
    )


#: The kubelet's eviction messages for disk (``pkg/kubelet/eviction/helpers.go``): the node low on
#: ``ephemeral-storage`` (``nodefs``/``imagefs`` and their inodes before 1.8, ``[DiskPressure]`` in
#: 1.5-1.6 and in admission's "The node had condition"), a container over its own limit ("Container X
#: exceeded its local ephemeral storage limit"), the pod over its containers' ("Pod ephemeral local
#: storage usage exceeds the total limit of containers"), an emptyDir over its sizeLimit ("Usage of
#: EmptyDir volume ... exceeds the limit").
_EPHEMERAL = re.compile(
    r"ephemeral[- ]storage|ephemeral local storage|local ephemeral storage|EmptyDir volume"
    r"|\b(?:nodefs|imagefs|containerfs)(?:Inodes)?\b|DiskPressure",
    re.IGNORECASE,
)
#: "The node was low on resource: pids." (``[MemoryPressure]`` in 1.5-1.6), admission's "The node had
#: condition: [PIDPressure]".
_RESOURCE = re.compile(r"(?:low on resource|had condition): \[?([\w.-]+)")
_CONDITION_RESOURCES = {"MemoryPressure": "memory", "PIDPressure": "pids"}


def eviction_by_resource(*, pod_reason: str | None, message: str | None) -> Finding | None:
    """An eviction for disk (ephemeral storage) or another node resource than memory.

    Memory-pressure evictions keep the older ``eviction`` verdict (`kill_causes.eviction`).
    """
    if pod_reason != "Evicted":
        return None
    text = message or ""
    if _EPHEMERAL.search(text):
        return Finding(
            code="ephemeral-storage-eviction",
            severity=Severity.CRITICAL,
            message=(
                f"The kubelet evicted the pod for ephemeral storage (node disk, container logs, "
                f"writable layers, emptyDirs): {text.strip()[:400]}"
            ),
            evidence={"reason": pod_reason, "status_message": text[:400]},
            action=(
                "Write checkpoints and datasets to a persistent volume, not the container's filesystem or "
                "an emptyDir on disk; set resources.requests.ephemeral-storage to what the pod writes."
            ),
        )
    m = _RESOURCE.search(text)
    resource = m.group(1).rstrip(".") if m is not None else "memory"
    resource = _CONDITION_RESOURCES.get(resource, resource)
    if resource != "memory":
        return Finding(
            code="node-pressure-eviction",
            severity=Severity.CRITICAL,
            message=f"The kubelet evicted the pod: the node ran low on {resource}: {text.strip()[:300]}",
            evidence={"reason": pod_reason, "resource": resource, "status_message": text[:400]},
            action="Check what else uses that resource on the node; set requests so this pod is not first.",
        )
    return None
