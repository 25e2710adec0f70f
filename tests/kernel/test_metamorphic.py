"""The diagnosis of every corpus record survives what pastes do to it (issue 22's metamorphic tests).

Comparing with the sidecars only says the parser fits the samples; here every record is
transformed the way people's tools transform it (tests/kernel/metamorphic.py), alone and
composed by hypothesis, and must give the same answer: the same kills with the same verdict,
victim, limit, pod, container and dominant memory class.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import metamorphic as mm

RECORDS = Path(__file__).parent.parent / "fixtures" / "oom-records"
FILES = sorted(RECORDS.glob("*.log"))
TEXTS = {p.name: p.read_text(errors="replace") for p in FILES}
ANSWERS = {name: mm.answer(text) for name, text in TEXTS.items()}


def test_the_corpus_has_kills_to_compare() -> None:
    assert sum(1 for a in ANSWERS.values() if a) >= 45


#: Record and transformation pairs whose answer still changes: open work of issue 22, listed so
#: that the test fails both when one more breaks and when one of these is fixed (then remove it).
#: - 47 pasted twice: grep kept only "Task in" lines of several kills in one second; a second copy
#:   of such single lines cannot be told from more kills.
#: (36, 46, 56 pasted twice; 36 and 62 under mail wraps; 23 under terminal wraps were open too:
#: fixed by dropping a run of records pasted twice, taking a trace frame or the rest of a dmesg
#: stamp as a wrapped part, and a one-line v1 stats line's rest whatever its length.)
_R47 = "47-zh-dmesgT-locale-grep-taskin-only.log"
KNOWN_OPEN: dict[str, set[str]] = {
    # Three identical one-line records in one second: three kills or one pasted thrice; cannot tell.
    "twice": {_R47},
}


@pytest.mark.parametrize("transform", mm.ALL, ids=lambda t: t.__name__)
def test_each_transformation_alone_keeps_every_answer(transform: mm.Transform) -> None:
    changed = {
        name: (ANSWERS[name], got)
        for name, text in TEXTS.items()
        if (got := mm.answer(transform(text))) != ANSWERS[name]
    }
    assert set(changed) == KNOWN_OPEN.get(transform.__name__, set()), "\n".join(
        f"{name}: {want} -> {got}" for name, (want, got) in sorted(changed.items())
    )


@pytest.mark.xfail(reason="open (issue 22): compositions such as a terminal wrap under ANSI colours, "
                          "and the pairs in KNOWN_OPEN, still change answers", strict=True)
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(TEXTS)),
    whole=st.lists(st.sampled_from(mm.WHOLE), max_size=2, unique=True),
    wrap=st.one_of(st.none(), st.sampled_from(mm.WRAPS)),
    prefixes=st.lists(st.sampled_from(mm.PREFIXES), max_size=2, unique=True),
)
def test_composed_transformations_keep_every_answer(
    name: str, whole: list[mm.Transform], wrap: mm.Transform | None, prefixes: list[mm.Transform]
) -> None:
    """In the order they happen: what the poster cut or repeated, the wrap, then the paste's own marks."""
    text = TEXTS[name]
    for t in [*whole, *([wrap] if wrap else []), *prefixes]:
        text = t(text)
    assert mm.answer(text) == ANSWERS[name]
