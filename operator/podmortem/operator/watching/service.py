"""The operator's behaviour as plain async services; kopf handlers only translate events into these calls.

* A TrainingJob gets its pod (owned through an ownerReference) and a status
  that follows the pod: phase, times, the last memory line, the log's place.
* A foreign job or a pod annotated ``podmortem.io/watch: "true"`` is followed
  too; its options come from annotations and a bad one is a Warning Event.
* Every followed pod's logs go to the store; memory lines on the way update
  the status and feed the early warning.
* A termination with exit 137, OOMKilled or eviction gets one report.

Who changes what. This service adds followed owners and pods to the index of
`podmortem.operator.targets.Targets` (built before it, shared with the store's sink, the reporter
and the early warning, `podmortem.operator.watching.early_warning`, which takes the memory lines)
and keeps each pod's and job's record (`podmortem.operator.records.Records`: reported terminations,
when a pod finished, a job's parents). Nothing it or another component keeps of a pod or a job goes
but through those records: `Records.forget_pod` (a pod deleted, or missing from a relist after a watch
outage, or `Records.expire_finished` past its log's retention) and `Records.forget_job` call the
hooks the components registered here (`OperatorService.__init__`). What a TrainingJob's status holds
is `podmortem.operator.status.StatusWriter`'s alone; the reporter, the early warning and this service
write it through that writer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from podmortem.background import Background
from podmortem.diagnosis import job_root_cause, job_section, termination
from podmortem.kube import owners as kube_owners
from podmortem.kube.api import Kube, KubeError, resource_path
from podmortem.kube.bodies import Body, PodBody
from podmortem.operator import jobs, log_links, watch_options
from podmortem.operator.followed_pods import Following, log_status_fields
from podmortem.operator.jobs import Target
from podmortem.operator.records import JobRecord, Reason, Records
from podmortem.operator.reporting import job_view
from podmortem.operator.reporting.reporter import Reporter
from podmortem.operator.settings import TRAININGJOB_PLURAL, OperatorSettings
from podmortem.operator.status import StatusWriter
from podmortem.operator.targets import Targets, WatchedTarget
from podmortem.operator.watching.early_warning import EarlyWarning
from podmortem.operator.watching.option_announcements import announce
from podmortem.operator.watching.status_fields import disk_full_condition, pod_status_fields
from podmortem.reports.document import ReportDocument
from podmortem.reports.stored_report import StoredReport

logger = logging.getLogger(__name__)

#: Seconds a job's pod changes are gathered before its root cause is computed and written: a thousand
#: ranks failing within a minute give a few dozen passes, not a thousand (each ~0.1-0.3 s at that size).
JOB_REPORT_COALESCE_S = 0.2

#: Pods kept for a replay when their owner becomes known (bodies as kopf hands them, a few KiB each).
MAX_UNOWNED = 2_000
#: A pod in one of these phases runs no container again: finished for good.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
#: How often the state of finished, never-deleted pods is looked at (`drop_finished_forever`).
FINISHED_SWEEP_S = 600.0


def _duration(seconds: float) -> str:
    return f"{seconds / 86400:g} d" if seconds >= 86400 else f"{seconds:g} s"

#: Annotation values longer than this are left out of a pod kept for a replay.
UNOWNED_ANNOTATION_MAX = 1024


def _slim(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod without what anyone who can write it may make big and that a replay does not need
    (managedFields, long annotation values such as last-applied-configuration); short ones stay
    (a JobSet's job index is read from one)."""
    meta = dict(Body(pod).metadata)
    meta.pop("managedFields", None)
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        meta["annotations"] = {
            k: v for k, v in annotations.items() if len(str(v)) <= UNOWNED_ANNOTATION_MAX
        }
    return {**pod, "metadata": meta}


#: Seconds a terminated pod's follower gets to drain its tail before the report reads the log facts;
#: the report cannot wait longer than this within its 2 s budget.
TAIL_DRAIN_S = 0.3


class OperatorService:
    """All operator state and behaviour below the kopf handlers."""

    def __init__(
        self,
        *,
        kube: Kube,
        settings: OperatorSettings,
        following: Following | None,
        reporter: Reporter,
        status: StatusWriter,
        targets: Targets,
        early_warning: EarlyWarning,
        on_stopped: Callable[[], Awaitable[None]] | None = None,
        records: Records | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.following = following
        self.targets = targets
        self.early_warning = early_warning
        #: Awaited at the end of :meth:`stop` (the operator stops its HTTP servers there).
        self.on_stopped = on_stopped
        self.reporter = reporter
        self.status = status
        self.defaults = watch_options.WatchOptions(
            follow_logs=settings.follow_logs,
            memory_warning_ratio=settings.memory_warning_ratio,
            early_warning_epochs=settings.early_warning_epochs,
        )
        #: Each pod's and job's record; forgetting one calls every component's hook (registered here).
        self.records = records if records is not None else Records()
        self.records.on_forget_pod(lambda uid, _reason: targets.forget_pod(uid))
        self.records.on_forget_pod(lambda uid, _reason: early_warning.forget(uid))
        if following is not None:  # its facts go when its follower ends; the store lets go of the log then
            self.records.on_forget_pod(lambda uid, _reason: following.forget(uid))
        self.records.on_forget_pod(self._forget_reports)
        self.records.on_forget_job(self._forget_job)
        #: Pods with owners, seen while no followed owner of theirs was known: at startup the pods'
        #: list can be handled before the jobs' (kopf lists each kind on its own), and a pod that
        #: ended during an operator restart would be dropped for good. Replayed when an owner or a
        #: parent link is learned; pod uid -> latest body, at most `MAX_UNOWNED` (oldest dropped).
        self._unowned: dict[str, Mapping[str, Any]] = {}
        #: Reports being written, by termination key (a second event for it waits for the first).
        self._reporting: dict[str, asyncio.Task[None]] = {}
        self._tasks = Background("service")

    # --- TrainingJobs --------------------------------------------------------------------------

    async def on_trainingjob(self, body: Mapping[str, Any]) -> None:
        tj = Body(body)
        ns, name, uid = tj.namespace, tj.name, tj.uid
        if tj.being_deleted:
            return
        spec, status = tj.spec, tj.status
        self.status.seed(namespace=ns, name=name, status=status)
        options, problems = watch_options.from_spec(spec, defaults=self.defaults)
        target = Target.of(body, role="trainingjob", plural=TRAININGJOB_PLURAL, options=options)
        known = self._remember_owner(uid, target)
        await announce(
            known, problems, status=self.status, post_event=self._event,
            involved=target.involved(), trainingjob=True
        )

        template_problems = jobs.template_problems(spec)
        if template_problems:
            key = "template:" + ";".join(template_problems)
            if key not in known.announced:
                known.announced.add(key)
                message = "the pod template cannot run: " + "; ".join(template_problems)
                await self.status.patch(
                    namespace=ns,
                    name=name,
                    fields={"phase": "Failed"},
                    conditions=[("TemplateValid", False, "InvalidTemplate", message)],
                )
                await self._event(target.involved(), "Warning", "InvalidTemplate", message)
            return

        if status.get("podName"):
            return
        await self._create_pod(body, known)

    async def _create_pod(self, body: Mapping[str, Any], known: WatchedTarget) -> None:
        target = known.target
        pod = jobs.build_pod(body, sidecar=self.settings.sidecar)
        path = resource_path("", "v1", "pods", target.namespace)
        try:
            created = await self.kube.create(path, pod)
        except KubeError as exc:
            if exc.status == 409:
                existing = await self.kube.get(
                    resource_path("", "v1", "pods", target.namespace, Body(pod).name)
                )
                owner = jobs.trainingjob_owner(existing or {})
                if owner is not None and owner[1] == target.uid:
                    created = existing or {}
                else:
                    message = (
                        f"pod {Body(pod).name} already exists and is not owned by this "
                        f"TrainingJob; delete it or rename the TrainingJob"
                    )
                    await self._fail_creation(known, "PodNameTaken", message)
                    return
            elif exc.status in (400, 403, 422):
                await self._fail_creation(
                    known, "PodRejected", f"the API server rejected the pod: {exc.body[:800]}"
                )
                return
            else:
                raise  # transient: kopf retries the handler
        made, wanted = Body(created), Body(pod)
        await self.status.patch(
            namespace=target.namespace,
            name=target.name,
            fields={"phase": "Pending", "podName": made.name or wanted.name, "podUID": made.uid},
            conditions=[("TemplateValid", True, "PodCreated", f"created pod {wanted.name}")],
        )

    async def _fail_creation(self, known: WatchedTarget, reason: str, message: str) -> None:
        target = known.target
        await self.status.patch(
            namespace=target.namespace,
            name=target.name,
            fields={"phase": "Failed"},
            conditions=[("TemplateValid", False, reason, message)],
        )
        await self._event(target.involved(), "Warning", reason, message)

    def forget_owner(self, uid: str) -> None:
        """A TrainingJob or an object of a foreign kind is deleted."""
        self.records.forget_job(uid)

    def _forget_job(self, job: JobRecord) -> None:
        """The `Records` job hook: the job's reports and section, its followed target, its status."""
        self.reporter.forget_target(job.uid)
        known = self.targets.owners.get(job.uid)
        self.targets.forget_owner(job.uid)
        if known is not None and known.target.role == "trainingjob":
            self.status.forget(namespace=known.target.namespace, name=known.target.name)

    def _forget_reports(self, pod_uid: str, reason: Reason) -> None:
        """The `Records` pod hook of the reporter: a deleted pod of a foreign job keeps its reports
        while the job's section shows them (`Reporter.forget_pod`); an expired one's go."""
        if reason == "expired":
            self.reporter.drop_pod(pod_uid)
        else:
            self.reporter.forget_pod(pod_uid)

    # --- foreign jobs -----------------------------------------------------------------------------

    async def on_foreign(self, body: Mapping[str, Any], *, plural: str) -> None:
        job = Body(body)
        uid = job.uid
        parents = tuple(owner for owner, _kind, _name in jobs.owner_uids(body))
        learned = parents != self.records.parents_of(uid)
        record = self.records.job(uid, namespace=job.namespace, name=job.name)
        record.parents = parents
        if not watch_options.is_watched(job.annotations) or job.being_deleted:
            self.targets.owners.pop(uid, None)
            record.role = None
            if not parents:  # neither followed nor an ancestor of one: nothing to keep
                self.records.jobs.pop(uid, None)
            if learned:
                await self._replay_unowned()
            return
        learned = learned or uid not in self.targets.owners
        options, problems = watch_options.from_annotations(job.annotations, defaults=self.defaults)
        target = Target.of(body, role="foreign", plural=plural, options=options)
        known = self._remember_owner(uid, target)
        await announce(
            known, problems, status=self.status, post_event=self._event,
            involved=target.involved(), trainingjob=False
        )
        if learned:
            await self._replay_unowned()

    async def _replay_unowned(self) -> None:
        """Handle again the pods seen before their followed owner was known, now that one may be."""
        for pod_uid, pod in list(self._unowned.items()):
            owners = [uid for uid, _kind, _name in jobs.owner_uids(pod)]
            if self._watched_ancestor(owners) is not None:
                self._unowned.pop(pod_uid, None)
                await self.on_pod(pod)

    def _remember_owner(self, uid: str, target: Target) -> WatchedTarget:
        """The followed owner ``uid``, with its latest target (a new entry the first time)."""
        self.records.job(uid, namespace=target.namespace, name=target.name).role = target.role
        known = self.targets.owners.get(uid)
        if known is None:
            known = self.targets.owners[uid] = WatchedTarget(target=target)
        else:
            known.target = target
        return known

    # --- pods ---------------------------------------------------------------------------------------

    async def resolve(self, pod: Mapping[str, Any]) -> WatchedTarget | None:
        """Which followed target this pod belongs to, if any."""
        body = PodBody(pod)
        pod_uid = body.uid
        if pod_uid in self.targets.pods:
            return self.targets.pods[pod_uid]
        watched = self._watched_ancestor([uid for uid, _kind, _name in jobs.owner_uids(pod)])
        if watched is not None:
            return watched
        owner = jobs.trainingjob_owner(pod)
        if owner is not None:
            tj = await self.kube.get(jobs.trainingjob_path(body.namespace, owner[0]))
            if tj is not None and Body(tj).uid == owner[1]:
                await self.on_trainingjob(tj)
                return self.targets.owners.get(owner[1])
            return None
        selector = self.settings.follow_selector
        if watch_options.is_watched(body.annotations) or (
            selector is not None and selector.selects(body.namespace, body.labels)
        ):
            # A pod the follow selector picks is followed as if annotated; its own annotations still apply.
            options, problems = watch_options.from_annotations(body.annotations, defaults=self.defaults)
            known = WatchedTarget(target=Target.of(pod, role="pod", plural="pods", options=options))
            await announce(
                known, problems, status=self.status, post_event=self._event,
                involved=known.target.involved(), trainingjob=False
            )
            return known
        return None

    def _watched_ancestor(self, owners: list[str]) -> WatchedTarget | None:
        """The nearest followed owner up the pod's owner chain (through objects of configured kinds)."""
        seen: set[str] = set()
        level = owners
        for _ in range(kube_owners.MAX_OWNER_DEPTH):
            for uid in level:
                if uid in self.targets.owners:
                    return self.targets.owners[uid]
            seen.update(level)
            level = [p for uid in level for p in self.records.parents_of(uid) if p not in seen]
            if not level:
                break
        return None

    async def on_pod(self, pod: Mapping[str, Any], *, deleted: bool = False) -> None:
        seen_at = time.monotonic()
        known = await self.resolve(pod)
        body = PodBody(pod)
        pod_uid = body.uid
        if known is None:
            self._unowned.pop(pod_uid, None)
            if not deleted and jobs.owner_uids(pod):
                self._unowned[pod_uid] = _slim(pod)  # its owner may be learned later (_replay_unowned)
                if len(self._unowned) > MAX_UNOWNED:
                    self._unowned.pop(next(iter(self._unowned)))
            return
        self._unowned.pop(pod_uid, None)
        self.records.pod(pod_uid, namespace=body.namespace, name=body.name)
        self.records.note_phase(pod_uid, finished=body.phase in FINISHED_PHASES, now=time.time())
        if not deleted:
            self.targets.pods[pod_uid] = known
            if pod_uid not in known.ranks:
                known.ranks[pod_uid] = job_root_cause.rank_of(pod)
        target = known.target
        if (
            not deleted
            and self.following is not None
            and target.options.follow_logs
            and body.has_started_containers()
        ):
            self.following.ensure(
                namespace=body.namespace,
                pod=body.name,
                pod_uid=pod_uid,
                containers=target.options.containers,
                body=pod,
            )

        for found in termination.find(pod):
            if found.key in self._reporting:
                await asyncio.wait({self._reporting[found.key]})  # its report first, then what came since
            if self.records.reported(found.pod_uid, found.key):
                if found.sidecar_message is not None:
                    self.reporter.attach_sidecar(found)
                continue
            stored = await self._stored_report(known, found, pod)
            if stored is not None:
                self.records.note_reported(found.pod_uid, found.key)
                document, raw = stored
                if document.pending_record:
                    self.reporter.resume_pending_record(termination=found, target=known.target, stored=raw)
                continue
            task = self._tasks.start(self._report(found, known, seen_at), name=f"report-{found.pod}")
            self._reporting[found.key] = task
            await asyncio.shield(task)  # the handler waits: the report is part of handling this event

        if target.role == "trainingjob":
            await self._trainingjob_pod_status(known, pod)
        elif target.role == "foreign":
            await self._job_root_cause(known, pod, deleted=deleted)
        if deleted:
            # Only now: the report and the job's row above read this pod's log tail, report and projection.
            self.records.forget_pod(pod_uid, "deleted")

    def drop_finished(self, *, now: float | None = None) -> int:
        """Drop the state of pods finished longer ago than their log's retention and never deleted.

        As if deleted (`Records.forget_pod`, every component's hook), and their reports too, also a
        foreign job's pod's: the report stays where it was written (the annotation, the status). A
        pod whose report is still being written or followed up is left for the next sweep. A later
        event of such a pod finds its report stored and writes none again. Returns how many went.
        """

        def ready(uid: str) -> bool:
            return self.reporter.settled(uid) and not any(
                task_key.startswith(uid + "/") for task_key in self._reporting
            )

        return self.records.expire_finished(
            now=time.time() if now is None else now, retention_s=self.settings.log_retention_s, ready=ready
        )

    async def drop_finished_forever(self, *, interval_s: float) -> None:
        """`drop_finished` every ``interval_s`` seconds, for the operator's whole life."""
        while True:
            await asyncio.sleep(interval_s)
            gone = self.drop_finished()
            if gone:
                logger.info("dropped the state of %d pods finished more than %s ago and never deleted",
                            gone, _duration(self.settings.log_retention_s))

    async def _job_root_cause(
        self, known: WatchedTarget, pod: Mapping[str, Any], *, deleted: bool = False
    ) -> None:
        """Update a foreign job's pod facts; with two pods or more and a failure, write the job section.

        Recomputed only when a pod's facts change (a running pod's do not), so a thousand pods'
        events do not each cost a root-cause pass. A deleted pod keeps its row, marked deleted:
        a job controller's cleanup must not take the root cause out of the report.
        """
        body = PodBody(pod)
        uid = body.uid
        outcome = self.reporter.by_pod.get(uid)
        verdict, line = self.reporter.headline_of(outcome) if outcome is not None else (None, None)
        log = self.following.facts(uid) if self.following is not None else None
        facts = job_section.pod_facts(
            pod,
            tails={c: log.last_lines(c) for c in log.tail} if log is not None else {},
            last_lines_ns=dict(log.last_line_ns) if log is not None else {},
            verdict=verdict if outcome is not None and outcome.report.verdict else None,
            summary=line,
            log_url=lambda container: log_links.log_url(
                self.reporter.log_url, namespace=body.namespace, pod=body.name, container=container
            ),
            deleted=deleted,
        )
        before = known.job_pods.get(uid)
        if deleted and before is not None and before.failed and not facts.failed:
            facts = dataclasses.replace(before, deleted=True)  # the failure seen before outlives the pod
        if before == facts:
            return
        known.job_pods[uid] = facts
        known.job_dirty = True
        if known.job_task is None or known.job_task.done():
            known.job_task = self._tasks.start(self._write_job(known), name=f"job-{known.target.name}")

    async def _write_job(self, known: WatchedTarget) -> None:
        """Compute and write the job section until no pod changed meanwhile (changes gathered a moment)."""
        while known.job_dirty:
            known.job_dirty = False
            await asyncio.sleep(JOB_REPORT_COALESCE_S)
            if self.targets.owners.get(known.target.uid) is not known:
                return  # forgotten meanwhile (its pods' deletions came just before its own): no section
            computed = job_view.compute_job(known)
            if computed is None:
                continue
            view, event = computed

            def current(announced: tuple[str, bool, str] | None = known.job_root) -> bool:
                return known.job_root == announced

            await self.reporter.write_job(
                known.target, view, event=event, outcome=self.reporter.by_pod.get(view.root_uid or ""),
                current=current,
            )

    async def _report(self, found: termination.Termination, known: WatchedTarget, seen_at: float) -> None:
        try:
            if self.following is not None:
                await self.following.wait(found.pod_uid, timeout_s=TAIL_DRAIN_S)
            facts = self.following.facts(found.pod_uid) if self.following is not None else None
            outcome = await self.reporter.report(
                termination=found, target=known.target, facts=facts, seen_at=seen_at
            )
            self.records.note_reported(found.pod_uid, found.key)
            logger.info(
                "report for %s/%s (%s): verdict %s, written to %s in %.3f s",
                found.namespace,
                found.pod,
                found.container,
                outcome.report.verdict,
                outcome.written,
                outcome.latency_s,
            )
        finally:
            self._reporting.pop(found.key, None)

    async def _stored_report(
        self, known: WatchedTarget, found: termination.Termination, pod: Mapping[str, Any]
    ) -> tuple[ReportDocument, dict[str, Any]] | None:
        """The report of this very container instance already on the target (operator restarts), and its
        JSON as stored; None when there is none. A bare pod is its own target: the event's body holds
        its annotation as of the event (no read)."""
        target = known.target
        try:
            obj = pod if target.role == "pod" else await self.kube.get(target.path())
            located = StoredReport.locate(obj)
        except (KubeError, ValueError, TypeError, AttributeError, RecursionError):
            # An annotation anyone can write is data: unreadable means "no report yet", never a crash.
            return None
        if located is None:
            return None
        raw = located.raw
        stored = located.document()
        of = stored.pod
        same = (
            of.uid is not None
            and of.uid == found.pod_uid
            and of.container_id == found.container_id
            and of.container == found.container
        )
        return (stored, raw) if same else None

    async def _trainingjob_pod_status(self, known: WatchedTarget, pod: Mapping[str, Any]) -> None:
        target = known.target
        fields = pod_status_fields(pod)
        facts = self.following.facts(PodBody(pod).uid) if self.following else None
        if facts is not None:
            fields.update(log_status_fields(facts, log_url=self.reporter.log_url))
        await self.status.patch_if_changed(namespace=target.namespace, name=target.name, fields=fields)

    # --- periodic log status -------------------------------------------------------------------------------

    async def refresh_log_status(self) -> int:
        """Write each followed TrainingJob's ``lastLogLineAt`` and ``log`` counters where they changed.

        Pod events and memory lines update these too, but a pod that runs for hours prints
        between them; without this the status would look stale exactly when it is not.
        Returns how many jobs were patched.
        """
        if self.following is None:
            return 0
        patched = 0
        for pod_uid, known in list(self.targets.pods.items()):
            target = known.target
            facts = self.following.facts(pod_uid)
            if target.role != "trainingjob" or facts is None:
                continue
            fields = log_status_fields(facts, log_url=self.reporter.log_url)
            full = sorted(facts.disk_full)
            # DiskFull appears once a volume was full, never on a job whose log always fit.
            shown = self.status.condition(namespace=target.namespace, name=target.name, type_="DiskFull")
            conditions = [disk_full_condition(facts, full)] if full or shown is not None else []
            try:
                if await self.status.patch_if_changed(
                    namespace=target.namespace, name=target.name, fields=fields, conditions=conditions
                ):
                    patched += 1
            except (KubeError, OSError, TimeoutError) as exc:
                logger.warning(
                    "refreshing the log status of %s/%s failed: %s", target.namespace, target.name, exc
                )
        return patched

    async def refresh_forever(self, *, interval_s: float) -> None:
        """:meth:`refresh_log_status` every ``interval_s`` until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.refresh_log_status()
            except Exception:  # one bad pass must not end the refreshes
                logger.exception("refreshing log status failed")

    # --- helpers -------------------------------------------------------------------------------------------

    async def _event(self, involved: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            await self.kube.post_event(involved=involved, type_=type_, reason=reason, message=message)
        except (KubeError, OSError, TimeoutError) as exc:
            logger.warning("posting event %s failed: %s", reason, exc)

    async def stop(self) -> None:
        await self._tasks.close()
        await self.reporter.stop()
        if self.following is not None:
            await self.following.stop()
        if self.on_stopped is not None:
            await self.on_stopped()
