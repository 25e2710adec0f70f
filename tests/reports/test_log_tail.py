"""One clipping of a log line for the operator's tail and ``podmortem diagnose``'s: a line cut at
`TAIL_LINE_BYTES` the same way whether the whole line, a block holding it, or only its head is at hand."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem.reports.log_tail import TAIL_LINE_BYTES, clip

LINES = st.one_of(
    st.binary(max_size=2 * TAIL_LINE_BYTES),
    st.sampled_from(["é", "€", "😀", "a"]).flatmap(
        lambda ch: st.integers(TAIL_LINE_BYTES - 8, TAIL_LINE_BYTES + 8).map(lambda n: (ch * n).encode())),
)


def test_a_long_line_is_cut_on_a_character_and_says_how_much_is_gone() -> None:
    line = b"ab" + "€".encode() * 3000  # 9002 bytes; the cut at 4096 falls inside a 3-byte character
    out = clip(line, len(line))
    assert out == b"ab" + "€".encode() * 1364 + b" [podmortem: 4908 more bytes]"
    assert clip(b"short", 5) == b"short"
    assert clip(b"x" * TAIL_LINE_BYTES, TAIL_LINE_BYTES) == b"x" * TAIL_LINE_BYTES


@settings(max_examples=300, deadline=None)
@given(line=LINES, before=st.binary(max_size=50), after=st.binary(max_size=50))
def test_a_line_inside_a_block_clips_as_the_line_alone(line: bytes, before: bytes, after: bytes) -> None:
    """The operator clips a line where it lies in a batch's block, copying only what it keeps."""
    assert clip(before + line + after, len(line), len(before)) == clip(line, len(line))


@settings(max_examples=300, deadline=None)
@given(line=LINES)
def test_the_head_of_a_line_and_its_length_clip_as_the_whole_line(line: bytes) -> None:
    """``podmortem diagnose`` holds only a long line's head while it reads the rest."""
    assert clip(line[: TAIL_LINE_BYTES + 1], len(line)) == clip(line, len(line))
