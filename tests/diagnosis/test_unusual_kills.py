"""Kills outside the usual forms, read from the project corpus's real records (tests/fixtures/corpus-new).

A kernel with its own OOM policy (a BPF handler's constraint), the oldest kill line (2.4), and a
kill line wrapped right after its pid: each gives the verdict and wording a person reading it gives.
"""

from __future__ import annotations

from pathlib import Path

from podmortem.cli import diagnose_kernel as cli
from podmortem.diagnosis import diagnose
from podmortem.kernel import oom_parser

CORPUS = Path(__file__).parent.parent / "fixtures" / "corpus-new"


def _text(number: str) -> str:
    [path] = [p for p in CORPUS.glob(f"{number}-*") if p.suffix != ".json"]
    return path.read_text()


def test_a_constraint_mainline_does_not_have_is_read_from_the_rest_of_the_record() -> None:
    [record] = oom_parser.parse_text(_text("149"))
    assert record.constraint_printed == "CONSTRAINT_BPF_PSI_MEM"
    assert record.constraint_effective == "CONSTRAINT_MEMCG"
    assert "a constraint mainline kernels do not have" in (record.constraint_note or "")
    report = diagnose(record)
    assert report.verdict == "memcg-limit"
    [finding] = [f for f in report.findings if f.code == "memcg-limit"]
    # 41 MiB used of no limit: the finding must not say a limit was reached
    assert "was not at its limit (41.2 MiB of no limit)" in finding.message
    assert "reached" not in finding.message
    assert "no memory limit was reached" in (finding.action or "")


def test_a_mainline_memcg_kill_at_its_limit_still_says_the_limit_was_reached() -> None:
    text = _text("149").replace("limit 9007199254740988kB", "limit 42240kB").replace(
        "CONSTRAINT_BPF_PSI_MEM", "CONSTRAINT_MEMCG")
    [record] = oom_parser.parse_text(text)
    [finding] = [f for f in diagnose(record).findings if f.code == "memcg-limit"]
    assert "reached its own limit of 41.2 MiB" in finding.message


def test_linux_2_4_kill_lines_are_kills_also_when_a_mail_wrapped_them_after_the_pid() -> None:
    records = oom_parser.parse_text(_text("179"))
    assert len(records) == 156
    victims = {(r.victim_pid, r.victim_comm) for r in records}
    assert {(475, "identd"), (11300, "run-parts"), (11301, "set-time")} <= victims
    assert all(r.constraint_effective == "CONSTRAINT_NONE" for r in records)
    assert not any("truncated-line" in r.missing for r in records)
    reports = cli.kernel_reports(records)
    assert {r.verdict for r in reports} == {"global-oom"}


def test_a_shell_prompt_after_a_task_in_line_is_not_part_of_its_path() -> None:
    text = _text("105")
    [first, second] = oom_parser.parse_text(text + text)[:2]
    assert second.limit_of_memcg == "/kubepods/burstable/pod536ef603-3c88-11eb-9ad9-e60de00e2576"
    assert first.chosen is not None and first.chosen.pid == 2178895
