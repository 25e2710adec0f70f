"""``reports.text.shorten``: every report text cut to fit ends at a word, with an ellipsis.

The job section once showed a root cause's line cut at "(evidence.kernelR"; a reader could not
tell a cut text from a whole one. Properties: the result fits the limit, is the original's start
up to the ellipsis, and ends at a word boundary whenever the part that fits has a space.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from podmortem.render import page
from podmortem.reports.document import ReportDocument
from podmortem.reports.text import ELLIPSIS, shorten

_words = st.text(alphabet=st.sampled_from("ab é-(.)\t\n"), max_size=400)


@given(text=_words, limit=st.integers(min_value=1, max_value=420))
@example(text="The kernel's own record is not in yet (evidence.kernelRecord.state: pending)", limit=60)
@example(text="x" * 50, limit=10)
@example(text="ab cd", limit=5)
@example(text="   abcdef", limit=5)
def test_shorten_fits_keeps_a_prefix_and_ends_at_a_word(text: str, limit: int) -> None:
    out = shorten(text, limit)
    assert len(out) <= limit
    if len(text) <= limit:
        assert out == text
        return
    assert out.endswith(ELLIPSIS)
    head = out[: -len(ELLIPSIS)]
    assert text.startswith(head)
    room = text[: limit - len(ELLIPSIS) + 1]  # what fits, and the character after it
    if any(c.isspace() for c in room.lstrip()):  # a word ends within what fits
        assert head and not head[-1].isspace(), (text, limit, out)
        assert text[len(head)].isspace(), (text, limit, out)  # cut at a word's end, not inside one
    else:  # a single word longer than the limit: cut inside it, as much as fits
        assert len(out) == limit


def test_a_word_longer_than_the_limit_is_cut_inside() -> None:
    assert shorten("x" * 50, 10) == "x" * 9 + ELLIPSIS
    assert shorten("abc", 0) == ""


def test_the_cut_the_user_saw_now_ends_at_a_word() -> None:
    text = ("The kubelet reports container 'trainer' as OOMKilled: it passed its memory limit and the kernel "
            "killed it. The kernel's own record is not in yet (the node agent has not handed it over); this "
            "report is updated when it comes (evidence.kernelRecord.state: pending) and then says what held "
            "the memory.")
    assert shorten(text, 240).endswith(" when it comes" + ELLIPSIS)


def test_a_long_page_title_is_cut_at_a_word() -> None:
    title = "ns/" + "job-name " * 100
    doc = page.render(page.PageInput(title=title, report=ReportDocument.parse({})))
    shown = doc.split("<h1>", 1)[1].split("</h1>", 1)[0]
    assert shown.endswith("job-name" + ELLIPSIS) and len(shown) <= page.TITLE_MAX_CHARS
