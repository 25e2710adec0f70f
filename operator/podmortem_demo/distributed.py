"""``podmortem demo --distributed``: 4 ranks (PyTorchJob or JobSet), one OOM-killed, the rest follow.

The same machinery as the single-pod demo (`podmortem_demo.runner`): the emulated API, the real
operator following a ``kubeflow.org/v1`` PyTorchJob as a foreign job, the real node agent, the
demo kubelet running each pod as a real process in its own memory cgroup. There is no training
operator here, so the demo creates the PyTorchJob's pods as it would: ``<job>-master-0`` and
``<job>-worker-<i>``, its replica labels, ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``.
With ``--kind jobset`` the same story runs as a ``jobset.x-k8s.io/v1alpha2`` JobSet, made as the
JobSet controller makes it: one child Job per rank (``<jobset>-workers-<i>``, owned by the JobSet),
one pod each (``<jobset>-workers-<i>-0-<suffix>``, owned by its Job) with the ``jobset.sigs.k8s.io``
labels; the pod's ``RANK`` is a downward-API fieldRef to its ``job-index`` label, as JobSet users
write it, so the operator finds the ranks through the JobSet's labels. The operator follows
``batch/v1`` Jobs and JobSets as foreign kinds (pod -> child Job -> annotated JobSet).

Each pod runs `podmortem_demo.rank`: the ranks do collectives over TCP; the OOM rank keeps memory
until the kernel kills it at its limit; the others fail *because* it is gone (rank 0's watchdog,
then a remote error and torchrun's SIGTERM), so their failures come later, as in a real job.
The result is the operator's ``podmortem.io/failure-report`` annotation on the PyTorchJob: the
root-cause pod's report and the job section, one row per pod. Without writable memory cgroups or
/dev/kmsg the kubelet's watchdog enforces the limit and the agent serves the recorded real kernel
record, labelled "recorded", as in the single-pod demo.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from podmortem import quantity
from podmortem.kube.owners import ForeignKind
from podmortem.reports.document import JobRow, JobSection, ReportDocument
from podmortem.reports.stored_report import ANNOTATION, StoredReport
from podmortem_demo import kernel, runner
from podmortem_demo import stored as stored_reports
from podmortem_demo.kubelet import PodRun
from podmortem_demo.rank import TEXTS_SOURCE
from podmortem_demo.threads import OperatorThread, StartFailed

MIB = 1024**2
PTJ_RESOURCE = "kubeflow.org/v1/pytorchjobs"
JOBSET_RESOURCE = "jobset.x-k8s.io/v1alpha2/jobsets"
JobKind = Literal["pytorchjob", "jobset"]
#: The kind's apiVersion, Kind, its resource (group/version/plural) and the foreign kinds the operator needs.
KINDS: dict[str, tuple[str, str, str, tuple[ForeignKind, ...]]] = {
    "pytorchjob": ("kubeflow.org/v1", "PyTorchJob", PTJ_RESOURCE,
                   (ForeignKind("kubeflow.org", "pytorchjobs", "v1"),)),
    "jobset": ("jobset.x-k8s.io/v1alpha2", "JobSet", JOBSET_RESOURCE,
               (ForeignKind("batch", "jobs", "v1"), ForeignKind("jobset.x-k8s.io", "jobsets", "v1alpha2"))),
}
REPLICATED_JOB = "workers"  # the JobSet's one replicatedJob: a Job per rank, one pod each
CONTAINER = "pytorch"  # the container name the training operator requires in a PyTorchJob
#: The lines of a rank that progress shows: the failure texts and the OOM rank's growth.
_SHOWN = ("[rank", "torch.distributed", "ncclRemoteError", "W0801", "rank ")


@dataclass(frozen=True)
class DistributedSettings:
    """What ``podmortem demo --distributed`` runs; each default says why."""

    #: Each rank's memory limit, bytes: the OOM rank passes it after limit/grow steps.
    limit_bytes: int = 256 * MIB
    kernel: kernel.KernelWish = "auto"
    keep_dir: Path | None = None
    timeout_s: float = 60.0
    namespace: str = "default"
    job: str = "ddp-demo"
    world_size: int = 4
    #: The rank whose memory grows until the kernel kills it.
    oom_rank: int = 2
    #: MiB the OOM rank keeps per step (each step 50 ms): 256Mi fills in about half a second.
    grow_mib: int = 32
    #: Rank 0's wait for a dead peer's share before its watchdog takes it down (NCCL's is minutes).
    watchdog_s: float = 1.5
    #: What owns the pods: a Kubeflow PyTorchJob, or a JobSet through one child Job per rank.
    kind: JobKind = "pytorchjob"


@dataclass
class RankResult:
    rank: int
    pod: str
    exit_code: int | None
    reason: str
    finished_at: str
    lines: int


@dataclass
class DistributedResult:
    """The PyTorchJob or JobSet as stored at the end (its annotation holds the report); each rank's exit."""

    job: dict[str, Any]
    ranks: list[RankResult]
    kernel: kernel.KernelMode
    oom_rank: int
    events: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    kind: JobKind = "pytorchjob"

    @property
    def report(self) -> dict[str, Any] | None:
        """The annotation's JSON as stored (``--json`` prints it so)."""
        return report_of(self.job)

    @property
    def document(self) -> ReportDocument:
        """The annotation read as every reader reads it; empty when there is none."""
        return stored_reports.read(self.job) or ReportDocument()

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": KINDS[self.kind][1],
            ("pytorchJob" if self.kind == "pytorchjob" else "jobSet"): self.job,
            "report": self.report,
            "ranks": [dataclasses.asdict(r) for r in self.ranks],
            "kernel": self.kernel,
            "seconds": round(self.seconds, 1),
        }


def report_of(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """The annotation's JSON as stored, for ``--json``; readers take `DistributedResult.document`."""
    stored = StoredReport.locate(job)
    return stored.raw if stored is not None else None


def pod_name(job: str, rank: int, kind: JobKind = "pytorchjob") -> str:
    """The training operator's names: rank 0 is the master, rank i the worker i-1. A JobSet's pod is
    its child Job's (``<jobset>-workers-<i>``) completion index 0 with a random suffix (fixed here)."""
    if kind == "jobset":
        suffix = hashlib.sha256(f"{job}/{rank}".encode()).hexdigest()[:5]
        return f"{child_job_name(job, rank)}-0-{suffix}"
    return f"{job}-master-0" if rank == 0 else f"{job}-worker-{rank - 1}"


def child_job_name(jobset: str, rank: int) -> str:
    return f"{jobset}-{REPLICATED_JOB}-{rank}"


def jobset(s: DistributedSettings) -> dict[str, Any]:
    """The JobSet: one replicatedJob of ``world_size`` single-pod Jobs."""
    limit = quantity.format_mib(s.limit_bytes)
    return {
        "apiVersion": KINDS["jobset"][0],
        "kind": "JobSet",
        "metadata": {"name": s.job, "namespace": s.namespace, "annotations": {"podmortem.io/watch": "true"}},
        "spec": {"replicatedJobs": [{"name": REPLICATED_JOB, "replicas": s.world_size, "template": {"spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {"spec": {"containers": [
                {"name": CONTAINER, "resources": {"limits": {"memory": limit}}}
            ]}},
        }}}]},
    }


def child_job(s: DistributedSettings, owner: dict[str, Any], rank: int) -> dict[str, Any]:
    """The JobSet controller's child Job for one rank (not annotated: the JobSet is)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": child_job_name(s.job, rank), "namespace": s.namespace, "labels": _jobset_labels(s, rank),
            "ownerReferences": [{"apiVersion": KINDS["jobset"][0], "kind": "JobSet", "name": s.job,
                                 "uid": owner["metadata"]["uid"], "controller": True}],
        },
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0},
    }


def _jobset_labels(s: DistributedSettings, rank: int) -> dict[str, str]:
    return {
        "jobset.sigs.k8s.io/jobset-name": s.job,
        "jobset.sigs.k8s.io/replicatedjob-name": REPLICATED_JOB,
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(s.world_size),
        "jobset.sigs.k8s.io/job-index": str(rank),
    }


def pytorch_job(s: DistributedSettings) -> dict[str, Any]:
    limit = quantity.format_mib(s.limit_bytes)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": s.job, "namespace": s.namespace, "annotations": {"podmortem.io/watch": "true"}},
        "spec": {
            "pytorchReplicaSpecs": {
                kind: {"replicas": n, "template": {"spec": {"containers": [
                    {"name": CONTAINER, "resources": {"limits": {"memory": limit}}}
                ]}}}
                for kind, n in (("Master", 1), ("Worker", s.world_size - 1))
            }
        },
    }


def rank_pod(s: DistributedSettings, owner: dict[str, Any], rank: int, port: int) -> dict[str, Any]:
    """A replica's pod as the training operator (or the JobSet's child Job) makes it: labels, owner, env.

    ``owner`` is the PyTorchJob, or the rank's child Job of the JobSet.
    """
    kind, index = ("master", 0) if rank == 0 else ("worker", rank - 1)
    limit = quantity.format_mib(s.limit_bytes)
    literal = {"WORLD_SIZE": s.world_size, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    env: list[dict[str, Any]] = [{"name": k, "value": str(v)} for k, v in literal.items()]
    if s.kind == "jobset":
        labels = {**_jobset_labels(s, rank), "batch.kubernetes.io/job-completion-index": "0",
                  "batch.kubernetes.io/job-name": child_job_name(s.job, rank)}
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
               "uid": owner["metadata"]["uid"], "controller": True}
        # As JobSet users write it: the rank from the job-index label through the downward API.
        env.insert(0, {"name": "RANK", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}})
    else:
        labels = {
            "training.kubeflow.org/job-name": s.job,
            "training.kubeflow.org/replica-type": kind,
            "training.kubeflow.org/replica-index": str(index),
        }
        ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": s.job,
               "uid": owner["metadata"]["uid"], "controller": True}
        env.insert(0, {"name": "RANK", "value": str(rank)})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(s.job, rank, s.kind),
            "namespace": s.namespace,
            "labels": labels,
            "ownerReferences": [ref],
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": CONTAINER,
                "image": "podmortem-demo/rank:local",
                "command": ["python", "-m", "podmortem_demo.rank"],
                "args": ["--grow-rank", str(s.oom_rank), "--grow-mib", str(s.grow_mib),
                         "--watchdog-s", str(s.watchdog_s)],
                "env": env,
                "resources": {"requests": {"memory": limit}, "limits": {"memory": limit}},
            }],
        },
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _RankCluster(runner._Cluster):
    """The demo cluster, showing each rank's last words, with the recorded record only on the OOM rank."""

    oom_pod = ""

    def recorded_cgroup_for(self, run: PodRun) -> str | None:
        return super().recorded_cgroup_for(run) if run.name == self.oom_pod else None

    def _line(self, run: PodRun, text: bytes) -> None:
        line = text.decode("utf-8", errors="replace")
        if line.startswith(_SHOWN) or "kept" in line:
            self.progress.say(f"  {run.name}: {line[:150]}")


def _settled(job: dict[str, Any] | None, world: int) -> dict[str, Any] | None:
    """The job once its report has a row for every failed rank and no longer waits for a kernel record."""
    report = stored_reports.read(job)
    if report is None or report.job is None:
        return None
    failed = sum(n for role, n in report.job.roles.items() if role != "not-failed")
    return job if failed >= world and not report.pending_record else None


class DistributedDemo:
    """Runs the 4-rank story once and returns what happened."""

    def __init__(
        self, settings: DistributedSettings | None = None, *, progress: TextIO | None = None
    ) -> None:
        self.settings = settings or DistributedSettings()
        self.progress = runner.Progress(progress)

    def run(self) -> DistributedResult:
        s = self.settings
        choice = kernel.choose(s.kernel)
        runner.say_kernel(choice, self.progress)
        demo = runner.DemoSettings(kernel=s.kernel, cut_after_lines=(), run_timeout_s=s.timeout_s)
        with runner._workdir(s.keep_dir) as workdir:
            cluster = _RankCluster(choice=choice, workdir=workdir, demo=demo, progress=self.progress)
            cluster.oom_pod = pod_name(s.job, s.oom_rank, s.kind)
            try:
                cluster.start()
            except StartFailed as exc:
                raise runner.DemoFailed(str(exc)) from exc
            operator: OperatorThread | None = None
            try:
                settings = dataclasses.replace(
                    runner.Demo()._operator_settings(cluster, workdir),
                    foreign_kinds=KINDS[s.kind][3],
                )
                operator = OperatorThread(
                    url=cluster.url, settings=settings, follow=runner.DEMO_FOLLOW, name="demo-operator"
                )
                try:
                    operator.start()
                except StartFailed as exc:
                    raise runner.DemoFailed(str(exc)) from exc
                return self._story(cluster, choice)
            finally:
                if operator is not None:
                    operator.stop()
                cluster.stop()

    def _story(self, cluster: _RankCluster, choice: kernel.KernelChoice) -> DistributedResult:
        s, say = self.settings, self.progress.say
        self.progress.restart()
        started = time.monotonic()
        deadline = started + s.timeout_s
        _, kind_name, resource, _ = KINDS[s.kind]
        group_version, plural = resource.rsplit("/", 1)
        say(
            f"{kind_name} {s.namespace}/{s.job} and its {s.world_size} pods (ranks 0-{s.world_size - 1}, "
            f"each {quantity.format_mib(s.limit_bytes)} memory limit); rank {s.oom_rank} keeps "
            f"{s.grow_mib} MiB per step until its limit; the others do all-reduces with it over TCP "
            f"(failure texts: real ones, from {TEXTS_SOURCE})"
        )
        owner = cluster.create(
            f"/apis/{group_version}/namespaces/{s.namespace}/{plural}",
            jobset(s) if s.kind == "jobset" else pytorch_job(s),
        )
        port = _free_port()
        for rank in range(s.world_size):
            pod_owner = owner
            if s.kind == "jobset":  # the JobSet controller's child Job owns the rank's pod
                pod_owner = cluster.create(f"/apis/batch/v1/namespaces/{s.namespace}/jobs",
                                           child_job(s, owner, rank))
            cluster.create(f"/api/v1/namespaces/{s.namespace}/pods", rank_pod(s, pod_owner, rank, port))
        runs: list[PodRun] = []
        for rank in range(s.world_size):
            name = pod_name(s.job, rank, s.kind)
            runs.append(cluster.call(cluster.kubelet.wait_for(s.namespace, name, within_s=s.timeout_s),
                                     timeout=s.timeout_s + 5))
        pending = {run.uid: (rank, run) for rank, run in enumerate(runs)}
        while pending:
            if time.monotonic() > deadline:
                names = ", ".join(run.name for _, run in pending.values())
                raise runner.DemoFailed(f"ranks still running after {s.timeout_s:g} s: {names}")
            for uid, (rank, run) in list(pending.items()):
                if run.done.is_set():
                    del pending[uid]
                    how = f", cgroup oom_kill count {run.oom_kills}" if run.oom_kills else ""
                    if run.watchdog is not None and run.watchdog.kill is not None:
                        how = f", killed by the demo kubelet's limit (pid {run.watchdog.kill.pid})"
                    say(f"pod {run.name} (rank {rank}) exited {run.exit_code} ({run.reason}{how})")
            time.sleep(0.02)
        ranks = [
            RankResult(rank=r, pod=run.name, exit_code=run.exit_code, reason=run.reason,
                       finished_at=run.finished_at, lines=len(run.produced))
            for r, run in enumerate(runs)
        ]

        def stored() -> dict[str, Any] | None:
            found = cluster.sync(lambda: cluster.api.stored(resource, s.namespace, s.job))
            return found[0] if found else None

        seen = time.monotonic()
        job = runner._wait(
            lambda: _settled(stored(), s.world_size), until=deadline,
            what=f"{kind_name} {s.job}'s report with a row per rank and its kernel record",
        )
        say(f"job report in the {kind_name}'s {ANNOTATION} annotation {time.monotonic() - seen:.1f} s "
            "after the last rank ended")
        oom_run = runs[s.oom_rank]
        evidence = cluster.call(cluster.agent.kernel_records_for(oom_run.uid, within_s=0.0))
        record = evidence.kernel_records[-1] if evidence is not None else None
        say(runner._record_line(record, choice.mode))
        events = cluster.sync(
            lambda: [
                e for e in cluster.api.stored("v1/events", s.namespace)
                if (e.get("involvedObject") or {}).get("name") == s.job
            ]
        )
        return DistributedResult(
            job=copy.deepcopy(job), ranks=ranks, kernel=choice.mode, oom_rank=s.oom_rank,
            events=copy.deepcopy(events), seconds=time.monotonic() - started, kind=s.kind,
        )


def problems(result: DistributedResult) -> list[str]:
    """How the run differs from the story: the OOM rank killed and named the root cause, the rest after it."""
    out: list[str] = []
    oom = result.ranks[result.oom_rank]
    if oom.reason != "OOMKilled":
        out.append(f"rank {result.oom_rank} was not OOM-killed: exit {oom.exit_code} ({oom.reason})")
    others = [r for r in result.ranks if r.rank != result.oom_rank]
    for r in others:
        if r.exit_code in (None, 0) or r.reason == "OOMKilled":
            out.append(f"rank {r.rank}: expected a failure after rank {result.oom_rank}'s, got exit "
                       f"{r.exit_code} ({r.reason})")
    section = result.document.job or JobSection()
    root = section.root_cause or JobRow()
    if root.rank != result.oom_rank or section.guessed:
        out.append(f"the report names {root.pod} (rank {root.rank}) as the root cause"
                   + (" (guessed)" if section.guessed else ""))
    return out


def table(result: DistributedResult) -> str:
    """The job report as a terminal shows it: the root cause, then one row per pod."""
    report = result.document
    section = report.job or JobSection()
    root = section.root_cause or JobRow()
    findings = stored_reports.finding_codes(report)
    label = f" [{runner.RECORDED_LABEL}]" if result.kernel == "recorded" else ""
    width = max([22, *(len(str(row.pod)) for row in section.rows)])
    meta = result.job["metadata"]
    lines = [
        f"job {meta['namespace']}/{meta['name']} ({KINDS[result.kind][1]}, "
        f"{section.pods if section.pods is not None else '?'} pods): "
        f"root cause rank {root.rank}, pod {root.pod}, "
        f"exit {root.exit_code} {root.reason}, verdict {root.verdict} ({findings})"
        f"{label}; "
        f"kernel {result.kernel}; {result.seconds:.1f} s",
        f"  {'rank':<4}  {'pod':<{width}} {'exit':<4}  {'reason':<10} {'role':<12} line",
    ]
    for row in section.rows:
        line = row.line or (root.line if row.role == "root-cause" else "") or ""
        lines.append(
            f"  {row.rank!s:<4}  {row.pod!s:<{width}} {row.exit_code!s:<4}  "
            f"{row.reason!s:<10} {row.role!s:<12} {line[:110]}"
        )
    if section.note:
        lines.append(f"  note: {section.note}")
    return "\n".join(lines)
