"""The exactly-once check: what a follower delivered against what the emulated container wrote.

Delivered lines must be the produced lines of each container instance, in
order, each once. The only lines allowed to be missing are lines lost to a
rotation, and only where a gap marker says so: after a ``rotation`` gap the
next delivered line must be the first line of a rotated file (a rotation
point at or after the last delivered line), and exactly the lines between are
counted as lost. A gap that no rotation explains, a line out of place, a
duplicate or a silently missing line is a failure with a message saying where.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from podmortem.logs.events import EndReason, GapMarker, GapReason, LogEnd, LogLine
from podmortem_demo.emulated import Container


@dataclass
class Outcome:
    """What the check found: lines delivered and lost (to marked rotations), per instance."""

    delivered: int = 0
    lost: list[tuple[int, bytes]] = field(default_factory=list)
    #: Lines rotated away before the follower read a single line of their instance: with no
    #: cursor there is nothing to compare with, so no follower can see this loss.
    unseen: list[tuple[int, bytes]] = field(default_factory=list)
    #: Rotation gaps seen, and restarts gaps (whole instances' tails unreadable).
    gaps: int = 0
    restarts_gaps: int = 0
    ends: list[LogEnd] = field(default_factory=list)


def _show(line: tuple[int, bytes] | None) -> str:
    return "nothing" if line is None else f"({line[0]}, {line[1][:60]!r})"


def check(events: Iterable[object], container: Container, *, allow_restarts_gap: bool = False) -> Outcome:
    """Fail (AssertionError) unless ``events`` (lines, gaps, ends of one sink) are exactly-once."""
    name = container.name
    instances = container.instances
    produced = [inst.log.lines() for inst in instances]
    rotations = [inst.log.rotations for inst in instances]
    out = Outcome()
    k = 0  # instance being delivered
    i = 0  # next produced line expected from it
    pending: GapMarker | None = None
    last_ts: int | None = None

    def jump_to(later: int) -> None:
        """Instances before ``later`` lost the rest of their lines to a RESTARTS gap."""
        nonlocal k, i, last_ts
        for n in range(k, later):
            out.lost.extend(produced[n][i if n == k else 0 :])
        k, i, last_ts = later, 0, None

    def finish_instance(why: str) -> None:
        nonlocal pending
        prod = produced[k]
        if pending is not None and pending.reason is GapReason.ROTATION:
            # A gap at the end of an instance: its remaining lines must all be rotated away.
            points = [r for r in rotations[k] if r >= i]
            assert points, f"{name}#{k}: rotation gap at the end ({why}) but no rotation after line {i}"
            assert max(points) >= len(prod), (
                f"{name}#{k}: lines {max(points)}..{len(prod)} were in the file after the last rotation"
                f" but never delivered ({why})"
            )
            out.lost.extend(prod[i:])
        elif pending is None and i == 0 and rotations[k] and max(rotations[k]) >= len(prod):
            out.unseen.extend(prod)  # rotated away before the first read, and nothing came after
        elif pending is not None and pending.reason is GapReason.RESTARTS:
            out.lost.extend(prod[i:])  # the rest of the instance went with the restarts
        else:
            assert i == len(prod), (
                f"{name}#{k}: {len(prod) - i} lines never delivered before {why}; first missing"
                f" line {i}: {_show(prod[i] if i < len(prod) else None)}"
            )
        pending = None

    for ev in events:
        if isinstance(ev, LogLine):
            if ev.container != name:
                continue
            assert k < len(instances), f"{name}: a line after the last instance ended: {ev}"
            prod = produced[k]
            got = (ev.ts_ns, ev.text)
            if pending is None and i == 0 and not (prod and prod[0] == got):
                # Nothing read from this instance yet: its file may have rotated before the first read.
                j = next((r for r in rotations[k] if r < len(prod) and prod[r] == got), None)
                assert j is not None, (
                    f"{name}#{k} line 0: expected {_show(prod[0] if prod else None)} or the first line of"
                    f" a rotated file, got {_show(got)}"
                )
                out.unseen.extend(prod[:j])
                i = j
            elif pending is None:
                assert i < len(prod) and prod[i] == got, (
                    f"{name}#{k} line {i}: expected {_show(prod[i] if i < len(prod) else None)},"
                    f" got {_show(got)} (delivered {out.delivered} so far)"
                )
            else:
                j = next(
                    (r for r in sorted(set(rotations[k])) if r >= i and r < len(prod) and prod[r] == got),
                    None,
                )
                if pending.reason is GapReason.ROTATION:
                    assert j is not None, (
                        f"{name}#{k}: after a rotation gap at line {i}, got {_show(got)}, which is not the"
                        f" first line of a rotated file (rotations at {rotations[k]})"
                    )
                    assert pending.before_ts_ns in (None, ev.ts_ns), (
                        f"{name}#{k}: the gap says lines resume at {pending.before_ts_ns},"
                        f" they resume at {ev.ts_ns}"
                    )
                    out.lost.extend(prod[i:j])
                    i = j
                elif not (i < len(prod) and prod[i] == got):
                    # A RESTARTS gap: the rest of this instance, and maybe whole instances, are gone;
                    # the next line must be the first of a later instance.
                    later = next(
                        (
                            n
                            for n in range(k + 1, len(instances))
                            if any(r < len(produced[n]) and produced[n][r] == got for r in [0, *rotations[n]])
                        ),
                        None,
                    )
                    assert later is not None, (
                        f"{name}#{k}: after a {pending.reason} gap got {_show(got)}, neither line {i} of this"
                        f" instance nor the first line of a later one"
                    )
                    jump_to(later)
                    prod = produced[k]
                    if prod[0] != got:  # that instance's file rotated before anyone read it
                        i = next(r for r in rotations[k] if r < len(prod) and prod[r] == got)
                        out.unseen.extend(prod[:i])
                pending = None
            i += 1
            out.delivered += 1
            last_ts = ev.ts_ns
        elif isinstance(ev, GapMarker):
            if ev.container != name:
                continue
            if ev.reason is GapReason.RESTARTS:
                out.restarts_gaps += 1
            else:
                out.gaps += 1
            allowed = {GapReason.ROTATION} | ({GapReason.RESTARTS} if allow_restarts_gap else set())
            assert ev.reason in allowed, f"{name}#{k}: unexpected gap {ev}"
            if ev.reason is GapReason.ROTATION:
                assert any(r >= i for r in rotations[k]), (
                    f"{name}#{k}: rotation gap after line {i}, but no rotation since ({rotations[k]})"
                )
                assert ev.after_ts_ns in (None, last_ts), (
                    f"{name}#{k}: the gap says lines were lost after {ev.after_ts_ns},"
                    f" the last line was {last_ts}"
                )
            pending = ev
        elif isinstance(ev, LogEnd):
            if ev.container != name:
                continue
            out.ends.append(ev)
            assert k < len(instances), f"{name}: an end after the last instance: {ev}"
            ids = [inst.container_id for inst in instances]
            if (
                pending is not None
                and pending.reason is GapReason.RESTARTS
                and ev.container_id in ids
                and ids.index(ev.container_id) > k
            ):
                jump_to(ids.index(ev.container_id))
            assert ev.container_id == instances[k].container_id, (
                f"{name}: end {ev.reason} for {ev.container_id},"
                f" expected instance #{k} {instances[k].container_id}"
            )
            finish_instance(str(ev.reason))
            if ev.reason is EndReason.RESTARTED:
                k += 1
                i = 0
                last_ts = None
            else:
                assert k == len(instances) - 1, (
                    f"{name}: final end {ev.reason} at instance #{k} of {len(instances)}"
                )
                k += 1
    assert k == len(instances), f"{name}: the log ended at instance #{k} of {len(instances)} (no final end)"
    return out
