"""How the log store writes and how much disk it may take, each field with its unit and default's reason."""

from __future__ import annotations

from dataclasses import dataclass, field

from podmortem.logs.storage import retention


@dataclass(frozen=True)
class StoreSettings:
    """How the store writes; ``podmortem.logs.storage.writing`` says what each fsync policy guarantees."""

    #: Start a new segment file once the current one holds this many bytes. Default 16 MiB:
    #: large enough that a million lines a second opens a file only every second or so,
    #: small enough that crash recovery (which reads the last segment) takes milliseconds
    #: and retention frees space in fine steps.
    segment_bytes: int = 16 << 20
    #: fsync written data at most this often, in seconds; 0: every batch; None: never.
    #: Default 1 s: a node crash loses at most a second, which the follower re-reads.
    fsync_interval_s: float | None = 1.0
    #: Per-job limits by age and size.
    retention: retention.RetentionSettings = field(default_factory=retention.RetentionSettings)
    #: Fraction of the volume kept free: below it (checked at every new segment, and when a
    #: write fails for a full volume) the oldest finished logs are deleted early, before their
    #: age or size limit. Default 5%: room for a few segments of every live container. 0: off.
    min_free_ratio: float = 0.05
    #: Bytes the whole store may take (None: no budget). For a volume whose limit the store cannot
    #: see: an emptyDir's ``sizeLimit`` is enforced by evicting the pod, not by ENOSPC. Above 95% of
    #: it the oldest finished logs are deleted early, down to 90%. The chart sets it from the
    #: emptyDir's or the claim's size.
    max_store_bytes: int | None = None
    #: Segment files kept open for writing at once. Beyond it, the file of the instance written
    #: longest ago is closed (fsynced first when the policy syncs) and opened again at its next
    #: write, so a quiet followed pod holds its stream's socket and no file: 10,000 idle pods fit
    #: a container's 1,024 soft descriptor limit only so (an open file each would need 10,000).
    max_open_segments: int = 256

    def __post_init__(self) -> None:
        if self.segment_bytes < 4096:
            raise ValueError("segment_bytes must be at least 4096")
        if not 0 <= self.min_free_ratio < 1:
            raise ValueError("min_free_ratio must be in [0, 1)")
        if self.max_store_bytes is not None and self.max_store_bytes < 16 * self.segment_bytes:
            raise ValueError("max_store_bytes must hold at least 16 segments")
        if self.max_open_segments < 1:
            raise ValueError("max_open_segments must be at least 1")
        if self.fsync_interval_s is not None and self.fsync_interval_s < 0:
            raise ValueError("fsync_interval_s must be >= 0 or None")
