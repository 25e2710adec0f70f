"""Any pod's OOM kill as an Event on the pod and a counter (``--oom-events``), on recorded kernel records.

The records are real ones (tests/fixtures/oom-records): kind's cgroupfs path naming pod
1788d98a-… and its container a07d3c19…, and a desktop's kill outside any pod. The pod is known
only from the node's pod listing, never marked for podmortem.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from podmortem.agent import oom_events
from podmortem.agent.metrics import AgentMetrics
from podmortem.agent.node import NodeAgent
from podmortem.agent.oom_events import NodePod, OomEvents
from podmortem.agent.pods import FixedPods
from podmortem.agent.settings import AgentSettings
from podmortem.kernel.oom_parser import parse_text
from podmortem.reports.oom_record import OomKillRecord

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"
KIND = parse_text((RECORDS / "08-kind-v2-dmesgT-uwsgi-partial.log").read_text())
DESKTOP = parse_text((RECORDS / "12-fedora-global-journal-newtable-lkml.log").read_text())
UID = "1788d98a-0700-426a-8701-2312e4cc2163"
CONTAINER_ID = "a07d3c191742700df28b349710c93b2014b255b22364decb09b53ca123fa8272"
POD = NodePod(uid=UID, namespace="web", name="uwsgi-7c9d", labels={"app.kubernetes.io/name": "uwsgi"},
              containers={CONTAINER_ID: "app"})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Api:
    """Takes Events as the API server's create does; ``failing`` answers every create with an error."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, dict[str, Any]]] = []
        self.failing = False

    async def __call__(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.failing:
            raise RuntimeError("503 etcd is away")
        self.posted.append((path, body))
        return body


def make(pods: dict[str, NodePod] | None = None,
         **kwargs: Any) -> tuple[OomEvents, Api, Clock, CollectorRegistry]:
    api, clock, registry = Api(), Clock(), CollectorRegistry()
    known = {UID: POD} if pods is None else pods
    events = OomEvents(node="node-1", lookup=known.get, poster=api, registry=registry, clock=clock,
                       pod_labels=kwargs.pop("pod_labels", ("app.kubernetes.io/name",)), **kwargs)
    return events, api, clock, registry


async def drain(events: OomEvents) -> None:
    task = asyncio.create_task(events.run())
    for _ in range(20):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def kills(registry: CollectorRegistry, **labels: str) -> float | None:
    return registry.get_sample_value("podmortem_agent_oom_kills_total", labels)


def events_counted(registry: CollectorRegistry, result: str) -> float:
    return registry.get_sample_value("podmortem_agent_oom_events_total", {"result": result}) or 0.0


def again(record: OomKillRecord, n: int) -> OomKillRecord:
    """The same pod's kill read as another record (a later kill: another sequence number)."""
    return record.model_copy(update={"kmsg_seq": 10_000 + n, "monotonic_s": (record.monotonic_s or 0) + n})


async def test_an_unmarked_pods_kill_is_an_event_on_the_pod_and_a_count() -> None:
    events, api, _, registry = make()
    assert events.on_records(KIND) == 1
    await drain(events)
    [(path, event)] = api.posted
    assert path == "/api/v1/namespaces/web/events"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "uwsgi-7c9d",
                                       "namespace": "web", "uid": UID}
    assert (event["type"], event["reason"]) == ("Warning", "OOMKilling")
    assert event["source"] == {"component": "podmortem-agent", "host": "node-1"}
    message = event["message"]
    assert "killed uwsgi (pid 11638) in container app" in message
    assert "memory cgroup out of memory" in message and message.endswith("(podmortem agent on node-1)")
    assert kills(registry, namespace="web", pod="uwsgi-7c9d", container="app",
                 label_app_kubernetes_io_name="uwsgi") == 1
    assert events_counted(registry, "posted") == 1


def test_a_kill_outside_any_pod_is_left_alone() -> None:
    events, _, _, registry = make()
    assert oom_events.place(DESKTOP[0]) is None
    assert events.on_records(DESKTOP) == 0
    assert registry.get_sample_value("podmortem_agent_oom_kills_total",
                                     {"namespace": "web", "pod": "uwsgi-7c9d", "container": "app",
                                      "label_app_kubernetes_io_name": "uwsgi"}) is None


async def test_one_event_per_pod_per_interval_the_rest_folded_into_the_next() -> None:
    events, api, clock, registry = make(per_pod_s=60.0)
    events.on_records([again(KIND[0], n) for n in range(5)])  # a crash loop: five kills in a minute
    await drain(events)
    assert len(api.posted) == 1
    assert kills(registry, namespace="web", pod="uwsgi-7c9d", container="app",
                 label_app_kubernetes_io_name="uwsgi") == 5
    assert events_counted(registry, "folded") == 4
    clock.now += 61
    events.on_records([again(KIND[0], 99)])
    await drain(events)
    assert len(api.posted) == 2
    assert "4 earlier kill(s) of this pod since the last Event" in api.posted[1][1]["message"]


async def test_the_node_posts_at_most_its_events_per_minute() -> None:
    pods = {f"{i:08d}-0700-426a-8701-2312e4cc2163": NodePod(uid=f"{i:08d}-0700-426a-8701-2312e4cc2163",
                                                            namespace="web", name=f"p{i}")
            for i in range(40)}
    records = []
    for i, uid in enumerate(pods):
        text = (RECORDS / "08-kind-v2-dmesgT-uwsgi-partial.log").read_text().replace(UID, uid)
        records += [again(r, i) for r in parse_text(text)]
    events, api, clock, _ = make(pods, per_minute=30, pod_labels=(), per_pod_s=0.0)
    events.on_records(records)
    await drain(events)
    assert len(api.posted) == 30  # a node-wide storm: 40 pods killed, 30 Events
    clock.now += 10  # 10 s refills 5 tokens
    events.on_records([again(r, 1000 + i) for i, r in enumerate(records[:10])])
    await drain(events)
    assert len(api.posted) == 30 + 5


async def test_the_message_stays_within_1024_bytes() -> None:
    assert KIND[0].oom_kill is not None
    huge = KIND[0].model_copy(update={"oom_kill": KIND[0].oom_kill.model_copy(update={"task": "é" * 3000})})
    events, api, _, _ = make()
    events.on_records([huge])
    await drain(events)
    message = api.posted[0][1]["message"]
    assert len(message.encode()) <= 1024 and "é…" in message
    assert message.endswith("… (podmortem agent on node-1)")  # where it came from survives the cut


async def test_a_record_read_twice_counts_once() -> None:
    events, api, _, registry = make(per_pod_s=0.0)
    events.on_records(KIND)
    events.on_records(KIND)  # the kernel log position was not saved before a restart
    await drain(events)
    assert len(api.posted) == 1
    assert kills(registry, namespace="web", pod="uwsgi-7c9d", container="app",
                 label_app_kubernetes_io_name="uwsgi") == 1


async def test_a_pod_the_listing_did_not_know_yet_is_placed_after_the_next_one() -> None:
    known: dict[str, NodePod] = {}
    events, api, clock, _ = make(known, keep_unknown_s=120.0)
    assert events.on_records(KIND) == 0
    known[UID] = POD  # the next listing sees the pod
    events.retry()
    await drain(events)
    assert len(api.posted) == 1
    events.on_records([again(KIND[0], 1)])
    known.clear()
    clock.now += 121
    events.retry()  # too late: dropped, not held for ever
    known[UID] = POD
    events.retry()
    await drain(events)
    assert len(api.posted) == 1


async def test_series_are_capped_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oom_events, "MAX_SERIES", 2)
    pods = {u: NodePod(uid=u, namespace="web", name=n) for u, n in
            (("00000001-0700-426a-8701-2312e4cc2163", "a"), ("00000002-0700-426a-8701-2312e4cc2163", "b"),
             ("00000003-0700-426a-8701-2312e4cc2163", "c"))}
    events, _, _, registry = make(pods, pod_labels=())
    for i, uid in enumerate(pods):
        text = (RECORDS / "08-kind-v2-dmesgT-uwsgi-partial.log").read_text().replace(UID, uid)
        events.on_records([again(r, i) for r in parse_text(text)])
    assert kills(registry, namespace="web", pod="a", container="") is None
    assert kills(registry, namespace="web", pod="c", container="") == 1


async def test_a_failed_post_is_counted_and_the_next_goes() -> None:
    events, api, clock, registry = make(per_pod_s=1.0)
    api.failing = True
    events.on_records(KIND)
    await drain(events)
    assert events_counted(registry, "failed") == 1 and api.posted == []
    api.failing = False
    clock.now += 2
    events.on_records([again(KIND[0], 1)])
    await drain(events)
    assert len(api.posted) == 1


def test_the_listed_pod_gives_its_containers_and_only_allowed_labels() -> None:
    item = {
        "metadata": {"uid": UID, "namespace": "web", "name": "uwsgi-7c9d",
                     "labels": {"app.kubernetes.io/name": "uwsgi", "pod-template-hash": "7c9d"}},
        "status": {"containerStatuses": [{
            "name": "app", "containerID": "containerd://" + "b" * 64,
            "lastState": {"terminated": {"reason": "OOMKilled",
                                         "containerID": "containerd://" + CONTAINER_ID}},
        }]},
    }
    pod = oom_events.node_pod(item, ("app.kubernetes.io/name", "team"))
    assert pod is not None
    assert pod.labels == {"app.kubernetes.io/name": "uwsgi"}
    assert pod.containers == {"b" * 64: "app", CONTAINER_ID: "app"}  # the restarted one and the killed one
    assert oom_events.metric_label("app.kubernetes.io/name") == "label_app_kubernetes_io_name"


def test_the_node_agent_hands_every_record_over(tmp_path: Path) -> None:
    settings = AgentSettings(node_name="node-1", state_dir=tmp_path, cgroup_root=tmp_path, proc_root=tmp_path)
    events, _, _, registry = make()
    agent = NodeAgent(settings=settings, pod_source=FixedPods(), metrics=AgentMetrics(CollectorRegistry()),
                      hierarchy=None, oom_events=events)
    assert agent.on_records(KIND) == []  # no watched pod: nothing for the operator's evidence
    assert kills(registry, namespace="web", pod="uwsgi-7c9d", container="app",
                 label_app_kubernetes_io_name="uwsgi") == 1
