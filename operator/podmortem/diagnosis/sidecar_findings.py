"""The findings of the sidecar's evidence, where no node agent hands over the kernel's record. Pure.

In sidecar mode (`docs/sidecar.md`) the pod carries ``podmortem sidecar``, which leaves what it saw
of the trainer container in its termination message: the container's own cgroup counters at the
kill, the processes by PSS, and the usage trend. The operator reads that text from the pod's
status as untrusted input (`podmortem.reports.sidecar_evidence.parse`: size, schema, numbers) and makes
the same kinds of findings a kernel record gives: the verdict (the container's own limit, from its
OOM-kill counter), what filled it, what the workers held, and the trend. Each finding names the
figures it rests on and says they are the sidecar's samples: the kernel's record, and so the
kernel's own choice of victim and the per-task table, are not available in this mode. Where a node
agent handed over the kernel's record, that record wins (`podmortem.diagnosis.rediagnose` ranks the
sources) and these findings are not added.

The message is the pod's own testimony (docs/sidecar.md, "Trust model"): it is read only from the
container the operator injected, found by image and command
(`podmortem.operator.sidecar_injection.identity`), and only when nothing in
it contradicts the kubelet (`podmortem.diagnosis.in_pod_evidence`); otherwise the summary says
"invalid" and names the contradiction. Its OOM kill becomes the verdict only where the kubelet
reports one too (OOMKilled or exit 137); else it is the finding ``in-pod-oom-kill`` beside the
kubelet's verdict. The report's ``in_pod_evidence`` lists the findings that rest on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from podmortem.diagnosis import in_pod_evidence as in_pod
from podmortem.diagnosis.forks import FORK_COPIES_MIN_BYTES, FORK_COPIES_MIN_SHARE
from podmortem.diagnosis.termination import SIDECAR_CONTAINER, Termination
from podmortem.reports import codes as verdict_codes
from podmortem.reports.document import SidecarEvidenceSummary
from podmortem.reports.failure import FailureReport, KillSummary
from podmortem.reports.findings import Finding, Severity
from podmortem.reports.sidecar_evidence import EvidenceInvalid, SidecarEvidence, parse
from podmortem.reports.units import human_bytes

#: A memory class holding at least this share of the container's charged memory is named.
DOMINANT_SHARE = 0.5
#: Workers' PSS worth a finding: at least this much, and at least `WORKERS_MIN_SHARE` of the usage
#: (the kernel record's fork-copies rule's own thresholds, `podmortem.diagnosis.forks`).
WORKERS_MIN_BYTES = FORK_COPIES_MIN_BYTES
WORKERS_MIN_SHARE = FORK_COPIES_MIN_SHARE
#: The usage trend is called growing when its last point is this much above its first.
GROWTH_RATIO = 1.2

#: What the report says of the kernel's record in sidecar mode.
NO_KERNEL_RECORD = (
    "not available in sidecar mode: the sidecar runs in the pod, without the host's kernel log; the "
    "findings marked source=sidecar rest on its samples alone"
)

_CLASS_ACTIONS = {
    "anon": "Find what the trainer keeps in process memory and releases late (per-epoch state, caches, "
            "accumulated results); the per-epoch memory line (podmortem_runtime) shows when it grows.",
    "file": "Page cache counts against the limit but is reclaimed first; a kill with page cache this large "
            "points at memory that could not be reclaimed fast enough (dirty pages): write less at once.",
    "shmem": "Shared memory (/dev/shm, tmpfs) counts against the limit and is not reclaimed: check "
             "DataLoader shared-memory tensors and files written to /dev/shm.",
    "kernel": "Kernel memory (slab, page tables, stacks) grew: many processes or threads, or many open "
              "files and sockets.",
    "sock": "Socket buffers filled the limit: check receive queues, connection counts and net.ipv4.tcp_rmem.",
}


@dataclass(frozen=True)
class SidecarRead:
    """The sidecar's evidence of a termination: there, still to come, or unreadable (and why)."""

    evidence: SidecarEvidence | None
    summary: SidecarEvidenceSummary | None


def _invalid(note: str, found: list[str] | None = None) -> SidecarRead:
    return SidecarRead(None, SidecarEvidenceSummary(state="invalid", note=note, contradictions=found or []))


def read(t: Termination, injected: in_pod.SidecarIdentity | None = None) -> SidecarRead:
    """What the pod's sidecar left for this termination; both None when the pod has no sidecar.

    Only the container ``injected`` describes is read (by image and command, not by name), and only
    evidence that contradicts none of the kubelet's facts is attached.
    """
    if not t.sidecar and not t.sidecars:
        return SidecarRead(None, None)
    container = in_pod.identify(t.sidecars, injected)
    if container is None:
        names = ", ".join(repr(c.name) for c in t.sidecars) or repr(SIDECAR_CONTAINER)
        want = (f"image {injected.image!r}, command {' '.join(injected.command)!r}"
                if injected is not None and injected.image else "no sidecar image is set (sidecar.image)")
        return _invalid(f"no container of this pod is the sidecar the operator injects ({want}): the "
                        f"message of {names} is not read")
    if container.message is None:
        if container.exit_code is not None:
            return _invalid(f"the sidecar ended with exit {container.exit_code} "
                            f"({container.reason or 'no reason'}) and left no evidence")
        return SidecarRead(None, SidecarEvidenceSummary(
            state="pending",
            note="the sidecar has not ended yet; its evidence is added to this report when it has",
        ))
    try:
        evidence = parse(container.message)
    except EvidenceInvalid as exc:
        return _invalid(f"the sidecar's termination message is not its evidence: {exc}")
    found = in_pod.contradictions(testimony(evidence), facts(t, container))
    if found:
        return _invalid("the sidecar's evidence contradicts the kubelet, so none of it is used: "
                        + "; ".join(found), found)
    return SidecarRead(evidence, summary(evidence))


def testimony(ev: SidecarEvidence) -> in_pod.Testimony:
    """What the document claims, as the pure checks take it."""
    mem = ev.mem
    return in_pod.Testimony(
        written_at=ev.at,
        reason=ev.reason,
        kill=ev.kill is not None or (ev.oom.after or 0) > (ev.oom.before or 0),
        kill_at=ev.kill.at if ev.kill is not None else None,
        victim_pid=ev.kill.victim.pid if ev.kill is not None else None,
        gone=tuple(ev.kill.gone) if ev.kill is not None else (),
        oom_before=ev.oom.before,
        oom_after=ev.oom.after,
        limit_bytes=mem.limit if mem is not None else None,
        peak_bytes=mem.peak if mem is not None else None,
        usage_bytes=mem.usage if mem is not None else None,
        cgroup_path=ev.cgroup.path if ev.cgroup is not None else None,
    )


def facts(t: Termination, container: in_pod.InPodContainer) -> in_pod.KubeletFacts:
    """What the kubelet says of the trainer container and of the sidecar."""
    return in_pod.KubeletFacts(
        container=t.container,
        container_id=t.container_id,
        pod_uid=t.pod_uid,
        exit_code=t.exit_code,
        reason=t.reason,
        started_at=t.started_at,
        finished_at=t.finished_at,
        limit_bytes=t.memory_limit_bytes,
        sidecar=container,
    )


def summary(ev: SidecarEvidence) -> SidecarEvidenceSummary:
    kill = ev.kill
    return SidecarEvidenceSummary(
        state="attached",
        victim_pid=kill.victim.pid if kill is not None else None,
        victim_comm=kill.victim.comm if kill is not None else None,
        oom_kills=ev.oom.after,
        peak_bytes=ev.mem.peak if ev.mem is not None else None,
        limit_bytes=ev.mem.limit if ev.mem is not None else None,
        samples=ev.samples,
        written_at=ev.at,
        version=ev.podmortem,
    )


def apply(report: FailureReport, t: Termination, ev: SidecarEvidence) -> FailureReport:
    """``report`` (made without a kernel record) with the sidecar's findings.

    Its cause replaces the kubelet-only one only when the kubelet reports an OOM kill too (OOMKilled
    or exit 137); otherwise the sidecar's kill is the finding ``in-pod-oom-kill`` and the verdict stays
    the kubelet's. ``in_pod_evidence`` names every finding that rests on the sidecar."""
    found = findings(t, ev)
    if not found:
        return report
    agrees = in_pod.kubelet_reports_oom_kill(t.exit_code, t.reason)
    if not agrees:
        found = [_beside_the_kubelet(f, t) if f.code in verdict_codes.VERDICTS else f for f in found]
    has_cause = any(f.code in verdict_codes.VERDICTS for f in found)
    kept = [f for f in report.findings if not (has_cause and f.code in verdict_codes.VERDICTS)]
    merged = [*[f for f in found if f.code in verdict_codes.VERDICTS], *kept,
              *[f for f in found if f.code not in verdict_codes.VERDICTS]]
    kill = report.kill
    if ev.kill is not None and kill is None and agrees:
        kill = KillSummary(pid=ev.kill.victim.pid, comm=ev.kill.victim.comm, killed_pids=list(ev.kill.gone))
    rests = [*report.in_pod_evidence, *(f.code for f in found if f.code not in report.in_pod_evidence)]
    return report.model_copy(update={
        "findings": merged, "verdict": verdict_codes.verdict_of([f.code for f in merged]), "kill": kill,
        "in_pod_evidence": rests,
    })


def _beside_the_kubelet(cause: Finding, t: Termination) -> Finding:
    """The sidecar's cause as a finding beside the kubelet's verdict, which it contradicts."""
    said = f"exit {t.exit_code}" if t.exit_code is not None else "no exit code"
    return Finding(
        code="in-pod-oom-kill",
        severity=Severity.WARNING,
        message=(f"The sidecar (in-pod evidence, the pod's own testimony) says: {cause.message} The kubelet "
                 f"reports {said} ({t.reason or 'no reason'}) for container {t.container!r}, not an OOM "
                 "kill, so the verdict stays the kubelet's."),
        evidence=cause.evidence,
        action=cause.action,
    )


def findings(t: Termination, ev: SidecarEvidence) -> list[Finding]:
    """The cause, what filled the container, what the workers held, the trend, and what this rests on."""
    out = [f for f in (_cause(t, ev), _dominant(ev), _workers(ev), _trend(ev)) if f is not None]
    if out:
        out.append(_rests_on(ev, [f.code for f in out]))
    return out


def _cause(t: Termination, ev: SidecarEvidence) -> Finding | None:
    before, after = ev.oom.before or 0, ev.oom.after or 0
    if ev.kill is None and after <= before:
        return None
    mem = ev.mem
    limit = mem.limit if mem is not None else None
    peak = mem.peak if mem is not None else None
    who = (f"{ev.kill.victim.comm} (pid {ev.kill.victim.pid})" if ev.kill is not None
           else "a process of the container")
    limit_words = f" of {human_bytes(limit)}" if limit is not None else ""
    peak_words = f"; its usage peaked at {human_bytes(peak)}" if peak is not None else ""
    return Finding(
        code="memcg-limit",
        severity=Severity.CRITICAL,
        message=(
            f"The kernel OOM-killed {who} because container {t.container!r} reached its own memory "
            f"limit{limit_words}: the sidecar saw the container's OOM-kill counter go from {before} to "
            f"{after} and the process vanish{peak_words}."
        ),
        evidence={
            "source": "sidecar",
            "limit_bytes": limit,
            "peak_bytes": peak,
            "limit_hits": mem.limit_hits if mem is not None else None,
            "oom_kills_before": before,
            "oom_kills_after": after,
            "victim_pid": ev.kill.victim.pid if ev.kill is not None else None,
        },
        action="Raise the container's memory limit, or lower what the trainer holds: the findings below "
               "say what filled it.",
    )


def _dominant(ev: SidecarEvidence) -> Finding | None:
    mem = ev.mem
    if mem is None:
        return None
    classes = {"anon": mem.anon, "file": mem.file, "shmem": mem.shmem, "kernel": mem.kernel, "sock": mem.sock}
    known = {name: value for name, value in classes.items() if value is not None}
    total = sum(known.values())
    if not known or total <= 0:
        return None
    name, value = max(known.items(), key=lambda item: item[1])
    if value < DOMINANT_SHARE * total:
        return None
    return Finding(
        code=f"{name}-dominant",
        severity=Severity.WARNING,
        message=(
            f"{name} memory held {human_bytes(value)} of the container's {human_bytes(total)} "
            f"({value / total:.0%}) at the sidecar's last sample, {mem.age_s:.1f} s before the kill."
        ),
        evidence={"source": "sidecar", f"{name}_bytes": value, "charged_bytes": total,
                  "sample_age_s": mem.age_s},
        action=_CLASS_ACTIONS[name],
    )


def _workers(ev: SidecarEvidence) -> Finding | None:
    trainer = next((p for p in ev.top if p.role == "trainer"), None)
    workers = [p for p in ev.top if p.role == "worker" and p.pss]
    held = sum(p.pss or 0 for p in workers)
    usage = ev.mem.usage if ev.mem is not None and ev.mem.usage else sum(p.pss or 0 for p in ev.top)
    if not workers or held < WORKERS_MIN_BYTES or held < WORKERS_MIN_SHARE * usage:
        return None
    parent = f"{trainer.comm} (pid {trainer.pid})" if trainer is not None else "the trainer"
    return Finding(
        code="fork-copies",
        severity=Severity.WARNING,
        message=(
            f"{len(workers)} worker process(es) beside {parent} held {human_bytes(held)} of the container's "
            f"{human_bytes(usage)} by PSS at the sidecar's last sample: pages each worker has on its own "
            "(copy-on-write copies of pages rewritten after the fork, or its own allocations: PSS does "
            "not tell which) plus its share of pages it still maps with the trainer."
        ),
        evidence={
            "source": "sidecar",
            "measure": "pss",
            "workers_pss_bytes": held,
            "trainer_pss_bytes": trainer.pss if trainer is not None else None,
            "container_bytes": usage,
            "worker_pids": sorted(p.pid for p in workers),
        },
        action="Fork DataLoader workers before the trainer grows (persistent_workers=True, or the "
               "podmortem_runtime validation loader), or use fewer workers for validation.",
    )


def _trend(ev: SidecarEvidence) -> Finding | None:
    trend = ev.trend
    if len(trend) < 3 or trend[0] <= 0 or trend[-1] < GROWTH_RATIO * trend[0]:
        return None
    span_s = ev.interval_s * (len(trend) - 1)
    return Finding(
        code="memory-growing",
        severity=Severity.INFO,
        message=(
            f"The container's usage grew from {human_bytes(trend[0])} to {human_bytes(trend[-1])} over the "
            f"sidecar's last {len(trend)} samples ({span_s:.0f} s)."
        ),
        evidence={"source": "sidecar", "first_bytes": trend[0], "last_bytes": trend[-1],
                  "samples": len(trend), "interval_s": ev.interval_s},
        action="A steady rise to the limit is growth, not a spike: find what is kept from one step or "
               "epoch to the next.",
    )


def _rests_on(ev: SidecarEvidence, found: list[str]) -> Finding:
    return Finding(
        code="sidecar-evidence",
        severity=Severity.INFO,
        message=(
            f"No kernel OOM record ({NO_KERNEL_RECORD}): {', '.join(found)} rest on the sidecar's "
            f"{ev.samples} sample(s), {ev.interval_s:g} s apart. The victim is the largest process that "
            "vanished as the OOM-kill counter rose, not the kernel's own word, and no per-task table exists."
        ),
        evidence={"source": "sidecar", "samples": ev.samples, "interval_s": ev.interval_s,
                  "sidecar_version": ev.podmortem},
    )
