"""Leader hand-over at scale: 200 followed pods, the leader SIGKILLed, the standby takes over.

Two ``podmortem operator`` processes, started as the chart starts them (leader
election on, distinct ``PODMORTEM_POD_NAME``, one shared ``PODMORTEM_LOG_STORE_DIR``
standing in for the ReadWriteMany volume, short Lease settings), against an
emulated cluster of 200 Running annotated pods in a process of its own
(``podmortem_demo.scale_cluster``). The leader stores every pod's lines; it is
killed with SIGKILL (no release, no graceful stop); while no one leads, every pod
writes more lines and ten are OOM-killed. The standby must take the Lease within
its duration plus 10 s, resume every follow from the cursor the dead leader
persisted, so that each pod's stored log holds every line it wrote exactly once and
in order, and write a failure report for each pod that died during the hand-over.

Only the Lease bound is a timing assertion; every other wait is generous (the
test machine may be small and busy).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tests.cli import entrypoints as ep
from tests.cli.entrypoints import Process

from podmortem.operator.watch_options import FAILURE_REPORT
from podmortem_demo.scale_cluster import NAMESPACE, ScaleCluster

PODS = 200
INITIAL = 20  # lines each pod wrote before the first operator started
BEFORE = 15  # lines written while the first replica leads
DURING = 15  # lines written while no replica leads (the leader killed, the standby not yet leading)
KILLED = [f"idle-{i}" for i in range(7, PODS, 20)]  # 10 pods OOM-killed during the hand-over
LEASE_NS, LEASE_NAME = "podmortem", "podmortem-operator"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{LEASE_NAME}"
DURATION_S, RENEW_S, RETRY_S = 5, 3, 1
#: Each emulated line is ``trainer 0 <seq> step=... loss=...`` (``kubelet.plain_text``), seq from 0.
LINE = re.compile(r"^trainer 0 (\d+) step=\d+ loss=0\.\d{4}$")

T = TypeVar("T")


def _wait(probe: Callable[[], T | None], *, what: str, timeout: float, every: float = 0.5,
          procs: tuple[Process, ...] = ()) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got is not None:
            return got
        for p in procs:
            if not p.alive():
                raise AssertionError(f"{p.log.name} exited {p.proc.returncode} while waiting for {what}:\n"
                                     f"{p.output()[-4000:]}")
        if time.monotonic() > deadline:
            logs = "".join(f"\n--- {p.log.name} ---\n{p.output()[-3000:]}" for p in procs)
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{logs}")
        time.sleep(every)


def _api_get(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            body: dict[str, Any] = json.loads(resp.read())
            return body
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def _holder(cluster: ScaleCluster) -> str:
    lease = _api_get(cluster.url + LEASE_PATH)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def check_log(body: str) -> tuple[list[int], list[str]]:
    """The sequence numbers of the stored lines, and anything else in the log that is not an end marker."""
    seqs: list[int] = []
    odd: list[str] = []
    for line in body.splitlines():
        m = LINE.match(line)
        if m is not None:
            seqs.append(int(m.group(1)))
        elif not (line.startswith("--- podmortem: end of log") and line.endswith("---")):
            odd.append(line)  # a gap marker ("lines may be missing") or anything unexpected
    return seqs, odd


def _logs(port: int, names: list[str]) -> dict[str, str]:
    out = {}
    for name in names:
        status, body = ep.http_get(f"http://127.0.0.1:{port}/logs/{NAMESPACE}/{name}", timeout=10)
        out[name] = body if status == 200 else ""
    return out


def _complete(port: int, names: list[str], expected: int) -> Callable[[], dict[str, str] | None]:
    """A probe: every pod's log as served, once each holds at least ``expected`` lines."""
    def probe() -> dict[str, str] | None:
        logs = _logs(port, names)
        short = [n for n, body in logs.items()
                 if sum(1 for ln in body.splitlines() if LINE.match(ln)) < expected]
        return None if short else logs
    return probe


def _reports(cluster: ScaleCluster) -> dict[str, dict[str, Any]]:
    """The failure reports the operator wrote on the pods, by pod name.

    Read from the list (kmock's store, where the operator's PATCH lands): a single pod's GET is
    answered from the emulated kubelet's own view of it, without the annotation.
    """
    listed = _api_get(f"{cluster.url}/api/v1/namespaces/{NAMESPACE}/pods") or {}
    out = {}
    for pod in listed.get("items") or ():
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(FAILURE_REPORT)
        if raw is not None:
            out[pod["metadata"]["name"]] = json.loads(raw)
    return out


@pytest.fixture
def cluster() -> Iterator[ScaleCluster]:
    with ScaleCluster(PODS, initial_lines=INITIAL, line_every=0) as c:
        yield c


def replica_env(tmp: Path, identity: str, store: Path) -> dict[str, str]:
    """The chart's environment for one of two replicas: its own ports and name, the shared store."""
    return ep.clean_env(
        tmp,
        PODMORTEM_LOG_STORE_DIR=str(store),
        PODMORTEM_HTTP_PORT=str(ep.free_port()),
        PODMORTEM_METRICS_PORT=str(ep.free_port()),
        PODMORTEM_HEALTH_PORT=str(ep.free_port()),
        PODMORTEM_HTTP_AUTH="none",  # kmock has no TokenReview; log auth is tested in tests/logs
        PODMORTEM_AGENT_ENABLED="false",  # no node agent: reports from the pod status and logs
        PODMORTEM_LEADER_ELECTION="true",
        PODMORTEM_LEADER_ELECTION_LEASE=LEASE_NAME,
        PODMORTEM_POD_NAMESPACE=LEASE_NS,
        PODMORTEM_POD_NAME=identity,
        PODMORTEM_LEADER_ELECTION_LEASE_DURATION_SECONDS=str(DURATION_S),
        PODMORTEM_LEADER_ELECTION_RENEW_DEADLINE_SECONDS=str(RENEW_S),
        PODMORTEM_LEADER_ELECTION_RETRY_PERIOD_SECONDS=str(RETRY_S),
    )


def test_standby_takes_over_200_follows_after_the_leader_is_sigkilled(
    cluster: ScaleCluster, tmp_path: Path
) -> None:
    kubeconfig = ep.write_kubeconfig(tmp_path / "kubeconfig", server=cluster.url, token="t", ca_pem=None)
    store = tmp_path / "shared-store"
    names = list(cluster.names)
    assert len(names) == PODS

    def start(identity: str) -> tuple[Process, dict[str, str]]:
        env = replica_env(tmp_path / identity, identity, store)
        (tmp_path / identity).mkdir()
        proc = ep.start(["operator", "--kubeconfig", str(kubeconfig)], env=env,
                        log=tmp_path / f"{identity}.log")
        return proc, env

    with ExitStack() as stack:
        a, env_a = start("podmortem-a")
        stack.callback(a.stop)
        a.wait_http(f"http://127.0.0.1:{env_a['PODMORTEM_HEALTH_PORT']}/readyz", contains="leader (lease",
                    timeout=90)
        assert _holder(cluster) == "podmortem-a"
        a_port = int(env_a["PODMORTEM_HTTP_PORT"])
        _wait(_complete(a_port, names, INITIAL), what=f"every pod's first {INITIAL} lines stored by A",
              timeout=120, every=1.0, procs=(a,))

        b, env_b = start("podmortem-b")
        stack.callback(b.stop)
        b.wait_http(f"http://127.0.0.1:{env_b['PODMORTEM_HEALTH_PORT']}/readyz",
                    contains="standby (leader: podmortem-a)", timeout=90)

        assert cluster.ask({"cmd": "lines", "pods": names, "n": BEFORE})["done"] == PODS
        _wait(_complete(a_port, names, INITIAL + BEFORE), what="the next lines stored by A",
              timeout=120, every=1.0, procs=(a, b))

        # SIGKILL: no release of the Lease, no graceful stop of the followers.
        a.proc.kill()
        killed_at = time.monotonic()
        a.proc.wait(30)
        assert cluster.ask({"cmd": "lines", "pods": names, "n": DURING})["done"] == PODS
        assert cluster.ask({"cmd": "terminate", "pods": KILLED, "exit_code": 137,
                            "reason": "OOMKilled"})["done"] == len(KILLED)

        _wait(lambda: True if _holder(cluster) == "podmortem-b" else None, what="B holding the Lease",
              timeout=DURATION_S + 60, every=0.2, procs=(b,))
        took = time.monotonic() - killed_at
        assert took <= DURATION_S + 10, f"B took the Lease {took:.1f} s after A's kill\n{b.output()[-3000:]}"
        b.wait_http(f"http://127.0.0.1:{env_b['PODMORTEM_HEALTH_PORT']}/readyz", contains="ready: leader",
                    timeout=90)

        # Every line each pod wrote, once and in order, served by B.
        total = INITIAL + BEFORE + DURING
        b_port = int(env_b["PODMORTEM_HTTP_PORT"])
        logs = _wait(_complete(b_port, names, total), what=f"every pod's {total} lines served by B",
                     timeout=120, every=1.0, procs=(b,))
        resumed = time.monotonic() - killed_at
        time.sleep(2.0)  # a line stored twice would show up by now
        logs = _logs(b_port, names)
        bad = {}
        for name, body in logs.items():
            seqs, odd = check_log(body)
            if seqs != list(range(total)) or odd:
                bad[name] = (seqs, odd)
        assert not bad, f"{len(bad)} pods' logs are not every line once: {dict(list(bad.items())[:3])}"

        # A report for each pod that died while no one led; none for the others.
        def all_reported() -> dict[str, dict[str, Any]] | None:
            got = _reports(cluster)
            return got if set(KILLED) <= set(got) else None

        reports = _wait(all_reported, what="a failure report on each pod killed during the hand-over",
                        timeout=90, every=1.0, procs=(b,))
        extra = sorted(set(reports) - set(KILLED))
        assert not extra, f"reports on pods not killed: {extra}"
        for name, report in reports.items():
            assert report["pod"]["name"] == name, report
            assert report["verdict"], report
        print(f"\nhand-over of {PODS} pods: B took the Lease {took:.1f} s after A's SIGKILL "
              f"(duration {DURATION_S} s); every log complete at {resumed:.1f} s; "
              f"{PODS * total} lines checked; {len(reports)} reports")
