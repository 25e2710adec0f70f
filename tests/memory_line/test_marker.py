"""The per-epoch line's marker is spelled once on each side: the trainer's and the operator's agree."""

from podmortem import memory_line
from podmortem_runtime import memory


def test_the_trainer_prints_the_marker_the_operator_looks_for() -> None:
    assert memory.MARKER == memory_line.MARKER
