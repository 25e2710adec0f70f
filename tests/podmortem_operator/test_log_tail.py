"""The log tail the operator keeps per container, which a report's log-only causes (CUDA OOM...) read."""

from __future__ import annotations

from pathlib import Path

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.lines import LineBatch
from podmortem.operator.followed_pods import PodLogFacts, WatchingSink
from podmortem.reports.log_tail import TAIL_LINES

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "training-logs"


class _Inner:
    async def load_cursor(self, container: str) -> LogCursor | None:
        return None

    async def write(self, container: str, batch: LineBatch, cursor: LogCursor) -> None:
        return None


async def test_the_last_lines_of_each_container_are_kept_bounded() -> None:
    facts = PodLogFacts(namespace="ns", pod="p", pod_uid="u")
    sink = WatchingSink(inner=_Inner(), facts=facts, on_memory_line=None)  # type: ignore[arg-type]
    oom = (LOGS / "cuda-oom-expandable.log").read_bytes().splitlines()
    batches = [[b"step %d" % i for i in range(200)], oom]

    for n, batch in enumerate(batches):
        lines = [LogLine(container="trainer", ts_ns=n * 1000 + i, text=t) for i, t in enumerate(batch)]
        await sink.write("trainer", LineBatch.of("trainer", lines), None)  # type: ignore[arg-type]
    tail = facts.last_lines("trainer")
    assert len(tail) == TAIL_LINES
    assert tail[-1].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert facts.last_lines("sidecar") == []
