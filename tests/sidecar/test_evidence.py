"""The evidence document: any content fits a termination message and reads back; any text is read safely."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podmortem.sidecar import evidence as ev

HEAD = '{"v": 1, "podmortem": "0.1.0", "reason": "sigterm", "at": "2026-03-01T12:00:00Z"'
AT = datetime(2026, 3, 1, 12, 0, 5, 250000, tzinfo=UTC)


def _doc(**update: object) -> ev.SidecarEvidence:
    victim = ev.Process(pid=12, comm="python", pss=3 << 30, role="trainer")
    base = ev.SidecarEvidence(
        podmortem="0.1.0",
        reason="trainer-gone",
        at=AT,
        cgroup=ev.Cgroup(version=2, path="/../cri-containerd-abc.scope"),
        mem=ev.Memory(
            usage=30 << 30,
            limit=32 << 30,
            peak=32 << 30,
            limit_hits=4,
            anon=29 << 30,
            file=1 << 20,
            shmem=0,
            kernel=1 << 24,
            age_s=1.5,
        ),
        oom=ev.OomCounter(before=0, after=1),
        kill=ev.Kill(victim=victim, gone=[12, 40, 41], at=AT),
        top=[victim, ev.Process(pid=40, comm="pt_data_worker", pss=1 << 30, role="worker")],
        procs=4,
        samples=300,
        interval_s=2.0,
        trend=[28 << 30, 29 << 30, 30 << 30],
        notes=["2 processes' smaps_rollup unreadable"],
    )
    return base.model_copy(update=update)


def test_a_document_reads_back_as_written() -> None:
    doc = _doc()
    text = ev.render(doc)
    assert len(text.encode()) <= ev.MAX_MESSAGE_BYTES
    assert ev.parse(text) == doc
    assert ev.parse(text.encode()) == doc
    data = json.loads(text)
    assert data["v"] == 1
    assert data["kill"]["victim"] == {"pid": 12, "comm": "python", "pss": 3 << 30, "role": "trainer"}
    assert data["oom"] == {"before": 0, "after": 1}
    assert "sock" not in data["mem"]  # unknown numbers are left out, not written as null


def test_a_document_too_large_loses_notes_then_trend_then_small_processes_first() -> None:
    many = [ev.Process(pid=100 + i, comm="w" * 64, pss=i, role="worker") for i in range(16)]
    doc = _doc(top=many, trend=[i << 20 for i in range(32)], notes=["n" * 200] * 8, procs=16)
    fitted = ev.fit(doc)
    assert fitted.notes == []
    assert len(ev.render(doc).encode()) <= ev.MAX_MESSAGE_BYTES
    assert fitted.top == many[: len(fitted.top)]  # the largest kept, in order
    assert fitted.mem == doc.mem and fitted.kill == doc.kill and fitted.oom == doc.oom
    # trend goes before processes: with processes left, the trend is what was cut (from its oldest end)
    if fitted.top:
        assert fitted.trend == doc.trend[len(doc.trend) - len(fitted.trend) :]


def test_clean_text_makes_names_printable_and_short() -> None:
    assert ev.clean_text("py\x00thon\x1b[31m", 64) == "py?thon?[31m"
    assert ev.clean_text("\udcff", 4) == "?"
    assert ev.clean_text("x" * 10, 4) == "xxx…"
    assert ev.clean_text(ev.clean_text("x" * 10, 4), 4) == "xxx…"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("{", "document"),
        ("[]", "document"),
        ('{"v": 2, "podmortem": "9", "reason": "sigterm", "at": "2026-03-01T12:00:00Z"}', "v"),
        ('{"v": 1, "podmortem": "0.1.0", "reason": "sigterm"}', "at"),
        ('{"v": 1, "podmortem": "0.1.0", "reason": "bored", "at": "2026-03-01T12:00:00Z"}', "reason"),
        ('{"v": 1, "podmortem": "0.1.0", "reason": "sigterm", "at": "2026-03-01T12:00:00"}', "at"),
        (
            HEAD + ', "samples": -1}',
            "samples",
        ),
        (
            HEAD + ', "samples": "3"}',
            "samples",
        ),
        (
            HEAD + ', "samples": true}',
            "samples",
        ),
        (
            HEAD + ', "interval_s": NaN}',
            "interval_s",
        ),
        (
            HEAD + ', "interval_s": 1e999}',
            "interval_s",
        ),
        (
            HEAD + ', "samples": ' + "9" * 30 + "}",
            "samples",
        ),
        (
            HEAD + ', "top": [' + ",".join(['{"pid": 1, "comm": "x", "role": "worker"}'] * 17) + "]}",
            "top",
        ),
        (
            HEAD + ", "
            '"kill": {"victim": {"pid": 0, "comm": "x", "role": "trainer"}, "at": "2026-03-01T12:00:00Z"}}',
            "kill",
        ),
        ("[" * 2000 + "]" * 2000, "document"),
        ('"' + "x" * 5000 + '"', "bytes"),
    ],
)
def test_parse_refuses_what_is_not_a_document(text: str, why: str) -> None:
    with pytest.raises(ev.EvidenceInvalid) as caught:
        ev.parse(text)
    message = str(caught.value)
    assert why in message
    assert len(message) <= ev.MAX_TEXT and "\n" not in message


def test_parse_refuses_invalid_utf8_and_other_types() -> None:
    with pytest.raises(ev.EvidenceInvalid):
        ev.parse(b'{"v": 1, "podmortem": "\xff"}')
    with pytest.raises(ev.EvidenceInvalid):
        ev.parse(12)  # type: ignore[arg-type]


def test_unknown_keys_from_a_newer_writer_are_ignored_and_strings_cleaned() -> None:
    text = (
        '{"v": 1, "podmortem": "0.2\\u0007", "reason": "sigterm", "at": "2026-03-01T12:00:00Z", '
        '"future": {"x": [1, 2]}}'
    )
    doc = ev.parse(text)
    assert doc.podmortem == "0.2?"
    assert doc.kill is None and doc.top == [] and doc.oom == ev.OomCounter()


# -- properties -------------------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8"), max_size=ev.MAX_COMM).map(
    lambda s: ev.clean_text(s, ev.MAX_COMM)
)
_bytes = st.integers(0, ev.MAX_INT)
_maybe_bytes = st.none() | _bytes
_seconds = st.floats(0, ev.MAX_SECONDS, allow_nan=False, allow_infinity=False)
_when = st.datetimes(min_value=datetime(ev.MIN_YEAR, 1, 1), max_value=datetime(ev.MAX_YEAR, 12, 31),
                     timezones=st.just(UTC))
_process = st.builds(
    ev.Process,
    pid=st.integers(1, ev.MAX_PID - 1),
    comm=_text,
    pss=_maybe_bytes,
    role=st.sampled_from(["trainer", "worker"]),
)
_documents = st.builds(
    ev.SidecarEvidence,
    podmortem=st.text(max_size=32).map(lambda s: ev.clean_text(s, 32)),
    reason=st.sampled_from(["trainer-gone", "sigterm"]),
    at=_when,
    cgroup=st.none()
    | st.builds(
        ev.Cgroup,
        version=st.sampled_from([1, 2]),
        path=st.text(max_size=ev.MAX_PATH).map(lambda s: ev.clean_text(s, ev.MAX_PATH)),
    ),
    mem=st.none()
    | st.builds(
        ev.Memory,
        usage=_maybe_bytes,
        limit=_maybe_bytes,
        peak=_maybe_bytes,
        limit_hits=_maybe_bytes,
        anon=_maybe_bytes,
        file=_maybe_bytes,
        shmem=_maybe_bytes,
        kernel=_maybe_bytes,
        sock=_maybe_bytes,
        swap=_maybe_bytes,
        age_s=_seconds,
    ),
    oom=st.builds(ev.OomCounter, before=_maybe_bytes, after=_maybe_bytes),
    kill=st.none()
    | st.builds(
        ev.Kill, victim=_process, gone=st.lists(st.integers(1, ev.MAX_PID - 1), max_size=ev.MAX_GONE),
        at=_when,
    ),
    later_kills=_bytes,
    top=st.lists(_process, max_size=ev.MAX_PROCESSES),
    procs=_bytes,
    samples=_bytes,
    interval_s=_seconds,
    trend=st.lists(_bytes, max_size=ev.MAX_TREND),
    notes=st.lists(
        st.text(max_size=ev.MAX_TEXT).map(lambda s: ev.clean_text(s, ev.MAX_TEXT)), max_size=ev.MAX_NOTES
    ),
)


@given(_documents)
def test_any_document_fits_4096_bytes_and_reads_back(doc: ev.SidecarEvidence) -> None:
    text = ev.render(doc)
    assert len(text.encode("utf-8")) <= ev.MAX_MESSAGE_BYTES
    back = ev.parse(text)
    assert back == ev.fit(doc)
    # what a report rests on is never dropped
    assert (back.v, back.reason, back.at, back.mem, back.oom, back.samples, back.interval_s) == (
        doc.v,
        doc.reason,
        doc.at,
        doc.mem,
        doc.oom,
        doc.samples,
        doc.interval_s,
    )
    if doc.kill is not None:
        assert back.kill is not None
        assert (back.kill.victim.pid, back.kill.victim.pss, back.kill.victim.role, back.kill.at) == (
            doc.kill.victim.pid,
            doc.kill.victim.pss,
            doc.kill.victim.role,
            doc.kill.at,
        )
    assert (back.cgroup is None) == (doc.cgroup is None)


@given(st.binary(max_size=ev.MAX_MESSAGE_BYTES + 64))
def test_any_bytes_give_a_document_or_the_one_error(data: bytes) -> None:
    try:
        doc = ev.parse(data)
    except ev.EvidenceInvalid as exc:
        assert len(str(exc)) <= ev.MAX_TEXT
        return
    assert len(ev.render(doc).encode()) <= ev.MAX_MESSAGE_BYTES


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@given(
    st.fixed_dictionaries(
        {
            "v": st.just(1) | _json,
            "podmortem": st.text(max_size=40) | _json,
            "reason": st.sampled_from(["sigterm", "trainer-gone"]) | _json,
            "at": st.just("2026-03-01T12:00:00Z") | _json,
        },
        optional={
            "mem": st.dictionaries(st.sampled_from(["usage", "limit", "peak", "age_s"]), _json),
            "top": _json,
            "kill": _json,
            "trend": st.lists(st.integers(), max_size=40) | _json,
            "oom": st.dictionaries(st.sampled_from(["before", "after"]), _json),
            "samples": _json,
        },
    )
)
def test_near_documents_give_a_document_or_the_one_error(data: dict[str, object]) -> None:
    text = json.dumps(data, allow_nan=True)
    try:
        doc = ev.parse(text)
    except ev.EvidenceInvalid:
        return
    for number in [
        doc.samples,
        *doc.trend,
        *(doc.mem.model_dump(exclude_none=True).values() if doc.mem else []),
    ]:
        assert 0 <= number <= ev.MAX_SECONDS or (isinstance(number, int) and 0 <= number <= ev.MAX_INT)


_wide = st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF, codec="utf-8")


@given(_documents, st.text(_wide, min_size=8, max_size=ev.MAX_COMM))
def test_documents_far_over_the_limit_still_fit_and_keep_the_victim(
    doc: ev.SidecarEvidence, name: str
) -> None:
    wide = (name * ev.MAX_COMM)[: ev.MAX_COMM]
    names = [wide[i:] + wide[:i] for i in range(ev.MAX_PROCESSES)]  # 4-byte characters, 64 of each
    top = [
        ev.Process(pid=i + 1, comm=name, pss=ev.MAX_INT - i, role="worker") for i, name in enumerate(names)
    ]
    big = doc.model_copy(
        update={
            "top": top,
            "kill": ev.Kill(
                victim=top[0], gone=list(range(ev.MAX_PID - ev.MAX_GONE, ev.MAX_PID)), at=AT
            ),
            "cgroup": ev.Cgroup(version=2, path="".join(names)[: ev.MAX_PATH]),
            "podmortem": names[0][:32],
            "trend": [ev.MAX_INT] * ev.MAX_TREND,
            "notes": [names[1] * 3] * ev.MAX_NOTES,
        }
    )
    text = ev.render(big)
    assert len(text.encode()) <= ev.MAX_MESSAGE_BYTES
    back = ev.parse(text)
    assert back.kill is not None and back.kill.victim.pid == 1 and back.kill.victim.pss == ev.MAX_INT
    assert back.mem == big.mem and back.oom == big.oom
