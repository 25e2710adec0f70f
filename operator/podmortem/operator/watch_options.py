"""Per-job options from annotations (foreign jobs) or the TrainingJob spec, validated with clear errors.

A bad value must never stop the operator or the job: it becomes an
:class:`OptionProblem` that names the annotation (or spec field), says what
is wrong and which default is used instead. The caller turns problems into a
Warning Event and a status condition. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from podmortem.kube.owners import WATCH_ANNOTATION
from podmortem.reports import stored_report

PREFIX = "podmortem.io/"
WATCH = WATCH_ANNOTATION
FOLLOW_LOGS = PREFIX + "follow-logs"
CONTAINERS = PREFIX + "containers"
LOG_RETENTION = PREFIX + "log-retention"
MEMORY_WARNING_RATIO = PREFIX + "memory-warning-ratio"
EARLY_WARNING_EPOCHS = PREFIX + "early-warning-epochs"
#: Where the operator writes the report of a job of any kind but a TrainingJob (`StoredReport.locate`).
FAILURE_REPORT = stored_report.ANNOTATION

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_SIZE = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti|K|M|G|T)?$")
_DURATION_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZE_MULT = {
    None: 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Retention:
    """How long and how much of a job's log the store keeps after the job is gone."""

    max_age_s: float | None = None
    max_bytes: int | None = None

    def __str__(self) -> str:
        parts = []
        if self.max_age_s is not None:
            parts.append(f"{self.max_age_s:g}s")
        if self.max_bytes is not None:
            parts.append(f"{self.max_bytes}B")
        return ",".join(parts) or "store default"


@dataclass(frozen=True)
class WatchOptions:
    """The options of one followed job, after validation."""

    follow_logs: bool = True
    #: Containers to follow; ``None`` follows all of them.
    containers: tuple[str, ...] | None = None
    #: ``None`` leaves retention to the store's own default.
    log_retention: Retention | None = None
    memory_warning_ratio: float = 0.9
    early_warning_epochs: int = 3


@dataclass(frozen=True)
class OptionProblem:
    """One rejected option value and the default used instead."""

    #: The annotation name, or ``spec.<field>`` for a TrainingJob.
    option: str
    value: str
    reason: str
    default: str

    def message(self) -> str:
        shown = self.value
        if len(shown) > _SHOWN:
            shown = f"{shown[:_SHOWN]}... ({len(self.value)} characters)"
        return f"{self.option}={shown!r} is invalid: {self.reason}; using the default ({self.default})"


#: Characters of a bad value quoted in its Event and condition (annotations may be 256 KiB long).
_SHOWN = 200


def is_watched(annotations: Mapping[str, str] | None) -> bool:
    """Whether a pod or foreign job asked to be followed."""
    return (annotations or {}).get(WATCH, "").strip().lower() == "true"


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise ValueError("expected true or false")


def parse_containers(value: str | list[Any]) -> tuple[str, ...]:
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else [str(n) for n in value]
    names = [n for n in names if n]
    if not names:
        raise ValueError("expected a comma-separated list of container names")
    bad = [n for n in names if not _DNS_LABEL.match(n)]
    if bad:
        raise ValueError(f"not container names: {', '.join(bad)}")
    return tuple(dict.fromkeys(names))


def parse_retention(text: str) -> Retention:
    """``7d``, ``2Gi`` or both, comma-separated: ``7d,2Gi``. Units: s/m/h/d and K/M/G/T(i)."""
    age: float | None = None
    size: int | None = None
    tokens = [t.strip() for t in text.split(",") if t.strip()]
    if not tokens:
        raise ValueError("expected an age like 7d, a size like 2Gi, or both: 7d,2Gi")
    for token in tokens:
        if (d := _DURATION.match(token)) is not None and age is None:
            age = float(d.group(1)) * _DURATION_S[d.group(2)]
        elif (s := _SIZE.match(token)) is not None and size is None and not token.isdigit():
            size = int(s.group(1)) * _SIZE_MULT[s.group(2)]
        else:
            raise ValueError(f"{token!r} is neither an age (30m, 12h, 7d) nor a size (500Mi, 2Gi)")
    if (age is not None and age <= 0) or (size is not None and size <= 0):
        raise ValueError("retention must be positive")
    return Retention(max_age_s=age, max_bytes=size)


def parse_ratio(value: str | float) -> float:
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a number between 0 and 1, e.g. 0.9") from None
    if not math.isfinite(ratio) or not 0.0 < ratio <= 1.0:
        raise ValueError("must be greater than 0 and at most 1")
    return ratio


def parse_epochs(value: str | int) -> int:
    try:
        epochs = int(value)
    except (TypeError, ValueError):
        raise ValueError("expected a whole number of epochs, e.g. 3") from None
    if epochs < 1:
        raise ValueError("must be at least 1")
    return epochs


def from_annotations(
    annotations: Mapping[str, str] | None, *, defaults: WatchOptions
) -> tuple[WatchOptions, list[OptionProblem]]:
    """Options of an annotated pod or foreign job; unknown ``podmortem.io/`` keys are left alone."""
    source = dict(annotations or {})
    return _parse(
        {
            FOLLOW_LOGS: source.get(FOLLOW_LOGS),
            CONTAINERS: source.get(CONTAINERS),
            LOG_RETENTION: source.get(LOG_RETENTION),
            MEMORY_WARNING_RATIO: source.get(MEMORY_WARNING_RATIO),
            EARLY_WARNING_EPOCHS: source.get(EARLY_WARNING_EPOCHS),
        },
        defaults=defaults,
        names=(FOLLOW_LOGS, CONTAINERS, LOG_RETENTION, MEMORY_WARNING_RATIO, EARLY_WARNING_EPOCHS),
    )


def from_spec(spec: Mapping[str, Any], *, defaults: WatchOptions) -> tuple[WatchOptions, list[OptionProblem]]:
    """Options of a TrainingJob, from its spec fields of the same meaning."""
    names = (
        "spec.followLogs",
        "spec.containers",
        "spec.logRetention",
        "spec.memoryWarningRatio",
        "spec.earlyWarningEpochs",
    )
    fields = ("followLogs", "containers", "logRetention", "memoryWarningRatio", "earlyWarningEpochs")
    return _parse(
        {n: spec.get(f) for n, f in zip(names, fields, strict=True)}, defaults=defaults, names=names
    )


def _parse(
    raw: Mapping[str, Any], *, defaults: WatchOptions, names: tuple[str, str, str, str, str]
) -> tuple[WatchOptions, list[OptionProblem]]:
    follow_name, containers_name, retention_name, ratio_name, epochs_name = names
    options = defaults
    problems: list[OptionProblem] = []

    def reject(name: str, value: Any, exc: ValueError, default: object) -> None:
        problems.append(OptionProblem(option=name, value=str(value), reason=str(exc), default=str(default)))

    if (value := raw.get(follow_name)) is not None:
        try:
            follow = value if isinstance(value, bool) else parse_bool(str(value))
            options = replace(options, follow_logs=follow)
        except ValueError as exc:
            reject(follow_name, value, exc, str(defaults.follow_logs).lower())
    if (value := raw.get(containers_name)) is not None:
        try:
            options = replace(options, containers=parse_containers(value))
        except ValueError as exc:
            reject(containers_name, value, exc, "all containers")
    if (value := raw.get(retention_name)) is not None:
        try:
            options = replace(options, log_retention=parse_retention(str(value)))
        except ValueError as exc:
            reject(retention_name, value, exc, defaults.log_retention or "store default")
    if (value := raw.get(ratio_name)) is not None:
        try:
            options = replace(options, memory_warning_ratio=parse_ratio(value))
        except ValueError as exc:
            reject(ratio_name, value, exc, defaults.memory_warning_ratio)
    if (value := raw.get(epochs_name)) is not None:
        try:
            if isinstance(value, bool):
                raise ValueError("expected a whole number of epochs, e.g. 3")
            options = replace(options, early_warning_epochs=parse_epochs(value))
        except ValueError as exc:
            reject(epochs_name, value, exc, defaults.early_warning_epochs)
    return options, problems
