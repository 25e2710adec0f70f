"""``podmortem diagnose pod/NAME``: the operator's report of a failed pod from a laptop, nothing installed.

Given ``pod/NAME``, ``job/NAME`` or ``trainingjob/NAME`` (``tj/``), it reads with the user's own
kubeconfig, read-only, what the operator would have read without its node agent:

* the pod (a Job's or TrainingJob's pods, by their owner's labels; a pod's siblings, the other
  pods of its controller, so a multi-pod job's first failure is told from the ones that followed);
* each failed container's log tail (``--previous`` when the container restarted since), with
  timestamps, as many lines as the operator keeps;
* the pods' Events, printed beside the report (the scheduler's, the kubelet's, an eviction's);
* a TrainingJob's status: when the operator already wrote a report there, it says so and how to
  render it.

Then it goes through the same combination as files given to ``podmortem diagnose``
(`podmortem.cli.diagnose_inputs`), so the report is the one ``kubectl get pod -o yaml`` and
``kubectl logs --previous`` saved to files would give. What cannot be read (403, a pod gone, a log
the kubelet rotated away) is said on stderr and the rest is used. The kernel's own record is not
on the API server: without the node agent the report says the kernel record was not sought.

Needs ``get`` on pods and ``pods/log``, ``list`` on pods and Events, ``get`` on jobs or
trainingjobs (the chart's ``logReaders`` ClusterRole grants exactly that).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from podmortem.cli import node_kernel_log
from podmortem.kube.bodies import PodBody
from podmortem.kube.read_at_most import read_at_most

if TYPE_CHECKING:
    from podmortem.cli.diagnose_inputs import Inputs
    from podmortem.kube.session import ApiSession

#: What a target's kind may be written as (kubectl's names and short names).
KINDS = {
    "pod": "pod", "pods": "pod", "po": "pod",
    "job": "job", "jobs": "job", "job.batch": "job", "jobs.batch": "job",
    "trainingjob": "trainingjob", "trainingjobs": "trainingjob", "tj": "trainingjob",
    "trainingjob.podmortem.io": "trainingjob", "trainingjobs.podmortem.io": "trainingjob",
}
#: Lines of each log read: what the operator keeps of a log for a report (`offline.TAIL_LINES`),
#: with room for the lines a kernel console capture or a traceback adds.
LOG_TAIL_LINES = 500
#: Bytes of one log read at most (``limitBytes``): a log of 16 MiB lines stays bounded.
LOG_MAX_BYTES = 4 << 20
#: Pods of one job read at most: a job of thousands of pods is diagnosed from its first ones.
MAX_PODS = 64
#: Bytes of one list's answer (a namespace's pods or a pod's Events) read at most.
LIST_MAX_BYTES = 64 << 20
#: Events printed per pod (the latest).
EVENTS_PER_POD = 10
#: Characters of an Event's message printed.
EVENT_MESSAGE_CHARS = 300
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


class TargetError(Exception):
    """The target cannot be diagnosed (not found, not allowed, no API): one line for the user."""


@dataclass(frozen=True)
class Target:
    kind: str
    name: str


def parse_target(text: str) -> Target | None:
    """``pod/NAME`` and its kin; None for anything else (a file, even one whose name has a slash)."""
    kind, slash, name = text.partition("/")
    if not slash or kind.lower() not in KINDS or not _NAME.fullmatch(name) or os.path.exists(text):
        return None
    return Target(KINDS[kind.lower()], name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags ``pod/NAME`` needs, on ``podmortem diagnose``'s parser."""
    parser.add_argument("-n", "--namespace", metavar="NS",
                        help="namespace of pod/NAME, job/NAME or trainingjob/NAME "
                        "(default: the kubeconfig's)")
    parser.add_argument("--node-kernel-log", action="store_true", help=node_kernel_log.HELP)
    parser.add_argument("--node-kernel-log-image", metavar="IMAGE", default=node_kernel_log.DEFAULT_IMAGE,
                        help="the image whose dmesg --node-kernel-log runs (default: %(default)s)")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig for pod/NAME (default: $KUBECONFIG, then ~/.kube/config); "
                        "read-only: "
                        "get/list pods, get pods/log, list events, get jobs or trainingjobs")


@dataclass
class Gathered:
    """What the API server gave about a target."""

    namespace: str
    pods: list[dict[str, Any]] = field(default_factory=list)
    #: (pod, container) → the log's lines, and whether it is the previous instance's.
    logs: dict[tuple[str, str], tuple[list[bytes], bool]] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: What could not be read, one line each, for stderr.
    notes: list[str] = field(default_factory=list)
    #: The TrainingJob already has the operator's report in its status.
    stored_report: str | None = None
    #: Node → its kernel log's lines (``--node-kernel-log``).
    kernel_logs: dict[str, list[bytes]] = field(default_factory=dict)


def _path(namespace: str, *parts: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/" + "/".join(quote(p, safe="") for p in parts)


def _failed_containers(pod: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(container, previous) for each container whose current or last instance ended non-zero."""
    out = []
    body = PodBody(pod)
    for entry in (*body.init_statuses, *body.statuses):
        now, last = entry.terminated, entry.last_terminated
        if now is not None and now.exit_code:
            out.append((entry.name, False))
        elif last is not None and last.exit_code:
            out.append((entry.name, True))
    return out


async def _get(api: ApiSession, path: str) -> dict[str, Any] | None:
    """The object, or None when it does not exist; other refusals raise `KubeError`."""
    from podmortem.kube.api import KubeError

    try:
        return await api.request("GET", path)
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


async def _list(api: ApiSession, path: str, *, label_selector: str = "",
                field_selector: str = "") -> list[dict[str, Any]]:
    query = [(k, v) for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v]
    items = (await api.request("GET", path, query=query, max_body_bytes=LIST_MAX_BYTES)).get("items") or []
    return [i for i in items if isinstance(i, dict)]


async def _log(api: ApiSession, namespace: str, pod: str, container: str,
               previous: bool) -> list[bytes] | str:
    """A container's last lines with timestamps; a reason (str) when the kubelet has none."""
    query = [("container", container), ("timestamps", "true"), ("tailLines", str(LOG_TAIL_LINES)),
             ("limitBytes", str(LOG_MAX_BYTES))]
    if previous:
        query.append(("previous", "true"))
    async with api.response("GET", _path(namespace, "pods", pod, "log"), query=query,
                            headers={"Accept": "*/*"}) as response:
        body: bytes = await read_at_most(response.content, LOG_MAX_BYTES + 1)
        if response.status != 200:
            return f"HTTP {response.status}: {_status_message(body)}"
    return body[:LOG_MAX_BYTES].splitlines()


def _status_message(body: bytes) -> str:
    import json

    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = None
    return " ".join(str(message or body[:300].decode("utf-8", "replace")).split())


async def _pods_of(api: ApiSession, namespace: str, label: tuple[str, str] | None) -> list[dict[str, Any]]:
    """The namespace's pods with ``label`` (key, value), by name; checked here too, not only by the server."""
    selector = f"{label[0]}={label[1]}" if label else ""
    items = await _list(api, _path(namespace, "pods"), label_selector=selector)
    if label is not None:
        key, value = label
        items = [p for p in items if ((p.get("metadata") or {}).get("labels") or {}).get(key) == value]
    return sorted(items, key=lambda p: str((p.get("metadata") or {}).get("name", "")))[:MAX_PODS]


async def _siblings(api: ApiSession, namespace: str, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The other pods of the pod's controller (a Job's, a TrainingJob's, a JobSet's), by owner uid."""
    meta = pod.get("metadata") or {}
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if owner is None:
        return []
    labels = meta.get("labels") or {}
    # The labels the controllers put on their pods narrow the list; the owner's uid decides.
    label = next(((key, str(labels[key])) for key in
                  ("batch.kubernetes.io/controller-uid", "controller-uid", "podmortem.io/trainingjob-uid")
                  if key in labels), None)
    pods = await _pods_of(api, namespace, label)
    return [p for p in pods if any(o.get("uid") == owner.get("uid")
                                   for o in (p.get("metadata") or {}).get("ownerReferences") or [])]


#: Reads the stored tails of logs the kubelet no longer has (`diagnose_stored.stored_tails`, bound).
StoredTails = Callable[[list[tuple[str, str, bool]]], Awaitable[tuple[dict[tuple[str, str], list[bytes]],
                                                                      list[str]]]]


async def gather(api: ApiSession, target: Target, namespace: str, *, kernel_log_image: str | None = None,
                 stored: StoredTails | None = None) -> Gathered:
    """Read the target's pods, their failed containers' logs and their Events; with
    ``kernel_log_image``, each failed pod's node's kernel log too; with ``stored``, the operator's
    stored tails of logs the kubelet no longer has. Raises `TargetError`."""
    from podmortem.kube.api import KubeError

    out = Gathered(namespace=namespace)
    try:
        if target.kind == "pod":
            pod = await _get(api, _path(namespace, "pods", target.name))
            if pod is None:
                raise TargetError(f"pod {namespace}/{target.name} not found (a deleted pod's status is gone "
                                  "with it; its stored log: podmortem logs -p)")
            siblings = await _siblings(api, namespace, pod)
            out.pods = [pod, *(p for p in siblings if p["metadata"].get("uid") != pod["metadata"].get("uid"))]
        elif target.kind == "job":
            job = await _get(api, f"/apis/batch/v1/namespaces/{quote(namespace, safe='')}/jobs/"
                                  f"{quote(target.name, safe='')}")
            if job is None:
                raise TargetError(f"job {namespace}/{target.name} not found")
            uid = (job.get("metadata") or {}).get("uid", "")
            # Kubernetes 1.27+ labels a Job's pods batch.kubernetes.io/controller-uid; before, controller-uid.
            out.pods = (await _pods_of(api, namespace, ("batch.kubernetes.io/controller-uid", uid))
                        or await _pods_of(api, namespace, ("controller-uid", uid)))
        else:
            from podmortem.operator.jobs import TRAININGJOB_LABEL, trainingjob_path

            tj = await _get(api, trainingjob_path(namespace, target.name))
            if tj is None:
                raise TargetError(f"trainingjob {namespace}/{target.name} not found")
            if (tj.get("status") or {}).get("failureReport"):
                out.stored_report = (
                    f"the operator's own report is in trainingjob {target.name}'s status: "
                    f"podmortem report --from-status {target.name} -n {namespace} -o report.html")
            out.pods = await _pods_of(api, namespace, (TRAININGJOB_LABEL, target.name))
    except KubeError as exc:
        where = f"{target.kind}/{target.name} in {namespace}"
        raise TargetError(f"cannot read {where}: {_kube_error(exc)}") from None
    if not out.pods:
        raise TargetError(f"{target.kind}/{target.name} in {namespace} has no pods left to read "
                          "(their stored logs: podmortem logs -l ... -p)")
    missing: list[tuple[str, str, bool]] = []
    for pod in out.pods:
        name = str(pod["metadata"]["name"])
        for container, previous in _failed_containers(pod):
            try:
                got = await _log(api, namespace, name, container, previous)
            except Exception as exc:  # a log is one part of the evidence: say so and go on
                got = f"{type(exc).__name__}: {exc}"
            if isinstance(got, str):
                which = "previous " if previous else ""
                out.notes.append(f"no {which}log of {name}/{container} on its node: {got}")
                missing.append((name, container, previous))
            else:
                out.logs[name, container] = (got, previous)
        try:
            events = await _list(api, _path(namespace, "events"),
                                 field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}")
        except KubeError as exc:
            out.notes.append(f"no Events of {name}: {_kube_error(exc)}")
            events = []
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if kernel_log_image is not None and node and node not in out.kernel_logs and _failed_containers(pod):
            try:
                got_log = await node_kernel_log.read(api, namespace=namespace, node=node,
                                                     image=kernel_log_image)
            except node_kernel_log.NodeLogError as exc:
                out.notes.append(f"no kernel log of node {node}: {exc}")
            else:
                out.kernel_logs[node] = got_log.lines
        # The selector narrows the list on a real API server; the involved object decides.
        mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == name]
        out.events[name] = sorted(mine, key=_event_time)[-EVENTS_PER_POD:]
    if missing and stored is not None:
        tails, notes = await stored(missing)
        out.notes.extend(notes)
        for (name, container), lines in tails.items():
            previous = next(p for n, c, p in missing if (n, c) == (name, container))
            out.logs[name, container] = (lines, previous)
            out.notes.append(f"the log of {name}/{container} is the operator's stored copy")
    return out


def _kube_error(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", "") or ""
    text = _status_message(body.encode() if isinstance(body, str) else body)
    return f"HTTP {status}: {text}" if status else text or str(exc)


def _event_time(event: Mapping[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or "")


def to_inputs(gathered: Gathered) -> Inputs:
    """The pods and logs as `diagnose_inputs` reads files: one per pod object, one per log, named so that
    each log pairs with its pod and container (``NS/POD.CONTAINER.log``)."""
    from podmortem.cli.diagnose_inputs import FileRead, Inputs, Tail
    from podmortem.diagnosis import offline

    files = []
    for pod in gathered.pods:
        label = f"pod {gathered.namespace}/{pod['metadata']['name']} (API)"
        files.append(FileRead(label=label, kinds=["pod"], looked=["pod"],
                              pods=[offline.PodInput(pod=pod, label=label, kind="pod")]))
    for (pod_name, container), (lines, previous) in gathered.logs.items():
        which = ".previous" if previous else ""
        label = f"{gathered.namespace}/{pod_name}.{container}{which}.log"
        tail = Tail()  # bounded and clipped as a log file's tail is
        tail.feed(b"".join(line + b"\n" for line in lines))
        tail.finish()
        log = offline.tail_of(label, tail.lines, total_lines=tail.count)
        files.append(FileRead(label=label, kinds=["log"], looked=["log"], log=log))
    if gathered.kernel_logs:
        from podmortem.kernel import oom_parser

        for node, lines in gathered.kernel_logs.items():
            records = oom_parser.parse_lines(line.decode("utf-8", "replace") for line in lines)
            files.append(FileRead(label=f"dmesg of node {node}", kinds=["kernel"], looked=["kernel"],
                                  records=records))
    return Inputs(files=files)


def render_events(gathered: Gathered) -> str:
    """The pods' Events, as ``kubectl describe`` lists them, latest last."""
    lines = []
    for pod, events in gathered.events.items():
        if not events:
            continue
        lines.append(f"Events of pod {gathered.namespace}/{pod}:")
        for e in events:
            message = " ".join(str(e.get("message", "")).split())
            if len(message) > EVENT_MESSAGE_CHARS:
                message = message[: EVENT_MESSAGE_CHARS - 1] + "…"
            count = f" (x{e['count']})" if isinstance(e.get("count"), int) and e["count"] > 1 else ""
            what = f"{e.get('type', '')}  {e.get('reason', '')}{count}"
            lines.append(f"  {_event_time(e) or '-'}  {what}: {message}")
    return "\n".join(lines) + ("\n" if lines else "")


async def _read(args: argparse.Namespace, target: Target) -> Gathered:
    from podmortem.kube import config
    from podmortem.kube.session import ApiSession

    try:
        access = config.load(args.kubeconfig)
    except config.KubeconfigError as exc:
        raise TargetError(str(exc)) from None
    namespace = args.namespace or access.namespace or "default"
    from podmortem.cli import diagnose_stored

    image = args.node_kernel_log_image if getattr(args, "node_kernel_log", False) else None

    async def stored(wanted: list[tuple[str, str, bool]]) -> tuple[dict[tuple[str, str], list[bytes]],
                                                                      list[str]]:
        return await diagnose_stored.stored_tails(access, namespace, wanted, keep=LOG_TAIL_LINES)

    async with ApiSession(access) as api:
        return await gather(api, target, namespace, kernel_log_image=image, stored=stored)


def run(args: argparse.Namespace, target: Target) -> int:
    """Diagnose ``target`` from the API server; the exit code as ``podmortem diagnose`` gives it."""
    import asyncio
    import sys

    from podmortem.cli import diagnose_inputs
    from podmortem.cli.diagnose_exit import EXIT_INPUT

    try:
        gathered = asyncio.run(_read(args, target))
    except TargetError as exc:
        print(f"podmortem diagnose: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as exc:
        print(f"podmortem diagnose: cannot reach the API server: {exc}", file=sys.stderr)
        return EXIT_INPUT
    for note in gathered.notes:
        print(f"podmortem diagnose: {note}", file=sys.stderr)
    if gathered.stored_report:
        print(f"podmortem diagnose: {gathered.stored_report}", file=sys.stderr)
    code = diagnose_inputs.run(to_inputs(gathered), args)
    if not args.json:
        events = render_events(gathered)
        if events:
            sys.stdout.write("\n" + events)
    return code
