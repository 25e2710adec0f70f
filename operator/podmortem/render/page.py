"""The failure report as one HTML page a person reads: verdict, findings, timeline, kill, processes, log.

Pure: a stored report (a `ReportDocument`, read from ``status.failureReport`` or the
``podmortem.io/failure-report`` annotation) and what the caller could add (log lines around
the kill, per-epoch peaks, samples) in, one self-contained HTML document out. No JavaScript,
no external fonts, styles or scripts: it opens from a ticket attachment, on a phone and on
paper the same. Everything that came from a pod, a log or the kernel is escaped; what the
stored report does not hold is said on the page, never drawn from guesses. A part of the
report of the wrong type (an edited report) was read as absent by `ReportDocument.parse`, and
the page stays under `PAGE_MAX_BYTES` whatever the report holds.

Why one module of this size: every part of the page shares one byte budget (`_fit` leaves out the
biggest parts first) and one escaping rule; the SVG timeline is a module of its own.
"""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from podmortem.render import timeline_svg
from podmortem.reports import timeline_model as tm
from podmortem.reports.document import KernelRecordState, ReportDocument
from podmortem.reports.failure import TaskSummary
from podmortem.reports.memory import MemorySample, ProcessMemory
from podmortem.reports.text import shorten
from podmortem.reports.times import parse_time
from podmortem.reports.units import human_bytes

#: Seconds after which a page whose evidence is pending reloads itself.
REFRESH_S = 10

PAGE_MAX_BYTES = 1 << 20
"""Bytes of one page at most (UTF-8). A page of a report the operator wrote is about 60 KiB; an
edited report, or log lines full of characters that escape to six, could make one of any size,
held in memory and sent whole. Over the cap, the biggest parts are left out (largest first,
each replaced by a note saying so) until the page fits; the report's JSON still holds them."""

#: Characters of the page's title shown, the ``…`` of a cut one included (it is made of names, and
#: ``podmortem report``'s file name).
TITLE_MAX_CHARS = 300

#: What a ``TZ`` can be to be looked up: an IANA name (``Europe/Berlin``, ``Etc/GMT+1``), no path.
_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+-]{0,31}(?:/[A-Za-z0-9_+-]{1,32}){0,3}")

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:60rem;
padding:0 .8rem 2rem;color:#111;background:#fff}
h1{font-size:1.35rem;margin:.8rem 0 .2rem}
h2{font-size:1.1rem;margin:1.4rem 0 .4rem;border-bottom:1px solid #ddd}
.verdict{font-size:1.1rem;padding:.6rem .8rem;border-left:5px solid #c00;background:#fff4f4}
.pending{padding:.5rem .8rem;background:#fff8e0;border-left:5px solid #d90}
.finding{margin:.5rem 0;padding:.4rem .7rem;border:1px solid #ddd;border-radius:4px}
.sev{font-size:.75rem;font-weight:bold;text-transform:uppercase;padding:0 .3rem;border-radius:3px}
.critical{background:#c00;color:#fff}.warning{background:#d90;color:#000}.info{background:#ccc}
.action{margin:.2rem 0 0}.meta{color:#555;font-size:.85rem}.note{color:#555;font-style:italic}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:.85rem}
td,th{border:1px solid #ddd;padding:.15rem .4rem;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
svg.timeline{width:100%;height:auto;max-height:22rem}
.legend span{display:inline-block;margin-right:.8rem;font-size:.8rem}
.legend i{display:inline-block;width:.8rem;height:.8rem;margin-right:.25rem;vertical-align:middle}
.bar{display:flex;height:1.4rem;border:1px solid #999;margin:.3rem 0}.bar div{height:100%}
pre,code{font:12px/1.35 ui-monospace,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;word-break:break-all;background:#f6f6f6;padding:.5rem}
.log td{font:12px/1.35 ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap;word-break:break-all}
.log tr.gap td{background:#fff0c0;font-style:italic}.log tr.kill td{background:#fdd;font-weight:bold}
.killed{background:#fdd}
@media print{body{max-width:none}details>*{display:block}a{color:#000}}
"""

_BAR_COLOURS = {"anon": "#4c78a8", "shmem": "#f58518", "kernel": "#e45756", "file": "#72b7b2"}


@dataclass(frozen=True)
class LogLine:
    """One line of the log near the kill, or a marker (``kind="gap"``) where lines may be missing."""

    text: str
    at: datetime | None = None
    kind: str = "line"


@dataclass
class PageInput:
    """What one page shows; only ``title`` and ``report`` are needed, the rest says what else is known."""

    title: str
    report: ReportDocument
    log_lines: list[LogLine] = field(default_factory=list)
    #: Why the log part is what it is (e.g. "the last 40 of 1,038 stored lines").
    log_note: str = ""
    epochs: list[tm.EpochPeak] = field(default_factory=list)
    samples: list[MemorySample] = field(default_factory=list)
    restarts: list[datetime] = field(default_factory=list)
    projection: tm.Projection | None = None
    #: A kernel record as pasted (``podmortem diagnose --html``), shown collapsed.
    kernel_text: str | None = None
    #: Said under the timeline when there is none (e.g. "a pasted kernel record has no timeline").
    no_timeline_reason: str = ""
    #: When the page was made (shown; a page is a snapshot).
    generated_at: datetime | None = None
    #: Where the JSON form of the same report is, if served.
    json_url: str | None = None


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def safe_url(url: object) -> str | None:
    """A link target only when it is a path on this server or an http(s) URL; escaped for an attribute."""
    if not isinstance(url, str) or not url:
        return None
    if (url.startswith("/") and not url.startswith("//")) or url.startswith(("http://", "https://")):
        return esc(url)
    return None


def _utc(at: datetime | None, zone: ZoneInfo | None = None) -> str:
    """The time in UTC, and in the pod's local zone (its ``TZ``) when it has one."""
    if at is None:
        return "unknown"
    try:
        text = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except OverflowError:  # a stamp at the edge of year 1 or 9999 whose offset takes it past the edge
        return at.isoformat(sep=" ")
    if zone is not None:
        with contextlib.suppress(OverflowError):  # the local time alone falls past year 9999
            text += at.astimezone(zone).strftime(f" (%Y-%m-%d %H:%M:%S {zone.key})")
    return text


def pod_zone(report: ReportDocument) -> ZoneInfo | None:
    """The pod's time zone (``pod.timeZone``, from the container's ``TZ``), if known to this system.

    The pod sets its ``TZ``: anything but a zone this system knows (a tzdata directory such as
    ``Europe``, a path, a huge or binary string, a file that is no zone) is None, and the page
    shows UTC only. ``ZoneInfo`` raises OSError for a directory or an overlong name.
    """
    name = report.pod.time_zone
    if name is None or name == "UTC" or not _ZONE_NAME.fullmatch(name):
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def _word(value: object) -> str:
    """A field shown as text: a string or a whole number; anything else (absent) is empty."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return ""
    return str(value).strip()


def details(report: ReportDocument, zone: ZoneInfo | None = None) -> list[str]:
    """The header's facts about who died and when, each only when the report knows it.

    A kernel record alone (``podmortem diagnose --html``) has no pod object, but its kill line
    may name the pod's uid, the container's id, the host and the time as the kernel log printed
    it: those stand in. Unknown fields are left out, not shown as empty or "unknown".
    """
    pod = report.pod
    kill = report.report.kill
    out: list[str] = []
    namespace, name = _word(pod.namespace), _word(pod.name)
    uid = _word(pod.uid) or _word(kill.pod_uid if kill else None)
    if name:
        out.append(f"pod {namespace}/{name}" if namespace else f"pod {name}")
    elif uid:
        out.append(f"pod uid {uid}")
    container = _word(pod.container)
    container_id = _word(pod.container_id) or _word(kill.container_id if kill else None)
    if container:
        out.append(f"container {container}")
    elif container_id:  # as docker and the text output show it: the id's first 12 characters
        out.append(f"container {container_id.split('://', 1)[-1][:12]}")
    if not name and kill is not None and _word(kill.qos):
        out.append(f"QoS {_word(kill.qos)}")
    if _word(pod.node):
        out.append(f"node {_word(pod.node)}")
    elif kill is not None and _word(kill.host):
        out.append(f"host {_word(kill.host)}")
    ended = " ".join(w for w in (_word(pod.exit_code), _word(pod.ended_by())) if w)
    if ended:
        out.append(f"exit {ended}")
    if pod.finished_at is not None:
        out.append(f"ended {_utc(pod.finished_at, zone)}")
    elif kill is not None and _word(kill.time_text):
        out.append(f"killed {_word(kill.time_text)} (as the kernel log printed it)")
    elif kill is not None and kill.monotonic_s is not None:
        out.append(f"killed {kill.monotonic_s:.3f} s after boot")
    if report.reported_at is not None:
        out.append(f"reported {_utc(report.reported_at, zone)}")
    return out


def after_kill(value: object) -> datetime | None:
    """The first moment after a kill stamped ``value``, at the stamp's own resolution.

    The kubelet's ``finishedAt`` has whole seconds, a log line nanoseconds: a kill stamped
    ``12:00:03`` happened during that second, so a line at ``12:00:03.500`` is not after it, one
    at ``12:00:04`` is. A stamp with a fraction resolves to its last digit (a microsecond at most).
    """
    at = parse_time(value)
    if at is None:
        return None
    if isinstance(value, str):
        fraction = _FRACTION.search(value)
        digits = min(len(fraction.group(1)), 6) if fraction is not None else 0
    else:  # a datetime: whole seconds unless it has a fraction
        digits = 6 if at.microsecond else 0
    try:
        return at + timedelta(microseconds=10 ** (6 - digits))
    except OverflowError:  # a kill in the last moment of year 9999: every stored line is before it
        return None


#: The fraction of a second in an RFC 3339 time (``12:00:03.250Z``).
_FRACTION = re.compile(r"T\d\d:\d\d:\d\d[.,](\d+)")


def pending_parts(report: ReportDocument) -> list[str]:
    """The evidence still coming: the kernel record, the Prometheus series."""
    out = []
    if report.kernel_record_state == KernelRecordState.PENDING:
        out.append("the kernel's OOM record")
    if report.evidence.working_set.pending:
        out.append("the Prometheus working-set series")
    return out


def verdict_sentence(report: ReportDocument) -> str:
    """One sentence: who died, the verdict, and the cause finding's message; led by the record's
    source (``[RECORDED, not from this run: ...]``) when the kernel record is not the node's."""
    return report.report.labelled(_verdict_words(report))


def _verdict_words(report: ReportDocument) -> str:
    pod = report.pod
    who = "/".join(p for p in (pod.name, pod.container) if p) or "the pod"
    verdict = report.report.verdict
    cause = report.cause()
    if cause is not None:
        return f"{who}: {verdict}. {cause.message}"
    exit_code, reason = pod.exit_code, pod.ended_by()
    if verdict:
        return f"{who}: {verdict} (exit {exit_code}, reason {reason})."
    return f"{who} ended with exit {exit_code}, reason {reason}; no verdict was reached."


def _process_label(p: ProcessMemory) -> str:
    """``python3 (6054)``; a stored timeline's group (pid 0: ``trainer``, ``workers``) by its name alone."""
    return p.name if p.pid <= 0 else f"{p.name} ({p.pid})"


def timeline_of(data: PageInput) -> tuple[tm.Timeline, list[str]]:
    """The timeline from what the report and the caller hold, and notes on what it lacks."""
    report = data.report
    notes: list[str] = []
    tl = tm.Timeline(epochs=list(data.epochs), restarts=list(data.restarts), projection=data.projection)
    if data.samples:
        tl.usage = [(s.at, s.usage_bytes) for s in data.samples if s.usage_bytes is not None]
        tl.usage_source = "node agent samples"
        tl.processes = [
            tm.ProcessPoint(
                at=s.at, pss={_process_label(p): p.pss_bytes for p in s.processes if p.pss_bytes}
            )
            for s in data.samples
        ]
        if not any(p.pss for p in tl.processes):
            tl.processes = []
            notes.append("the samples hold no per-process PSS (no /proc of the pod was readable)")
        elif any(p.pid <= 0 for s in data.samples for p in s.processes):
            notes.append(
                "PSS as filed with the report: trainer is the lowest pid, workers the sum of the others"
            )
        limits = [s.limit_bytes for s in data.samples if s.limit_bytes]
        tl.limit_bytes = limits[-1] if limits else None
    else:
        ws = report.evidence.working_set
        tl.usage = list(ws.points)
        tl.usage_source = ws.source or ""
        if ws.dropped:
            notes.append(ws.dropped)
        if ws.note:
            notes.append(f"working set: {ws.note}")
        if not tl.usage:
            notes.append("the stored report holds no memory series (no samples, no Prometheus points)")
        notes.append(
            "per-process PSS over time is not kept in a stored report (the agent's samples are not "
            "stored with it), so no process bands are drawn"
        )
    cgroup = report.report.cgroup
    if tl.limit_bytes is None and cgroup is not None and cgroup.limit_bytes is not None:
        tl.limit_bytes = cgroup.limit_bytes
    peak = report.evidence.peak
    if peak is not None and peak.peak_bytes is not None:
        of = f" of the {human_bytes(peak.limit_bytes)} limit" if peak.limit_bytes else ""
        notes.insert(0, f"the pod's peak: {human_bytes(peak.peak_bytes)}{of}, from {peak.source}")
    at_kill = kill_point(report)
    if at_kill is not None and tl.usage and tl.usage[-1][0] <= at_kill[0]:
        # Samples miss the last rise (one every poll interval); the kernel's own usage at the kill
        # ends the curve, so it reaches the figure the report names as the peak.
        tl.usage.append(at_kill)
        notes.append(
            f"the curve's last point is the kernel's usage at the kill ({human_bytes(at_kill[1])}, "
            "from its OOM record"
            + (f"; {report.report.record_source}" if report.report.record_source else "")
            + ")"
        )
    if not tl.epochs:
        notes.append("no per-epoch memory lines were found in the log read for this page")
    if not data.restarts:
        notes.append("restarts before this one are not recorded in the report")
    if data.projection is None:
        notes.append("no early-warning projection is drawn on this page")
    tl.kill_at = report.pod.finished_at
    tl.last_line_at = report.evidence.log.last_line_at
    return tl, notes


def kill_point(report: ReportDocument) -> tuple[datetime, int] | None:
    """(the kill's time, the cgroup's usage the kernel printed then), when the report has both."""
    cgroup = report.report.cgroup
    at = report.pod.finished_at
    if cgroup is None or cgroup.usage_bytes is None or at is None:
        return None
    return at, cgroup.usage_bytes


def _legend(tl: tm.Timeline) -> str:
    items = "".join(
        f'<span><i style="background:{colour}"></i>{esc(words)}</span>'
        for colour, words in timeline_svg.legend_of(tl)
    )
    return f'<div class="legend">{items}</div>'


def _findings(report: ReportDocument) -> str:
    out = []
    for f in report.report.findings:
        sev = str(f.severity)
        parts = [
            f'<div class="finding" data-code="{esc(f.code)}">'
            f'<span class="sev {sev}">{esc(sev)}</span> '
            f"<code>{esc(f.code)}</code><p>{esc(f.message)}</p>"
        ]
        if f.evidence:
            rows = "".join(
                f"<tr><th>{esc(k)}</th><td>{esc(_value(k, v))}</td></tr>" for k, v in f.evidence.items()
            )
            parts.append(
                '<details><summary>evidence</summary>'
                f'<div class="scroll"><table>{rows}</table></div></details>'
            )
        if f.action:
            parts.append(f'<p class="action"><b>What to do:</b> {esc(f.action)}</p>')
        parts.append("</div>")
        out.append("".join(parts))
    return "".join(out) or '<p class="note">no findings</p>'


def _value(key: str, value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and key.endswith("bytes"):
        return f"{human_bytes(value)} ({value:,} bytes)"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _kernel(report: ReportDocument, kernel_text: str | None) -> str:
    record = report.evidence.kernel_record
    state = record.state or "unknown"
    kill = report.report.kill
    rows = ""
    if kill is not None:
        rows = "".join(
            f"<tr><th>{esc(k)}</th><td>{esc(_value(k, v))}</td></tr>"
            for k, v in kill.model_dump(mode="json").items()
            if v not in (None, [], "", False)
        )
    body = (
        f'<div class="scroll"><table>{rows}</table></div>' if rows else '<p class="note">no kill summary</p>'
    )
    if record.note:
        body = f'<p class="note">{esc(record.note)}</p>' + body
    if kernel_text:
        body += f"<h3>as pasted</h3><pre>{esc(kernel_text)}</pre>"
    if report.report.partial:
        missing = ", ".join(report.report.missing)
        body += f'<p class="note">the record was cut short; missing: {esc(missing)}</p>'
    return (
        f'<details class="kernel"><summary>kernel OOM record: <b>{esc(state)}</b></summary>{body}</details>'
    )


def _cgroup_bar(report: ReportDocument) -> str:
    cgroup = report.report.cgroup
    if cgroup is None:
        return '<p class="note">no cgroup numbers at the kill in this report</p>'
    bd = cgroup.breakdown
    cats = [("anon", bd.anon_bytes), ("shmem", bd.shmem_bytes), ("kernel", bd.kernel_bytes),
            ("file", bd.file_bytes)] if bd is not None else []
    known = [(n, v) for n, v in cats if v is not None and v > 0]
    limit = cgroup.limit_bytes
    whole = max(limit or 0, sum(v for _, v in known)) or 1
    blocks = "".join(
        f'<div class="part-{n}" style="width:{v / whole * 100:.2f}%;background:{_BAR_COLOURS[n]}" '
        f'title="{n} {human_bytes(v)}"></div>'
        for n, v in known
    )
    words = ", ".join(f"{n} {human_bytes(v)}" for n, v in known) or "no breakdown"
    head = f"cgroup <code>{esc(cgroup.path or '?')}</code>"
    if limit:
        head += f", limit {human_bytes(limit)}"
    if cgroup.usage_bytes is not None:
        head += f", usage {human_bytes(cgroup.usage_bytes)}"
    legend = "".join(f'<span><i style="background:{_BAR_COLOURS[n]}"></i>{n}</span>' for n, _ in known)
    scale = "of the limit" if limit else "of the total (no limit printed)"
    source = bd.source if bd is not None else ""
    return (
        f'<p>{head}</p><div class="bar" role="img" aria-label="{esc(words)}">{blocks}</div>'
        f'<div class="legend">{legend}</div><p class="meta">{esc(words)}; widths are shares {scale}'
        f"{'; ' + esc(source) if source else ''}</p>"
    )


def _tasks(report: ReportDocument) -> str:
    tasks = report.report.tasks
    if not tasks:
        return '<p class="note">no process table in this report</p>'
    page = report.report.page_size_bytes

    def pages(value: int | None) -> str:
        return human_bytes(value * page) if value is not None else "?"

    kill = report.report.kill

    def split(t: TaskSummary, pages_value: int | None, kill_kb: int | None) -> str:
        """A task table row's anon/file/shmem; most kernels' task tables print only rss, but the killed
        process's own kill line has the split (as the text output says)."""
        own = kill is not None and kill.pid == t.pid
        if pages_value is None and t.killed and own and kill_kb is not None:
            return human_bytes(kill_kb * 1024)
        return pages(pages_value)

    rows = []
    for t in sorted(tasks, key=lambda t: -(t.rss_pages or 0)):
        cls = ' class="killed"' if t.killed else ""
        rows.append(
            f"<tr{cls}><td class=n>{esc(t.pid)}</td><td>{esc(t.name)}</td>"
            f"<td class=n>{pages(t.rss_pages)}</td>"
            f"<td class=n>{split(t, t.rss_anon_pages, kill.anon_rss_kb if kill else None)}</td>"
            f"<td class=n>{split(t, t.rss_file_pages, kill.file_rss_kb if kill else None)}</td>"
            f"<td class=n>{split(t, t.rss_shmem_pages, kill.shmem_rss_kb if kill else None)}</td>"
            f"<td class=n>{pages(t.swapents_pages)}</td><td class=n>{esc(t.oom_score_adj)}</td>"
            f"<td>{esc(t.sharing)}{' · killed' if t.killed else ''}</td></tr>"
        )
    head = (
        "<tr><th>pid</th><th>name</th><th>rss</th><th>anon</th><th>file</th><th>shmem</th><th>swap</th>"
        "<th>oom_score_adj</th><th>pages</th></tr>"
    )
    return f'<div class="scroll"><table class="tasks">{head}{"".join(rows)}</table></div>'


def _last_line_words(last: datetime, kill_at: datetime, kill_end: datetime | None) -> str:
    """How long before the kill the last log line came, at the kill time's resolution."""
    if kill_end is not None and last >= kill_end:
        return f"the last log line came {(last - kill_at).total_seconds():.0f} s after the kill's time"
    if last >= kill_at:  # within the kill's stamp: a whole-second one says only "during that second"
        whole = kill_end is not None and kill_end - kill_at >= timedelta(seconds=1)
        return "the last log line came " + ("in the second of the kill" if whole else "at the kill")
    return f"the last log line came {(kill_at - last).total_seconds():.0f} s before the kill"


def _log(data: PageInput, kill_at: datetime | None, kill_end: datetime | None = None) -> str:
    """The last lines, the kill's row after every line up to the kill (``kill_end``: `after_kill`)."""
    kill_end = kill_end or kill_at
    log = data.report.evidence.log
    url = safe_url(log.url)
    parts = []
    if data.log_note:
        parts.append(f'<p class="meta">{esc(data.log_note)}</p>')
    if data.log_lines:
        rows = []
        kill_shown = False
        kill_at_text = esc(_utc(kill_at, pod_zone(data.report)))
        kill_row = f'<tr class="kill"><td>{kill_at_text}</td><td>── kill ──</td></tr>'
        for line in data.log_lines:
            if kill_end is not None and not kill_shown and line.at is not None and line.at >= kill_end:
                rows.append(kill_row)
                kill_shown = True
            cls = ' class="gap"' if line.kind != "line" else ""
            at = line.at.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3] if line.at is not None else ""
            rows.append(f"<tr{cls}><td>{esc(at)}</td><td>{esc(line.text)}</td></tr>")
        if kill_at is not None and not kill_shown:
            rows.append(kill_row)
        parts.append(f'<div class="scroll"><table class="log">{"".join(rows)}</table></div>')
    else:
        parts.append('<p class="note">no log lines on this page</p>')
    if log.gaps:
        parts.append(
            "<p>gaps in the stored log: "
            + "; ".join(
                f"{esc(g.reason)} between {esc(_utc(g.after))} and {esc(_utc(g.before))}" for g in log.gaps
            )
            + "</p>"
        )
    if log.note:
        parts.append(f'<p class="note">{esc(log.note)}</p>')
    if url:
        count = f" ({log.lines} lines stored)" if log.lines is not None else ""
        parts.append(f'<p><a class="full-log" href="{url}">the full log</a>{count}</p>')
    return "".join(parts)


def _job(report: ReportDocument) -> str:
    job = report.job
    if job is None:
        return ""
    rows = []
    for r in job.rows:
        link = safe_url(r.log_url)
        pod = f'<a href="{link}">{esc(r.pod)}</a>' if link else esc(r.pod)
        ended = _utc(r.finished_at) if r.finished_at is not None else ""
        rows.append(
            f'<tr class="role-{esc(r.role)}"><td class=n>{esc(r.rank)}</td><td>{pod}</td>'
            f"<td>{esc(r.role)}</td><td class=n>{esc(r.exit_code)}</td>"
            f"<td>{esc(r.reason)}</td>"
            f"<td>{esc(ended)}</td><td><code>{esc(r.line)}</code></td></tr>"
        )
    root = job.root_cause
    head = f"<p>{esc(job.pods)} pods; "
    if root is not None:
        head += (
            f"root cause: <b>{esc(root.pod)}</b> (rank {esc(root.rank)}, "
            f"{esc(root.verdict)}): <code>{esc(root.line)}</code>"
        )
    head += "</p>"
    if job.note:
        head += f'<p class="note">{esc(job.note)}</p>'
    table = (
        '<div class="scroll"><table class="job"><tr><th>rank</th><th>pod</th><th>role</th><th>exit</th>'
        f"<th>reason</th><th>ended</th><th>line</th></tr>{''.join(rows)}</table></div>"
    )
    return f'<h2 id="job">Pods of the job</h2>{head}{table}'


def render(data: PageInput, *, max_bytes: int = PAGE_MAX_BYTES) -> str:
    """The whole HTML document, at most ``max_bytes`` of UTF-8 (see `PAGE_MAX_BYTES`)."""
    report = data.report
    pending = pending_parts(report)
    pod = report.pod
    zone = pod_zone(report)
    title = esc(shorten(data.title, TITLE_MAX_CHARS))
    head = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{title}: failure report</title>",
    ]
    if pending:
        head.append(f'<meta http-equiv="refresh" content="{REFRESH_S}">')
    head.append(f"<style>{_CSS}</style></head><body>")
    # (what the part is, if it may be left out to keep the page under max_bytes; its HTML)
    body: list[tuple[str | None, str]] = [(None, f"<h1>{title}</h1>")]
    meta = [esc(part) for part in details(report, zone)]
    if data.generated_at is not None:
        meta.append(f"page made {esc(_utc(data.generated_at))}")
    body.append(("the pod's details", f'<p class="meta">{" · ".join(meta)}</p>'))
    body.append(("the verdict", f'<p class="verdict" id="verdict">{esc(verdict_sentence(report))}</p>'))
    if pending:
        body.append((None, (
            f'<p class="pending" id="pending">Evidence pending: {esc(", ".join(pending))}. '
            f"This page reloads every {REFRESH_S} s until it is in.</p>"
        )))
    errors = [e for e in report.evidence.errors if e]
    if errors:
        body.append(("the failed evidence", (
            '<p class="note">evidence that failed: ' + "; ".join(esc(e) for e in errors) + "</p>"
        )))
    body.append((None, '<h2 id="findings">Findings</h2>'))
    body.append(("the findings", _findings(report)))
    body.append(("the pods of the job", _job(report)))
    body.append((None, '<h2 id="timeline">Memory timeline</h2>'))
    kill_end = after_kill(pod.finished_at)
    if data.no_timeline_reason:
        body.append((None, f'<p class="note" id="no-timeline">{esc(data.no_timeline_reason)}</p>'))
        kill_at = pod.finished_at
    else:
        tl, notes = timeline_of(data)
        kill_at = tl.kill_at
        drawn = []
        if not tl.has_bytes():  # an axis from 0 B to 1 B with a kill line on it says nothing
            drawn.append(
                '<p class="note" id="no-timeline">no memory samples exist for this report (no series, '
                "no per-epoch peaks), so no timeline is drawn</p>"
            )
        else:
            drawn.append(timeline_svg.svg(tl, title=f"memory of {pod.name or data.title}"))
            drawn.append(_legend(tl))
        if tl.kill_at is not None and tl.last_line_at is not None:
            words = _last_line_words(tl.last_line_at, tl.kill_at, kill_end)
            drawn.append(f'<p id="last-line-gap">{esc(words)}</p>')
        drawn.append('<ul class="meta">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
        body.append(("the memory timeline", "".join(drawn)))
    body.append((None, '<h2 id="cgroup">Memory at the kill</h2>'))
    body.append(("the memory at the kill", _cgroup_bar(report)))
    body.append((None, '<h2 id="processes">Processes at the kill</h2>'))
    body.append(("the process table", _tasks(report)))
    body.append((None, '<h2 id="kernel">Kernel record</h2>'))
    body.append(("the kernel record", _kernel(report, data.kernel_text)))
    body.append((None, '<h2 id="log">Log around the kill</h2>'))
    body.append(("the log", _log(data, kill_at, kill_end)))
    dropped = report.report.dropped
    if dropped:
        body.append(("what was trimmed", (
            '<p class="note">trimmed to fit: ' + "; ".join(esc(d) for d in dropped) + "</p>"
        )))
    foot = ("times in UTC" + (f" and the pod's local time ({esc(zone.key)}, from its TZ)" if zone else "")
            + " · made by podmortem")
    if data.json_url:
        link = safe_url(data.json_url)
        if link:
            foot += f' · <a href="{link}">this report as JSON</a>'
    body.append((None, f'<p class="meta">{foot}</p></body></html>'))
    top = "".join(head)
    return top + _fit(body, budget=max_bytes - _size(top), limit=max_bytes)


def _size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (a lone surrogate, possible in JSON read by Python, counted as 3)."""
    return len(text.encode("utf-8", "surrogatepass"))


def _fit(parts: list[tuple[str | None, str]], *, budget: int, limit: int) -> str:
    """The parts joined; while over ``budget``, the biggest part that may go is replaced by a note."""
    sizes = [_size(text) for _, text in parts]
    total = sum(sizes)
    out = [text for _, text in parts]
    for i in sorted(range(len(parts)), key=lambda i: -sizes[i]):
        what = parts[i][0]
        if total <= budget:
            break
        if what is None:
            continue
        note = (
            f'<p class="note" data-left-out="{sizes[i]}">{what} left out: it takes {sizes[i]:,} bytes, and '
            f"this page is kept under {limit:,} bytes; the report's JSON holds it whole</p>"
        )
        total += len(note) - sizes[i]
        out[i] = note
    return "".join(out)


def epochs_from(lines: Iterable[tuple[datetime, int, int]]) -> list[tm.EpochPeak]:
    """Per-epoch peaks from (printed at, epoch, peak bytes) triples, the last per epoch kept."""
    by_epoch: dict[int, tm.EpochPeak] = {}
    for at, epoch, peak in lines:
        by_epoch[epoch] = tm.EpochPeak(at=at, epoch=epoch, peak_bytes=peak)
    return sorted(by_epoch.values(), key=lambda e: e.at)


def log_lines(records: Sequence[tuple[datetime | None, str, str]]) -> list[LogLine]:
    """(time, text, kind) triples as page lines."""
    return [LogLine(at=at, text=text, kind=kind) for at, text, kind in records]
