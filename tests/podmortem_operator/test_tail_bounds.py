"""The per-container line tail the operator keeps for reports is bounded in bytes, not only in lines.

2 pods x 3 containers printing 16 MiB lines once took the operator from 90 MB to 4.9 GB: 50 lines
of any size were kept per container. Held bytes are counted here (``len`` of what the tail keeps),
not RSS, so the test says what the tail holds whatever else the process does.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem.diagnosis import training_log
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.lines import LineBatch
from podmortem.operator import followed_pods
from podmortem.operator.followed_pods import PodLogFacts, WatchingSink
from podmortem.reports import log_tail
from podmortem.reports.log_tail import TAIL_LINES

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "training-logs"
MIB = 1 << 20
HUGE = 16 * MIB


class _Inner:
    async def load_cursor(self, container: str) -> LogCursor | None:
        return None

    async def write(self, container: str, batch: LineBatch, cursor: LogCursor) -> None:
        return None


def held(facts: PodLogFacts) -> int:
    """Bytes of pod output the facts keep in their tails."""
    return sum(len(line) for tail in facts.tail.values() for line in tail)


async def feed(facts: PodLogFacts, container: str, texts: list[bytes]) -> None:
    sink = WatchingSink(inner=_Inner(), facts=facts, on_memory_line=None)  # type: ignore[arg-type]
    lines = [LogLine(container=container, ts_ns=i, text=t) for i, t in enumerate(texts)]
    if lines:  # the follower never hands over an empty batch
        await sink.write(container, LineBatch.of(container, lines), None)  # type: ignore[arg-type]


async def test_16_mib_lines_from_2_pods_of_3_containers_hold_a_few_hundred_kib() -> None:
    pods = [PodLogFacts(namespace="ns", pod=f"p{n}", pod_uid=f"u{n}") for n in range(2)]
    for facts in pods:
        for container in ("trainer", "sidecar", "logger"):
            for _ in range(3):  # batches of 20 lines, then one line alone
                await feed(facts, container, [b"x" * HUGE] * 20)
            await feed(facts, container, [b"y" * HUGE])
    total = sum(held(facts) for facts in pods)
    assert total <= 2 * 3 * log_tail.TAIL_BYTES
    for facts in pods:
        for tail in facts.tail.values():
            assert all(len(line) <= log_tail.TAIL_LINE_BYTES + 64 for line in tail)
            assert len(tail) <= TAIL_LINES


async def test_a_clipped_line_keeps_its_head_and_says_how_much_is_gone() -> None:
    facts = PodLogFacts(namespace="ns", pod="p", pod_uid="u")
    await feed(facts, "c", [b"RuntimeError: " + b"z" * HUGE])
    (line,) = facts.tail["c"]
    kept = log_tail.TAIL_LINE_BYTES
    assert line.startswith(b"RuntimeError: zzz")
    assert line.endswith(b" [podmortem: %d more bytes]" % (HUGE + 14 - kept))
    assert len(line) - len(b" [podmortem: %d more bytes]" % (HUGE + 14 - kept)) == kept


async def test_clipping_never_splits_a_character() -> None:
    facts = PodLogFacts(namespace="ns", pod="p", pod_uid="u")
    texts = [prefix + char.encode() * 10_000 for prefix in (b"", b"a", b"ab") for char in "é€😀"]
    await feed(facts, "c", texts)  # every cut lands on each byte of a 2-, 3- and 4-byte character
    kept = facts.last_lines("c")
    assert len(kept) == 9
    for text in kept:
        assert "\ufffd" not in text and "[podmortem: " in text


async def test_the_newest_lines_are_kept_within_the_byte_budget() -> None:
    facts = PodLogFacts(namespace="ns", pod="p", pod_uid="u")
    for i in range(40):
        await feed(facts, "c", [b"old %d " % i + b"o" * HUGE])
    await feed(facts, "c", [b"new %d" % i for i in range(5)])
    kept = facts.last_lines("c")
    assert kept[-5:] == [f"new {i}" for i in range(5)]
    assert kept[-6].startswith("old 39 ooo")
    assert held(facts) <= log_tail.TAIL_BYTES


async def test_short_lines_still_fill_all_tail_lines() -> None:
    facts = PodLogFacts(namespace="ns", pod="p", pod_uid="u")
    await feed(facts, "c", [b"step %d " % i + b"." * 1000 for i in range(200)])
    assert len(facts.last_lines("c")) == TAIL_LINES
    assert facts.last_lines("c")[-1].startswith("step 199 ")


async def test_the_classifiers_read_clipped_tails() -> None:
    """A CUDA OOM, a Python exception and an NCCL timeout after 16 MiB lines are still recognised."""
    facts = PodLogFacts(namespace="ns", pod="p", pod_uid="u")
    oom = (LOGS / "cuda-oom-expandable.log").read_bytes().splitlines()
    await feed(facts, "c", [b"\r" + b"#" * HUGE] * 10)  # progress bars: \r, never a newline
    await feed(facts, "c", [b"[rank3]: Watchdog caught collective operation timeout: " + b"w" * HUGE])
    await feed(facts, "c", oom)
    await feed(facts, "c", [b"\r" + b"#" * HUGE])
    tail = facts.last_lines("c")
    found = training_log.cuda_oom(tail)
    assert found is not None and found.tried > 0 and found.total is not None
    exc = training_log.python_exception(tail)
    assert exc is not None and exc.name == "torch.OutOfMemoryError"
    assert [s.kind for s in training_log.peer_signals(tail)] == ["nccl-timeout"]
    assert held(facts) <= log_tail.TAIL_BYTES

    facts = PodLogFacts(namespace="ns", pod="p", pod_uid="u")
    await feed(facts, "c", [b"Traceback (most recent call last):", b'  File "train.py", line 1, in <module>',
                            b"ValueError: " + b"v" * HUGE])
    exc = training_log.python_exception(facts.last_lines("c"))
    assert exc is not None and exc.name == "ValueError"


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.binary(max_size=6000).map(lambda b: b.replace(b"\n", b"")), min_size=1, max_size=80),
       n=st.integers(1, 60))
def test_the_tail_read_back_from_a_raw_block_is_the_per_line_one(texts: list[bytes], n: int) -> None:
    """Walking a block backwards gives exactly the clipped texts of its last lines."""
    raw = b"".join(b"2024-05-01T12:00:%02d.000000000Z %s\n" % (i % 60, t) for i, t in enumerate(texts))
    assert followed_pods.raw_tail_texts(raw, n) == [log_tail.clip(t, len(t)) for t in texts[-n:]]
