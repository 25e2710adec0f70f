"""Every line once, in order, through the real API server's log proxy to kwok, across each fault.

The operator (``podmortem operator``, a process, logged in as a ServiceAccount bound to the chart's
operator ClusterRole) follows an annotated pod whose log kwok serves from a CRI file. The test
writes numbered lines into that file all along (a thread, 200 lines a second in bursts of 4 lines
that share one timestamp, so that every second holds 50 bursts: a ``sinceTime`` resume, whole
seconds, replays what was stored already), and meanwhile injects one fault:

* ``kwok-killed``: the kubelet side (kwok) SIGKILLed, down for a few seconds, started again;
* ``apiserver-restarted``: kube-apiserver stopped (SIGTERM) and started again;
* ``container-restarted``: the container restarted as the kubelet does it (the log file becomes the
  previous instance's, a new one starts; the pod's status shows a new containerID);
* ``connections-cut``: every connection of the operator reset in the middle of the stream (three
  times), so that it resumes with ``sinceTime`` and skips the replayed part of the second;
* ``operator-sigterm`` / ``operator-sigkill``: the operator stopped and started again on its store.

Then it reads back, through the operator's log server (``GET /logs/...?format=jsonl``), every line
stored for each instance, and requires 0 lost, 0 repeated, 0 out of order, and no gap marker.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.controlplane import _logs
from tests.controlplane.cluster import ControlPlane

POD = "trainer"
#: Lines stored before a fault (the operator is following by then) and after it (it resumed).
SETTLE_LINES = 200
#: How long a component stays down, or the operator away (seconds; lines keep coming meanwhile).
DOWN_S = 4.0
#: Generous: the follower backs off 2 s doubling to 30 s, and the machine is shared.
RESUME_TIMEOUT_S = 240.0


@dataclass
class Run:
    """What one fault acts on."""

    plane: ControlPlane
    namespace: str
    operator: _logs.Operator
    writer: _logs.LineWriter
    proxy: _logs.CuttingProxy


def wait_storing(run: Run, probe: Callable[[], bool | None], *, what: str) -> None:
    """Wait for the operator to store lines; on a timeout, say what the operator and the control
    plane logged (kept in the test's folder), not only that it timed out."""
    try:
        run.plane.wait(probe, what=what, timeout=RESUME_TIMEOUT_S)
    except AssertionError as exc:
        _logs.copy_logs_on_failure(run.plane, run.operator.folder)
        raise AssertionError(f"{exc}; follower reconnects by reason: {_logs.reconnects(run.operator)}\n"
                             f"--- operator ---\n{run.operator.output()[-4000:]}") from None


def kwok_killed(run: Run) -> None:
    run.plane.kill("kwok")
    time.sleep(DOWN_S)
    run.plane.start_component("kwok")


def apiserver_restarted(run: Run) -> None:
    run.plane.components["kube-apiserver"].stop()
    time.sleep(DOWN_S)
    run.plane.restart("kube-apiserver")  # starts it (stopping nothing) and waits for /readyz


def container_restarted(run: Run) -> None:
    time.sleep(1.0)
    _logs.restart_container(run.plane, run.namespace, POD, run.writer)
    time.sleep(DOWN_S)


def connections_cut(run: Run) -> None:
    before = _logs.metric(run.operator.metrics_port, "podmortem_logs_duplicate_lines_dropped_total")
    for _ in range(3):
        assert run.proxy.cut() > 0, "no connection of the operator's to cut"
        stored = len(run.operator.stored(run.namespace, POD))
        wait_storing(run, lambda n=stored: len(run.operator.stored(run.namespace, POD)) > n + 50 or None,
                     what="the operator resumed after the cut")
    dropped = _logs.metric(run.operator.metrics_port, "podmortem_logs_duplicate_lines_dropped_total")
    # The resumes replayed part of a second (sinceTime is whole seconds) and the cursor dropped it.
    assert dropped > before, "no reconnect replayed a stored line: sinceTime was not exercised"


def operator_stopped(sig: signal.Signals) -> Callable[[Run], None]:
    def fault(run: Run) -> None:
        run.operator.stop(sig=sig)
        time.sleep(DOWN_S)
        run.operator.start()
    return fault


FAULTS: dict[str, Callable[[Run], None]] = {
    "kwok-killed": kwok_killed,
    "apiserver-restarted": apiserver_restarted,
    "container-restarted": container_restarted,
    "connections-cut": connections_cut,
    "operator-sigterm": operator_stopped(signal.SIGTERM),
    "operator-sigkill": operator_stopped(signal.SIGKILL),
}


@pytest.fixture(scope="module")
def crd(control_plane: ControlPlane) -> None:
    _logs.install_crd(control_plane)


#: kwok never ends a follow (its runtime stub answers "unavailable", which the kubelet's ReadLogs takes
#: for "still running"): the old instance's stream ends at the operator's read timeout (120 s).
SLOW = {"container-restarted": pytest.mark.timeout(900)}


@pytest.mark.parametrize("fault", [pytest.param(f, marks=SLOW.get(f, ())) for f in FAULTS])
def test_every_line_is_stored_once_in_order(control_plane: ControlPlane, namespace: str, tmp_path: Path,
                                            crd: None, fault: str) -> None:
    plane = control_plane
    account = _logs.operator_account(plane, namespace, tmp_path)
    proxy = _logs.CuttingProxy(plane.apiserver_port)
    kubeconfig = proxy.kubeconfig(account, tmp_path / "via-proxy.kubeconfig")
    operator = _logs.Operator(kubeconfig, namespace, tmp_path)
    first = _logs.start_pod(plane, namespace, POD)
    writer = _logs.LineWriter(first, burst=4, interval_s=0.02)
    run = Run(plane, namespace, operator, writer, proxy)
    try:
        with writer:
            operator.start()
            wait_storing(run, lambda: len(operator.stored(namespace, POD)) >= SETTLE_LINES or None,
                         what="the operator storing the pod's lines")
            FAULTS[fault](run)
            after = writer.written
            latest = len(writer.instances) - 1
            wait_storing(run, lambda: len(operator.stored(namespace, POD, previous=False)) > (
                             after + SETTLE_LINES if latest == 0 else SETTLE_LINES) or None,
                         what="the operator storing lines written after the fault")
        results = _logs.wait_stored(operator, namespace, POD, writer.instances, timeout=RESUME_TIMEOUT_S,
                                    alive=lambda: operator.process is not None and operator.process.alive())
        print(f"{fault}: " + "; ".join(f"instance {k}: {c.summary()}" for k, c in enumerate(results)))
        for k, c in enumerate(results):
            assert c.exact, f"instance {k}: {c.summary()}\n--- operator ---\n{operator.output()[-4000:]}"
    finally:
        if operator.process is not None:
            operator.stop()
        proxy.close()


def test_the_check_sees_lost_repeated_reordered_and_foreign_lines() -> None:
    """The comparison the tests above rest on fails for each way a follower can go wrong."""
    written = [(1_000_000_000 + i // 4, f"line {i:06d}") for i in range(12)]

    def stored(lines: list[tuple[int, str]], *extra: dict[str, object]) -> list[dict[str, object]]:
        return [{"type": "line", "ts_ns": ts, "text": text} for ts, text in lines] + list(extra)

    assert _logs.compare(written, stored(written, {"type": "end"})).exact
    lost = _logs.compare(written, stored(written[:5] + written[6:]))
    assert (lost.lost, lost.exact) == (1, False)
    repeated = _logs.compare(written, stored(written[:8] + written[4:]))  # a whole-second replay kept
    assert (repeated.repeated, repeated.lost, repeated.exact) == (4, 0, False)
    reordered = _logs.compare(written, stored([*written[:3], written[4], written[3], *written[5:]]))
    assert (reordered.out_of_order, reordered.exact) == (1, False)
    foreign = _logs.compare(written, stored([*written, (2000000000, "line 000012")]))
    assert (len(foreign.unknown), foreign.exact) == (1, False)
    gap = _logs.compare(written, stored(written, {"type": "gap", "reason": "rotation"}))
    assert not gap.exact
