"""The exactly-once check itself catches every way a delivery can be wrong.

The property and restart tests are only as strong as :func:`exactly_once.check`;
here it is fed doctored event streams and must refuse each one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from podmortem.logs.events import EndReason, GapMarker, GapReason, LogEnd, LogLine
from podmortem_demo.emulated import Container, PodLogsApi, running_cluster

from .exactly_once import check


@pytest.fixture
async def container() -> AsyncIterator[Container]:
    async with running_cluster() as (api, _):
        yield make(api)


def make(api: PodLogsApi) -> Container:
    main = api.add_pod("p").containers["main"]
    main.write(10)
    main.rotate()  # lines 0..9 rotated away
    main.write(5)
    return main


def events(main: Container, indices: list[int]) -> list[object]:
    produced = main.current.log.lines()
    return [LogLine("main", *produced[i]) for i in indices]


def end(main: Container, reason: EndReason = EndReason.TERMINATED) -> LogEnd:
    return LogEnd("main", main.current.container_id, reason)


def gap(main: Container, after: int, before: int) -> GapMarker:
    produced = main.current.log.lines()
    return GapMarker("main", GapReason.ROTATION, produced[after][0], produced[before][0])


async def test_accepts_exact_delivery_and_marked_rotation_loss(container: Container) -> None:
    out = check([*events(container, list(range(15))), end(container)], container)
    assert out.delivered == 15 and out.lost == []
    out = check(
        [
            *events(container, [0, 1, 2]),
            gap(container, 2, 10),
            *events(container, range(10, 15)),
            end(container),
        ],
        container,
    )
    assert out.delivered == 8 and len(out.lost) == 7 and out.gaps == 1


@pytest.mark.parametrize(
    ("indices", "why"),
    [
        (list(range(14)), "a line never delivered"),
        ([0, 1, 1, *range(2, 15)], "a duplicate"),
        ([0, 2, 1, *range(3, 15)], "out of order"),
        ([0, 1, 2, *range(10, 15)], "a rotation loss without a gap marker"),
    ],
)
async def test_refuses(container: Container, indices: list[int], why: str) -> None:
    with pytest.raises(AssertionError):
        check([*events(container, indices), end(container)], container)


async def test_refuses_a_gap_that_skips_lines_still_in_the_file(container: Container) -> None:
    # After the rotation at line 10, lines 10..14 were readable: skipping 10 and 11 is a loss.
    with pytest.raises(AssertionError, match="not the first line of a rotated file"):
        check(
            [
                *events(container, [0, 1, 2]),
                gap(container, 2, 12),
                *events(container, [12, 13, 14]),
                end(container),
            ],
            container,
        )


async def test_refuses_a_gap_no_rotation_explains(container: Container) -> None:
    with pytest.raises(AssertionError, match="no rotation"):
        check(
            [
                *events(container, range(12)),
                gap(container, 11, 12),
                *events(container, [12, 13, 14]),
                end(container),
            ],
            container,
        )


async def test_refuses_a_missing_or_wrong_end(container: Container) -> None:
    with pytest.raises(AssertionError, match="no final end"):
        check(events(container, list(range(15))), container)
    with pytest.raises(AssertionError):
        check(
            [*events(container, list(range(15))), LogEnd("main", "containerd://other", EndReason.TERMINATED)],
            container,
        )
