"""Kernel text is read line by line, each line cut at `diagnose_files.LINE_MAX`: a line without end costs
bounded memory. Read whole, a 256 MiB line took 566 MiB (issue 36)."""

from __future__ import annotations

import io

from podmortem.cli import diagnose_files


def test_a_line_longer_than_line_max_is_cut_and_its_rest_skipped() -> None:
    long = b"x" * (4 * diagnose_files.LINE_MAX + 5)
    lines = list(diagnose_files.lines(io.BytesIO(b"a\n" + long + b"\nb\n" + long)))
    assert lines == ["a\n", "x" * diagnose_files.LINE_MAX + "\n", "b\n", "x" * diagnose_files.LINE_MAX + "\n"]


def test_lines_within_the_bound_pass_unchanged() -> None:
    text = b"one\n" + b"y" * (diagnose_files.LINE_MAX - 1) + b"\n" + b"last without newline"
    assert "".join(diagnose_files.lines(io.BytesIO(text))) == text.decode()
