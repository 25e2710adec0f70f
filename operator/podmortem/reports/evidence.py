"""What the node agent knows about one pod: the contract between the agent and the operator.

The agent serves it at ``GET /v1/pods/{uid}/evidence``; the operator parses it
into the same model when it writes a failure report. Keeping one pydantic model
for both sides means a field added on one side cannot silently vanish on the other.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from podmortem.reports.memory import MemorySample
from podmortem.reports.oom_record import OomKillRecord

#: Bump when a field changes meaning or goes away (adding optional fields does not need it).
EVIDENCE_SCHEMA = "podmortem.io/pod-evidence/v1"


class SampleGap(BaseModel):
    """A sampling round that produced no reading for this pod, and why (e.g. the cgroup was gone)."""

    at: datetime
    #: Short machine-readable cause: "cgroup-missing", "cgroup-unknown", "read-error".
    reason: str
    #: The same in words, with the path or error, for people.
    detail: str = ""


class KernelLogStatus(BaseModel):
    """Whether the agent could read kernel records at all, so an empty list can be trusted or not.

    Of whichever source it reads (/dev/kmsg or syslog(2)); the JSON keeps its first name, ``kmsg``.
    """

    #: True while the kernel log (/dev/kmsg, or syslog(2) where kmsg cannot be opened) is being read.
    readable: bool
    #: Why not, when it is not (e.g. "PermissionError: needs CAP_SYSLOG").
    error: str | None = None
    #: Kernel records overwritten in the ring buffer before the agent read them, since the agent started.
    lost: int = 0


class PodEvidence(BaseModel):
    """Samples and kernel OOM records of one pod, from the agent on the pod's node."""

    schema_: str = Field(default=EVIDENCE_SCHEMA, alias="schema")
    pod_uid: str
    node: str = ""
    namespace: str = ""
    name: str = ""
    #: The pod's memory cgroup as the kernel names it (relative to the memory hierarchy root).
    cgroup_path: str | None = None
    #: 1 or 2: which cgroup interface the node speaks.
    cgroup_version: int | None = None
    #: Oldest first. Bounded by the agent's ring size; ``samples_dropped`` says how many fell out.
    samples: list[MemorySample] = Field(default_factory=list)
    samples_dropped: int = 0
    #: Rounds where the pod could not be sampled, oldest first (bounded with the samples).
    gaps: list[SampleGap] = Field(default_factory=list)
    #: OOM kills the kernel logged for this pod's cgroups, oldest first.
    kernel_records: list[OomKillRecord] = Field(default_factory=list)
    kernel_records_dropped: int = 0
    #: Kernel records lost to ring-buffer overwrites on this node since the agent started; when
    #: non-zero, a missing record for this pod may be one of them.
    kmsg_lost: int = 0
    kmsg: KernelLogStatus | None = None
    #: Time range covered by ``samples`` (None when there are none).
    sampled_from: datetime | None = None
    sampled_to: datetime | None = None
    #: When the agent answered.
    served_at: datetime | None = None

    model_config = {"populate_by_name": True}
