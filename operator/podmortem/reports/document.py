"""The report document: a `FailureReport` with what the operator knows around it, in one typed model.

The operator writes it whole into a TrainingJob's ``status.failureReport`` (`ReportDocument.to_status`)
and as a summary into the ``podmortem.io/failure-report`` annotation (`ReportDocument.to_annotation`);
the report page, the CLI's ``report``, the demo and an operator resuming after a restart read either
form back with `ReportDocument.parse`. Every reader goes through this model, so no module probes the
JSON by key, and the two forms cannot drift apart from their readers.

Anyone who may edit the object can edit a stored report, so `parse` is lenient where it must be:
a part of the wrong type (a string where a number goes, a list where an object goes) reads as
absent, and the rest of the document still reads. Its size and depth are bounded before it gets
here (`podmortem.reports.stored_bounds`).
"""

from __future__ import annotations

import copy
import enum
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, ValidationError

from podmortem.reports.failure import FailureReport
from podmortem.reports.findings import Finding
from podmortem.reports.text import shorten
from podmortem.reports.times import parse_time, rfc3339


class KernelRecordState(enum.StrEnum):
    """Where a report stands with the kernel's OOM record of the kill (``evidence.kernelRecord.state``)."""

    #: The node agent handed the record over; the findings rest on it.
    ATTACHED = "attached"
    #: Not there yet: the agent is asked again for a while and the report is updated.
    PENDING = "pending"
    #: The wait is over (or nobody can be asked) and no record came.
    NOT_FOUND = "not-found"
    #: The end was not an OOM kill the kernel logs (an eviction, a plain exit): nothing to seek.
    NOT_SOUGHT = "not-sought"


def _time(value: object) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    at = parse_time(value)
    if at is None:
        raise ValueError("not an RFC 3339 time")
    return at


#: A time as reports write it: RFC 3339 in UTC, whole seconds (`podmortem.reports.times`).
Time = Annotated[datetime, BeforeValidator(_time), PlainSerializer(rfc3339, return_type=str)]


class _Part(BaseModel):
    """A part of the document: JSON names in camelCase, Python names in snake_case."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class PodContext(_Part):
    """The pod the report is about, its container and how it ended (as the kubelet reported it)."""

    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    node: str | None = None
    container: str | None = None
    container_id: str | None = Field(default=None, alias="containerID")
    exit_code: int | None = Field(default=None, alias="exitCode")
    reason: str | None = None
    pod_reason: str | None = Field(default=None, alias="podReason")
    pod_message: str | None = Field(default=None, alias="podMessage")
    started_at: Time | None = Field(default=None, alias="startedAt")
    finished_at: Time | None = Field(default=None, alias="finishedAt")
    #: The container's ``TZ``, only when it sets one (the page shows times in it too).
    time_zone: str | None = Field(default=None, alias="timeZone")

    def ended_by(self) -> str | None:
        """The container's reason, else the pod's (``Evicted``)."""
        return self.reason or self.pod_reason


class KernelRecordEvidence(_Part):
    state: KernelRecordState | None = None
    note: str | None = None
    #: Seconds after the first report that the record came (``attached`` after ``pending``).
    arrived_after_s: float | None = Field(default=None, alias="arrivedAfterS")
    #: Requests made to the agent while waiting.
    requests: int | None = None


class WorkingSetEvidence(_Part):
    """The container's working set over its life: Prometheus' series, else the agent's samples."""

    source: str | None = None
    peak_bytes: int | None = Field(default=None, alias="peakBytes")
    peak_at: Time | None = Field(default=None, alias="peakAt")
    note: str | None = None
    points: list[tuple[Time, int]] = Field(default_factory=list)
    #: Prometheus was slow: its series is patched in when it comes.
    pending: bool = False
    #: Why the series was dropped to fit the size budget.
    dropped: str | None = None


class LogGap(_Part):
    """Where lines of the stored log may be missing, and why."""

    reason: str | None = None
    after: Time | None = None
    before: Time | None = None


class LogEvidence(_Part):
    location: str | None = None
    url: str | None = None
    last_line_at: Time | None = Field(default=None, alias="lastLineAt")
    lines: int | None = None
    gaps: list[LogGap] = Field(default_factory=list)
    error: str | None = None
    note: str | None = None


class SidecarEvidenceSummary(_Part):
    """What the pod's ``podmortem sidecar`` left in its termination message (sidecar mode)."""

    #: "attached" (read), "pending" (the sidecar has not ended yet), "invalid" (not its evidence).
    state: Literal["attached", "pending", "invalid"] | None = None
    note: str | None = None
    victim_pid: int | None = Field(default=None, alias="victimPid")
    victim_comm: str | None = Field(default=None, alias="victimComm")
    #: The container's OOM-kill counter at the end.
    oom_kills: int | None = Field(default=None, alias="oomKills")
    peak_bytes: int | None = Field(default=None, alias="peakBytes")
    limit_bytes: int | None = Field(default=None, alias="limitBytes")
    samples: int | None = None
    written_at: Time | None = Field(default=None, alias="writtenAt")
    version: str | None = None
    #: "invalid" because it contradicts the kubelet: each contradiction, in words.
    contradictions: list[str] = Field(default_factory=list)


#: `PodPeak.source` when the kernel's OOM record gave the figure.
PEAK_FROM_KERNEL = "the kernel's OOM record at the kill"


class PodPeak(_Part):
    """The pod's memory peak the report names, and where it came from (`pod_peak`)."""

    peak_bytes: int | None = Field(default=None, alias="peakBytes")
    limit_bytes: int | None = Field(default=None, alias="limitBytes")
    #: `PEAK_FROM_KERNEL` (with the record's source when it is not the node's), or the working set's
    #: samples ("agent samples", "prometheus samples": a lower bound, a rise between two is missed).
    source: str | None = None
    #: "kernel" or "samples", for a reader that sorts by it.
    kind: Literal["kernel", "samples"] | None = None


class Evidence(_Part):
    """What the report rests on, source by source, and which sources failed."""

    #: "ok" or "unavailable".
    agent: str | None = None
    kernel_records: int | None = Field(default=None, alias="kernelRecords")
    samples: int | None = None
    kernel_record: KernelRecordEvidence = Field(default_factory=KernelRecordEvidence, alias="kernelRecord")
    working_set: WorkingSetEvidence = Field(default_factory=WorkingSetEvidence, alias="workingSet")
    log: LogEvidence = Field(default_factory=LogEvidence)
    #: The sidecar's evidence, in a pod that runs one.
    sidecar: SidecarEvidenceSummary | None = None
    errors: list[str] = Field(default_factory=list)
    #: The pod's peak as every surface names it (status.memory, the page, ``podmortem demo``).
    peak: PodPeak | None = None


class JobRow(_Part):
    """One pod of a multi-pod job, as the job's root-cause analysis placed it."""

    pod: str | None = None
    rank: int | None = None
    role: str | None = None
    #: Which of the pod's containers the row is about, when it has several.
    container: str | None = None
    exit_code: int | None = Field(default=None, alias="exitCode")
    reason: str | None = None
    finished_at: Time | None = Field(default=None, alias="finishedAt")
    #: The pod's own line (its cause or the peer failure it names); the root's is in ``rootCause``.
    line: str | None = None
    log_url: str | None = Field(default=None, alias="logUrl")
    #: The pod is gone: the row is what was seen of it before.
    deleted: bool = False
    #: The root cause's verdict (``rootCause`` only).
    verdict: str | None = None


class JobSection(_Part):
    """A multi-pod job's section: which pod failed first of its own, and how the others were read."""

    pods: int | None = None
    roles: dict[str, int] = Field(default_factory=dict)
    root_cause: JobRow | None = Field(default=None, alias="rootCause")
    #: No failed pod shows a cause of its own: the earliest failure is named, a guess.
    guessed: bool | None = None
    note: str | None = None
    rows: list[JobRow] = Field(default_factory=list)
    rows_omitted: int | None = Field(default=None, alias="rowsOmitted")

    def to_json(self) -> dict[str, Any]:
        return _dump(self)

    def json_size(self) -> int:
        return _size(self.to_json())


#: Keys of the status form that are the document's context, not the `FailureReport`'s.
CONTEXT_KEYS = ("pod", "reportedAt", "updatedAt", "evidence", "reportUrl", "job")

#: The pod fields the annotation's summary keeps.
SUMMARY_POD_KEYS = (
    "namespace", "name", "uid", "node", "container", "containerID", "exitCode", "reason", "podReason",
    "finishedAt", "timeZone",
)

Form = Literal["status", "annotation"]


class ReportDocument(_Part):
    """A failure report with its pod, times, evidence and page URL: what the operator writes and reads."""

    report: FailureReport = Field(default_factory=FailureReport)
    pod: PodContext = Field(default_factory=PodContext)
    reported_at: Time | None = Field(default=None, alias="reportedAt")
    updated_at: Time | None = Field(default=None, alias="updatedAt")
    evidence: Evidence = Field(default_factory=Evidence)
    report_url: str | None = Field(default=None, alias="reportUrl")
    #: A multi-pod job's section (the annotation of a job of another kind).
    job: JobSection | None = None
    #: Which form it was read from: the whole report (status) or the annotation's summary.
    form: Form = Field(default="status", exclude=True)
    #: The summary was cut to fit its size budget.
    truncated: bool = False

    # -- reading ---------------------------------------------------------------------------------

    @classmethod
    def parse(cls, document: Mapping[str, Any]) -> ReportDocument:
        """Either stored form, whatever was edited in it: a part of the wrong type reads as absent.

        The annotation's summary keeps the kernel record's state alone (``"kernelRecord": "pending"``),
        the status form keeps ``evidence``; a document with neither is read as the status form.
        """
        data = dict(document)
        if not isinstance(data.get("evidence"), Mapping) and (
            "kernelRecord" in data or "workingSetPeakBytes" in data or "lastLogLineAt" in data
        ):
            return cls._from_summary(data)
        context = {key: data[key] for key in CONTEXT_KEYS if key in data}
        report = {key: value for key, value in data.items() if key not in CONTEXT_KEYS}
        doc = _lenient(cls, context)
        doc.report = _lenient(FailureReport, report)
        return doc

    @classmethod
    def _from_summary(cls, data: Mapping[str, Any]) -> ReportDocument:
        kill = data.get("kill")
        report = _lenient(FailureReport, _known({
            "verdict": data.get("verdict"),
            "findings": data.get("findings"),
            "kill": {"pid": kill.get("pid"), "comm": kill.get("comm"), "anon_rss_kb": kill.get("anonRssKb")}
            if isinstance(kill, Mapping) else None,
        }))
        doc = _lenient(cls, _known({
            "pod": data.get("pod"),
            "reportedAt": data.get("reportedAt"),
            "reportUrl": data.get("reportUrl"),
            "job": data.get("job"),
            "truncated": data.get("truncated"),
            "evidence": _known({
                "kernelRecord": _known({"state": data.get("kernelRecord")}),
                "workingSet": _known({"peakBytes": data.get("workingSetPeakBytes")}),
                "log": _known({"lastLineAt": data.get("lastLogLineAt"), "url": data.get("logUrl")}),
                "errors": data.get("errors"),
            }),
        }))
        doc.report = report
        doc.form = "annotation"
        return doc

    @property
    def kernel_record_state(self) -> KernelRecordState | None:
        return self.evidence.kernel_record.state

    @property
    def pending_record(self) -> bool:
        return self.kernel_record_state == KernelRecordState.PENDING

    def cause(self) -> Finding | None:
        """The finding whose code is the verdict."""
        return self.report.finding(self.report.verdict) if self.report.verdict else None

    def last_line_ns(self) -> int | None:
        """The log's last line, in ns (whole seconds, as reports keep it)."""
        at = self.evidence.log.last_line_at
        return int(at.timestamp()) * 1_000_000_000 if at is not None else None

    # -- writing ---------------------------------------------------------------------------------

    def context_json(self) -> dict[str, Any]:
        """The context keys (`CONTEXT_KEYS`) of the status form."""
        doc: dict[str, Any] = {"pod": self.pod_json()}
        if self.reported_at is not None:
            doc["reportedAt"] = rfc3339(self.reported_at)
        if self.updated_at is not None:
            doc["updatedAt"] = rfc3339(self.updated_at)
        doc["evidence"] = _dump(self.evidence)
        if not self.evidence.working_set.pending:
            del doc["evidence"]["workingSet"]["pending"]
        if self.report_url is not None:
            doc["reportUrl"] = self.report_url
        if self.job is not None:
            doc["job"] = self.job.to_json()
        return doc

    def pod_json(self) -> dict[str, Any]:
        """The pod part: every field, null when unknown, but ``timeZone`` only when the pod has one."""
        pod = self.pod.model_dump(mode="json", by_alias=True)
        if pod.get("timeZone") is None:
            pod.pop("timeZone", None)
        return pod

    def to_status(self, *, max_bytes: int) -> dict[str, Any]:
        """The whole report plus its context in at most ``max_bytes`` of JSON, trimming the bulk first.

        The working-set series goes first (halved until it fits), then the report's own
        ``trimmed()`` steps. The verdict and findings' messages always stay.
        """
        ctx = self.context_json()
        series = ctx["evidence"].setdefault("workingSet", {})
        series.setdefault("points", [])
        report = self.report.model_dump(mode="json")
        doc = report | ctx
        while _size(doc) > max_bytes and len(series["points"]) > 2:
            series["points"] = series["points"][::2]
            doc = report | ctx
        if _size(doc) > max_bytes:
            trimmed = self.report.trimmed(max(max_bytes - _size(ctx), 0)).model_dump(mode="json")
            doc = trimmed | ctx
            if _size(doc) > max_bytes and series["points"]:
                series["points"] = []
                series["dropped"] = "series dropped to fit the report size limit"
                doc = trimmed | ctx
        return doc

    def to_annotation(self, *, max_bytes: int) -> dict[str, Any]:
        """The annotation's summary (verdict, pod, kill, findings, evidence states), within ``max_bytes``.

        A job section, if any, is not part of it: `with_job` adds one in the room left.
        """
        pod = self.pod_json()
        ev = self.evidence
        doc: dict[str, Any] = {
            "verdict": self.report.verdict,
            "reportedAt": rfc3339(self.reported_at) if self.reported_at is not None else None,
            "pod": {key: pod.get(key) for key in SUMMARY_POD_KEYS},
            "findings": [
                {"code": f.code, "severity": str(f.severity), "message": f.message}
                for f in self.report.findings
            ],
            "kernelRecord": str(ev.kernel_record.state) if ev.kernel_record.state is not None else None,
            "workingSetPeakBytes": ev.working_set.peak_bytes,
            "lastLogLineAt": rfc3339(ev.log.last_line_at) if ev.log.last_line_at is not None else None,
            "logUrl": ev.log.url,
            "reportUrl": self.report_url,
            "errors": list(ev.errors),
        }
        kill = self.report.kill
        if kill is not None:
            doc["kill"] = {"pid": kill.pid, "comm": kill.comm, "anonRssKb": kill.anon_rss_kb}
        if self.truncated:
            doc["truncated"] = True
        # Trim in order of least value until it fits: error detail, extra findings, long messages (each
        # cut at a word, ending with an ellipsis: see `podmortem.reports.text`).
        steps: tuple[Callable[[], object], ...] = (
            lambda: doc.update(errors=[shorten(str(e), 200) for e in doc["errors"][:2]]),
            lambda: doc.update(findings=doc["findings"][:3]),
            lambda: [f.update(message=shorten(f["message"], 300)) for f in doc["findings"]],
            lambda: doc.update(errors=[]),
            lambda: doc.update(findings=doc["findings"][:1]),
            lambda: [f.update(message=shorten(f["message"], 100)) for f in doc["findings"]],
        )
        for step in steps:
            if _size(doc) <= max_bytes:
                break
            step()
            doc["truncated"] = True
        return doc



def with_job(summary: dict[str, Any], job: JobSection) -> dict[str, Any]:
    """An annotation summary (or ``{}``) with a job's section."""
    return summary | {"job": job.to_json()}


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``: keys gone from ``new`` become null.

    A status patch merges objects key by key, so without the nulls a key of the first report
    (a "pending" note, a trimmed field) would outlive its update.
    """
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(before, Mapping) and isinstance(value, Mapping):
            patch[key] = merge_patch(before, value)
        else:
            patch[key] = value
    for key in old.keys() - new.keys():
        patch[key] = None
    return patch


def _size(doc: object) -> int:
    return len(json.dumps(doc, separators=(",", ":")).encode("utf-8", "surrogatepass"))


def _dump(model: BaseModel) -> dict[str, Any]:
    """JSON by alias, without the parts that are unknown (None)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _known(parts: dict[str, Any]) -> dict[str, Any]:
    """The parts a summary has (an absent one is left to the model's default)."""
    return {key: value for key, value in parts.items() if value is not None}


# -- lenient reading -------------------------------------------------------------------------------

#: Rounds of dropping what failed to validate. Each round drops every part that failed, and a part
#: is only dropped once, so a document needs about as many rounds as it is deep (32 at most).
_ROUNDS = 40
_DROP = object()


M = TypeVar("M", bound=BaseModel)


def _lenient(model: type[M], data: object) -> M:
    """``data`` as ``model``, each part that does not validate left out (read as absent)."""
    if not isinstance(data, Mapping):
        return model()
    work: Any = copy.deepcopy(dict(data))
    for _ in range(_ROUNDS):
        try:
            return model.model_validate(work)
        except ValidationError as exc:
            for error in exc.errors():
                _mark(work, error["loc"])
            work = _sweep(work)
    return model()


def _mark(data: Any, loc: tuple[int | str, ...]) -> None:
    """Mark the deepest part of ``data`` on the error's path for dropping (a missing field: its parent)."""
    parent: Any = None
    key: int | str | None = None
    node = data
    for step in loc:
        at_key = isinstance(node, dict) and step in node
        at_index = isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node)
        if at_key or at_index:
            parent, key, node = node, step, node[step]
        else:
            break  # a union member's tag, or the name of a missing field
    if parent is not None and key is not None:
        parent[key] = _DROP


def _sweep(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sweep(v) for k, v in value.items() if v is not _DROP}
    if isinstance(value, list):
        return [_sweep(v) for v in value if v is not _DROP]
    return value


def pod_peak(document: ReportDocument) -> PodPeak | None:
    """The one peak of a report: the kernel's usage at the kill when its record is in (the cgroup was
    at its limit; no sample taken inside it can be above), else the working set's sampled peak.

    None when the report has neither."""
    cgroup = document.report.cgroup
    if cgroup is not None and cgroup.usage_bytes is not None:
        source = PEAK_FROM_KERNEL
        if document.report.record_source:
            source += f" [{document.report.record_source}]"
        return PodPeak(peak_bytes=cgroup.usage_bytes, limit_bytes=cgroup.limit_bytes, source=source,
                       kind="kernel")
    ws = document.evidence.working_set
    if ws.peak_bytes:
        return PodPeak(
            peak_bytes=ws.peak_bytes,
            source=f"{ws.source or 'sampled'} samples of the working set (a lower bound: a rise between "
            "two samples is missed)",
            kind="samples",
        )
    return None

