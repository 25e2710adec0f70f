"""The sidecar's writer (plain dataclasses and json) and the operator's strict model are one schema.

Whatever document the sidecar builds, its message fits 4096 bytes and the operator's
`podmortem.reports.sidecar_evidence.parse` reads it back to the same values; the two have the same
fields, and the same JSON schema up to the reader's bounds.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter

from podmortem.reports import sidecar_document as sd
from podmortem.reports import sidecar_evidence as ev

AT = datetime(2026, 3, 1, 12, 0, 5, 250000, tzinfo=UTC)


def _doc(**update: Any) -> sd.SidecarDocument:
    victim = sd.Process(pid=12, comm="python", pss=3 << 30, role="trainer")
    base = sd.SidecarDocument(
        podmortem="0.1.0",
        reason="trainer-gone",
        at=AT,
        cgroup=sd.Cgroup(version=2, path="/../cri-containerd-abc.scope"),
        mem=sd.Memory(usage=30 << 30, limit=32 << 30, peak=32 << 30, limit_hits=4, anon=29 << 30,
                      file=1 << 20, shmem=0, kernel=1 << 24, age_s=1.5),
        oom=sd.OomCounter(before=0, after=1),
        kill=sd.Kill(victim=victim, gone=[12, 40, 41], at=AT),
        top=[victim, sd.Process(pid=40, comm="pt_data_worker", pss=1 << 30, role="worker")],
        procs=4,
        samples=300,
        interval_s=2.0,
        trend=[28 << 30, 29 << 30, 30 << 30],
        notes=["2 processes' smaps_rollup unreadable"],
    )
    return dataclasses.replace(base, **update)


def _read_back(doc: sd.SidecarDocument) -> dict[str, Any]:
    """What the operator reads of the sidecar's message for ``doc``, as values."""
    text = sd.render(doc)
    assert len(text.encode("utf-8")) <= sd.MAX_MESSAGE_BYTES
    return ev.parse(text).model_dump()


def test_a_document_reads_back_as_written() -> None:
    doc = _doc()
    assert _read_back(doc) == dataclasses.asdict(doc)
    data = json.loads(sd.render(doc))
    assert data["v"] == 1 and data["at"] == "2026-03-01T12:00:05.250000Z"
    assert data["kill"]["victim"] == {"pid": 12, "comm": "python", "pss": 3 << 30, "role": "trainer"}
    assert data["oom"] == {"before": 0, "after": 1}
    assert "sock" not in data["mem"]  # unknown numbers are left out, not written as null
    assert sd.render(doc) == ev.render(ev.parse(sd.render(doc)))  # the operator's render is the writer's


def test_a_document_too_large_loses_notes_then_trend_then_small_processes_first() -> None:
    many = [sd.Process(pid=100 + i, comm="w" * 64, pss=i, role="worker") for i in range(16)]
    doc = _doc(top=many, trend=[i << 20 for i in range(32)], notes=["n" * 200] * 8, procs=16)
    fitted = sd.fit(doc)
    assert fitted.notes == []
    assert len(sd.render(doc).encode()) <= sd.MAX_MESSAGE_BYTES
    assert fitted.top == many[: len(fitted.top)]  # the largest kept, in order
    assert fitted.mem == doc.mem and fitted.kill == doc.kill and fitted.oom == doc.oom
    # trend goes before processes: with processes left, the trend is what was cut (from its oldest end)
    if fitted.top:
        assert fitted.trend == doc.trend[len(doc.trend) - len(fitted.trend) :]


def test_clean_text_makes_names_printable_and_short() -> None:
    assert sd.clean_text("py\x00thon\x1b[31m", 64) == "py?thon?[31m"
    assert sd.clean_text("\udcff", 4) == "?"
    assert sd.clean_text("x" * 10, 4) == "xxx…"
    assert sd.clean_text(sd.clean_text("x" * 10, 4), 4) == "xxx…"


def test_the_writer_bounds_what_the_reader_would_refuse() -> None:
    doc = _doc(
        podmortem="v" * 40 + "\x07",
        top=[
            sd.Process(pid=0, comm="zero", role="worker"),
            sd.Process(pid=sd.MAX_PID, comm="x", role="worker"),
            sd.Process(pid=7, comm="a\nb" * 40, pss=-5, role="worker"),
        ],
        trend=[-1, 2**70],
        procs=-3,
        interval_s=float("inf"),
        mem=sd.Memory(usage=2**64, age_s=float("nan")),
        kill=sd.Kill(
            victim=sd.Process(pid=9, comm="python", role="trainer"), gone=[9, 0, sd.MAX_PID], at=AT
        ),
    )
    back = ev.parse(sd.render(doc))
    assert back.podmortem == "v" * 31 + "…"
    assert [p.pid for p in back.top] == [7] and back.top[0].pss == 0 and "\n" not in back.top[0].comm
    assert back.trend == [0, sd.MAX_INT] and back.procs == 0 and back.interval_s == sd.MAX_SECONDS
    assert back.mem is not None and back.mem.usage == sd.MAX_INT and back.mem.age_s == 0.0
    assert back.kill is not None and back.kill.gone == [9]
    # a victim no kernel names is no kill the operator could check
    nobody = sd.Kill(victim=sd.Process(pid=0, comm="x", role="trainer"), at=AT)
    assert ev.parse(sd.render(_doc(kill=nobody))).kill is None


# -- properties -------------------------------------------------------------------------------------

_when = st.datetimes(min_value=datetime(sd.MIN_YEAR, 1, 1), max_value=datetime(sd.MAX_YEAR, 12, 31),
                     timezones=st.just(UTC))


def _documents(
    text: st.SearchStrategy[str], number: st.SearchStrategy[int], seconds: st.SearchStrategy[float],
    pid: st.SearchStrategy[int], many: int,
) -> st.SearchStrategy[sd.SidecarDocument]:
    maybe = st.none() | number
    role = st.sampled_from(["trainer", "worker"])
    process = st.builds(sd.Process, pid=pid, comm=text, pss=maybe, role=role)
    return st.builds(
        sd.SidecarDocument,
        podmortem=text.map(lambda s: s[: sd.MAX_VERSION]),
        reason=st.sampled_from(["trainer-gone", "sigterm", "failed"]),
        at=_when,
        cgroup=st.none() | st.builds(sd.Cgroup, version=st.sampled_from([1, 2]), path=text),
        mem=st.none() | st.builds(
            sd.Memory, usage=maybe, limit=maybe, peak=maybe, limit_hits=maybe, anon=maybe, file=maybe,
            shmem=maybe, kernel=maybe, sock=maybe, swap=maybe, age_s=seconds,
        ),
        oom=st.builds(sd.OomCounter, before=maybe, after=maybe),
        kill=st.none() | st.builds(sd.Kill, victim=process, gone=st.lists(pid, max_size=many), at=_when),
        later_kills=number,
        top=st.lists(process, max_size=many),
        procs=number,
        samples=number,
        interval_s=seconds,
        trend=st.lists(number, max_size=many),
        notes=st.lists(text, max_size=many // 4),
    )


#: Documents as the sidecar builds them: within every bound already.
_within = _documents(
    st.text(st.characters(codec="utf-8"), max_size=sd.MAX_COMM).map(lambda s: sd.clean_text(s, sd.MAX_COMM)),
    st.integers(0, sd.MAX_INT),
    st.floats(0, sd.MAX_SECONDS),
    st.integers(1, sd.MAX_PID - 1),
    sd.MAX_GONE // 2,
)
#: Any document at all: texts, numbers, pids and lengths the reader refuses.
_any = _documents(
    st.text(max_size=600), st.integers(-(2**70), 2**70), st.floats(), st.integers(-5, 2 * sd.MAX_PID), 48,
)


@given(_within)
def test_within_the_bounds_a_document_reads_back_to_its_values(doc: sd.SidecarDocument) -> None:
    fitted = sd.fit(doc)
    assert _read_back(doc) == dataclasses.asdict(fitted)
    assert sd.bounded(doc) == doc
    if len(sd.render(doc).encode()) < sd.MAX_MESSAGE_BYTES // 2:
        assert fitted == doc  # nothing is dropped when nothing has to be
    # what a report rests on is never dropped
    kept = ("v", "reason", "at", "mem", "oom", "samples", "interval_s")
    assert [getattr(fitted, name) for name in kept] == [getattr(doc, name) for name in kept]
    if doc.kill is not None:
        assert fitted.kill is not None
        victim = ("pid", "pss", "role")
        assert [getattr(fitted.kill.victim, name) for name in victim] == [
            getattr(doc.kill.victim, name) for name in victim]
        assert fitted.kill.at == doc.kill.at
    assert (fitted.cgroup is None) == (doc.cgroup is None)


@given(_any)
def test_any_document_gives_a_message_the_operator_reads_to_the_same_values(
    doc: sd.SidecarDocument,
) -> None:
    fitted = sd.fit(doc)
    assert _read_back(doc) == dataclasses.asdict(fitted)
    assert sd.fit(fitted) == fitted
    assert len(fitted.top) <= sd.MAX_PROCESSES and len(fitted.trend) <= sd.MAX_TREND
    assert len(fitted.notes) <= sd.MAX_NOTES
    assert fitted.kill is None or len(fitted.kill.gone) <= sd.MAX_GONE


_wide = st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF, codec="utf-8")


@given(_within, st.text(_wide, min_size=8, max_size=sd.MAX_COMM))
def test_documents_far_over_the_limit_still_fit_and_keep_the_victim(
    doc: sd.SidecarDocument, name: str
) -> None:
    wide = (name * sd.MAX_COMM)[: sd.MAX_COMM]
    names = [wide[i:] + wide[:i] for i in range(sd.MAX_PROCESSES)]  # 4-byte characters, 64 of each
    top = [sd.Process(pid=i + 1, comm=n, pss=sd.MAX_INT - i, role="worker") for i, n in enumerate(names)]
    big = dataclasses.replace(
        doc,
        top=top,
        kill=sd.Kill(victim=top[0], gone=list(range(sd.MAX_PID - sd.MAX_GONE, sd.MAX_PID)), at=AT),
        cgroup=sd.Cgroup(version=2, path="".join(names)[: sd.MAX_PATH]),
        podmortem=names[0][:32],
        trend=[sd.MAX_INT] * sd.MAX_TREND,
        notes=[names[1] * 3] * sd.MAX_NOTES,
    )
    back = ev.parse(sd.render(big))
    assert back.kill is not None and back.kill.victim.pid == 1 and back.kill.victim.pss == sd.MAX_INT
    assert back.model_dump()["mem"] == (dataclasses.asdict(big.mem) if big.mem else None)


# -- one schema -------------------------------------------------------------------------------------

_PAIRS: list[tuple[type[Any], type[BaseModel]]] = [
    (sd.SidecarDocument, ev.SidecarEvidence), (sd.Process, ev.Process), (sd.Memory, ev.Memory),
    (sd.Cgroup, ev.Cgroup), (sd.OomCounter, ev.OomCounter), (sd.Kill, ev.Kill),
]


def test_the_writer_and_the_reader_have_the_same_fields_and_defaults() -> None:
    for plain, model in _PAIRS:
        fields = {f.name: f for f in dataclasses.fields(plain)}
        assert list(fields) == list(model.model_fields), plain.__name__
        for name, info in model.model_fields.items():
            field = fields[name]
            assert info.is_required() == (
                field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
            ), f"{plain.__name__}.{name}"
            if not info.is_required():
                made = field.default_factory
                default = made() if made is not dataclasses.MISSING else field.default
                expected = _value(info.get_default(call_default_factory=True))
                assert expected == _value(default), f"{plain.__name__}.{name}"


def _value(default: Any) -> Any:
    if isinstance(default, BaseModel):
        return default.model_dump()
    return dataclasses.asdict(default) if dataclasses.is_dataclass(default) else default


def _shape(schema: dict[str, Any]) -> dict[str, Any]:
    """Each object's properties with their JSON types (bounds and titles left out), and its required."""

    def types(node: dict[str, Any]) -> Any:
        if "$ref" in node:
            return node["$ref"].rsplit("/", 1)[-1].replace("SidecarDocument", "SidecarEvidence")
        if "anyOf" in node:
            return sorted(map(str, (types(n) for n in node["anyOf"])))
        if node.get("type") == "array":
            return ["array", types(node["items"])]
        if "const" in node or "enum" in node:
            return ["enum", sorted(map(str, node.get("enum", [node.get("const")])))]
        return [node.get("type"), node.get("format")]

    def obj(node: dict[str, Any]) -> dict[str, Any]:
        return {"properties": {k: types(v) for k, v in node["properties"].items()},
                "required": sorted(node.get("required", []))}

    return {"root": obj(schema), **{name: obj(d) for name, d in schema.get("$defs", {}).items()}}


def test_the_writer_and_the_reader_have_one_json_schema() -> None:
    written = TypeAdapter(sd.SidecarDocument).json_schema()
    read = ev.SidecarEvidence.model_json_schema()
    assert _shape(written) == _shape(read)
