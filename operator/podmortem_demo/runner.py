"""``podmortem demo``'s orchestration: a cluster, the operator, the agent and a kubelet on one machine.

Three threads, as the pieces would be three programs on a real node:

- the cluster thread runs the emulated API (kmock), the node agent and the
  demo kubelet on one event loop;
- the operator thread runs the real operator (kopf) on a loop of its own: kopf
  treats every task on its loop as its own and would wait for kmock's at exit;
- the calling thread drives the story: it creates a TrainingJob per policy,
  waits for each step's effect, prints progress on stderr, checks the followed
  log line by line against what the process printed, and returns the results.

Nothing in the story is stubbed: the report in the TrainingJob status is the
operator's, from the agent's evidence; the only substitute, where the machine
cannot make memory cgroups or read /dev/kmsg, is the kernel record, and then
every place that shows it says "recorded".

Why one module of this size: it is the demo's one story, step by step; its parts (cluster, kubelet,
trainer, describe, summary) are modules of their own.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import json
import shutil
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

import kmock

from podmortem import memory_line, quantity
from podmortem.agent.settings import AgentSettings as NodeAgentSettings
from podmortem.errors import PodmortemError
from podmortem.logs.events import LogLine
from podmortem.logs.settings import FollowSettings
from podmortem.logs.storage import reading
from podmortem.logs.storage.store import LogNotFound, LogStore
from podmortem.memory_line.status import peak_of_limit, short_size
from podmortem.operator import jobs
from podmortem.operator.reporting import kernel_record
from podmortem.operator.settings import (
    TRAININGJOB_GROUP,
    TRAININGJOB_KIND,
    TRAININGJOB_PLURAL,
    TRAININGJOB_VERSION,
    AgentAccessSettings,
    OperatorSettings,
    PrometheusSettings,
)
from podmortem.reports.document import ReportDocument
from podmortem.reports.oom_record import OomKillRecord
from podmortem_demo import describe, kernel, trainer
from podmortem_demo import stored as stored_reports
from podmortem_demo.agent import KubeletPods, RunningAgent, running_agent
from podmortem_demo.cluster import DemoApi
from podmortem_demo.kubelet import DemoKubelet, KubeletHooks, KubeletSettings, PodRun
from podmortem_demo.threads import LoopThread, OperatorThread, StartFailed, wait_for

T = TypeVar("T")
MIB = 1024**2
NODE = "demo-node"
AGENT_NAMESPACE = "podmortem"
AGENT_LABELS = {"app.kubernetes.io/name": "podmortem", "app.kubernetes.io/component": "agent"}
TRAINER_CONTAINER = "trainer"
#: Seconds after a recorded-mode kill at which the agent gets the recorded record: the real agent
#: hands a record over after about a second of kernel-log quiet, so the report comes first here too.
RECORDED_HANDOVER_S = 1.0
#: What everything taken from the recorded kernel record is labelled with, in progress and describe.
RECORDED_LABEL = kernel.RECORDED_LABEL
#: What the pod's memory figures are where no memory cgroup holds the pod.
PSS_MEASURE = "summed charged PSS of the pod's processes (no memory cgroup: the demo kubelet's measure)"


class DemoFailed(PodmortemError, RuntimeError):
    """A step of the demo did not happen in time; ``str(exc)`` says which and what was seen."""


@dataclass(frozen=True)
class DemoSettings:
    """What ``podmortem demo`` runs; each default says why."""

    #: The pod's memory limit, bytes. 256 MiB: the trainer's fresh-fork run passes it in its fourth
    #: epoch (two copies of a ~120 MiB heap), the patched runs peak near 200 MiB.
    limit_bytes: int = 256 * MIB
    #: One run per policy, in order: the baseline that dies, then the runtime patch's policy.
    policies: tuple[str, ...] = (trainer.FRESH_FORK, "auto")
    #: "auto": real kernel where the machine allows it; "real" fails where it does not; "recorded".
    kernel: kernel.KernelWish = "auto"
    #: Trainer epochs (see `podmortem_demo.trainer.TrainerSettings`).
    epochs: int = trainer.TrainerSettings.epochs
    #: Namespace of the TrainingJobs.
    namespace: str = "default"
    #: Keep the work directory (log store, agent state) here instead of a removed temporary one.
    keep_dir: Path | None = None
    #: Seconds one run may take from creation to the checked log (each takes a few seconds).
    run_timeout_s: float = 60.0
    #: Lines after which the first log request is cut (see `KubeletSettings.cut_after_lines`).
    cut_after_lines: tuple[int, ...] = (300,)
    #: Port of the operator's log server (0: a free one) and the base URL it writes in front of the
    #: report links (``status.failureReport.reportUrl``; empty: the path alone). ``--serve`` sets both,
    #: so that the link in the status opens in a browser.
    log_http_port: int = 0
    log_base_url: str = ""
    #: Print each job's whole describe; by default its reference parts are one line each
    #: (`describe.BRIEF_HIDDEN`), which keeps a run's stderr to a screenful or two.
    full_describe: bool = False


@dataclass
class LogCheck:
    """The followed log against what the process printed: every line exactly once, in order."""

    produced: int
    delivered: int
    lost: int
    duplicated: int
    cuts: int
    in_order: bool

    def to_json(self) -> dict[str, int]:
        return {
            "produced": self.produced,
            "delivered": self.delivered,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "cuts": self.cuts,
        }


@dataclass
class RunResult:
    """One TrainingJob's run, for the summary and ``--json``."""

    policy: str
    training_job: dict[str, Any]
    log: LogCheck
    kernel: kernel.KernelMode
    exit_code: int | None
    reason: str
    #: The pod's peak over the whole run: the cgroup's max usage, or the demo kubelet's PSS sum.
    peak_bytes: int | None
    #: The pod's memory limit, bytes (None: none).
    limit_bytes: int | None = None
    memory_lines: list[str] = field(default_factory=list)
    kernel_record: OomKillRecord | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def peak_measure(self) -> str:
        """What `peak_bytes` measured, in words (the summary and the progress say it)."""
        return peak_measure(self.kernel)

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "trainingJob": self.training_job,
            "log": self.log.to_json(),
            "kernel": self.kernel,
            # The job's own Events as stored (what `kubectl describe` lists): type, reason, message.
            "events": [
                {k: e.get(k) for k in ("type", "reason", "message")} for e in self.events
            ],
        }


def peak_measure(mode: kernel.KernelMode) -> str:
    """What the pod's peak over a run is: the cgroup's max usage, or the sampled PSS sum."""
    return "cgroup max usage" if mode == "real" else "summed PSS, sampled by the demo kubelet and the trainer"


def _sampled_peak(kubelet_peak: int | None, lines: list[str]) -> int | None:
    """Without a cgroup the peak is sampled twice, by the kubelet's watchdog and the trainer's own
    sampler (its memory lines); either can miss a spike the other saw, so the run's peak is the
    higher of the two, never below what a memory line already showed."""
    seen = [m.pod.peak_bytes for m in map(_parse_line, lines) if m is not None and m.pod is not None]
    peaks = [p for p in (kubelet_peak, *seen) if p]
    return max(peaks) if peaks else kubelet_peak


def _parse_line(line: str) -> memory_line.MemoryLine | None:
    try:
        return memory_line.parse(line)
    except memory_line.MemoryLineError:
        return None


def check_log(
    produced: list[tuple[int, bytes]], delivered: list[tuple[int, bytes]], *, cuts: int
) -> LogCheck:
    """Compare line by line (timestamp and bytes): lost, duplicated, and whether the order held."""
    want, got = collections.Counter(produced), collections.Counter(delivered)
    return LogCheck(
        produced=len(produced),
        delivered=len(delivered),
        lost=sum((want - got).values()),
        duplicated=sum((got - want).values()),
        cuts=cuts,
        in_order=produced == delivered,
    )


def evaluator_for(policy: str) -> str:
    """The baseline keeps Pointcept's evaluator (its masks grow each epoch); a patched run has the whole
    fix: the runtime patch's lean evaluator as well as its loader policy."""
    return trainer.POINTCEPT if policy == trainer.FRESH_FORK else trainer.LEAN


def training_job(name: str, *, namespace: str, policy: str, limit_bytes: int, epochs: int) -> dict[str, Any]:
    """The TrainingJob the demo submits: the trainer under a memory limit, with the given loader policy
    (and the evaluator that goes with it, `evaluator_for`)."""
    limit = quantity.format_mib(limit_bytes)
    return {
        "apiVersion": f"{TRAININGJOB_GROUP}/{TRAININGJOB_VERSION}",
        "kind": TRAININGJOB_KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "pointgroup-demo"}},
        "spec": {
            "followLogs": True,
            "template": {
                "metadata": {"labels": {"app": "pointgroup-demo"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": TRAINER_CONTAINER,
                            "image": "podmortem-demo/trainer:local",
                            "command": ["python", "-m", "podmortem_demo.trainer"],
                            "args": [
                                "--val-policy", policy, "--evaluator", evaluator_for(policy),
                                "--epochs", str(epochs),
                            ],
                            "resources": {"requests": {"memory": limit}, "limits": {"memory": limit}},
                        }
                    ],
                },
            },
        },
    }


@dataclass
class Serving:
    """What `Demo.run` hands its ``then`` after the story: the cluster and the operator still run."""

    choice: kernel.KernelChoice
    results: list[RunResult]
    #: The emulated API's base URL (plain HTTP; any token or none is accepted).
    api_url: str
    #: The operator's log server (``/logs/...``, ``/reports/...``), on 127.0.0.1, without auth.
    log_url: str
    workdir: Path
    namespace: str
    #: The cluster thread, to reach `api` on its loop (``cluster.sync``).
    cluster: LoopThread
    api: DemoApi
    #: What stopped, if the cluster or the operator did (None: both run).
    stopped: Callable[[], str | None]


class Progress:
    """Progress lines on stderr, each with the seconds since the current run began."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream
        self.t0 = time.monotonic()
        self._lock = threading.Lock()

    def restart(self) -> None:
        self.t0 = time.monotonic()

    def say(self, text: str, *, stamp: bool = True) -> None:
        if self.stream is None:
            return
        prefix = f"[{time.monotonic() - self.t0:5.1f}s] " if stamp else ""
        with self._lock:
            for line in text.splitlines() or [""]:
                self.stream.write(prefix + line + "\n")
                prefix = " " * len(prefix)
            self.stream.flush()


class _Cluster(LoopThread):
    """The cluster thread: emulated API, agent and kubelet on one loop, until `stop`."""

    def __init__(
        self, *, choice: kernel.KernelChoice, workdir: Path, demo: DemoSettings, progress: Progress
    ) -> None:
        super().__init__(name="demo-cluster")
        self.choice = choice
        self.workdir = workdir
        self.demo = demo
        self.progress = progress
        self.api: DemoApi
        self.url = ""
        self.agent: RunningAgent
        self.kubelet: DemoKubelet
        self.pods = KubeletPods()
        self.memory_lines: dict[str, list[str]] = collections.defaultdict(list)
        self._handovers: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        real = self.choice.mode == "real"
        token = self.workdir / "agent-token"
        token.write_text("demo-agent-token\n")
        agent_settings = NodeAgentSettings(
            node_name=NODE,
            poll_interval_s=0.5,
            state_dir=self.workdir / "agent",
            token_path=token,
            listen_host="127.0.0.1",
            listen_port=0,
            metrics_port=0,
            kernel_log_source="kmsg" if real else "off",
        )
        recorded_path = kernel.recorded_cgroup_path() if not real else None
        api = DemoApi()
        async with api, kmock.Server(api) as server, running_agent(agent_settings, pods=self.pods) as agent:
            self.api, self.url, self.agent = api, str(server.url).rstrip("/"), agent
            await self._post(
                f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"podmortem-agent-{NODE}",
                        "namespace": AGENT_NAMESPACE,
                        "labels": AGENT_LABELS,
                    },
                    "spec": {
                        "nodeName": NODE,
                        "containers": [{"name": "agent", "image": "podmortem:local", "args": ["agent"]}],
                    },
                    "status": {"phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1"},
                },
            )
            hooks = KubeletHooks(started=self._started, line=self._line, exited=self._exited)
            settings = KubeletSettings(node_name=NODE, cut_after_lines=self.demo.cut_after_lines)
            kubelet_dir = self.workdir / "kubelet"
            kubelet_dir.mkdir(exist_ok=True)
            async with DemoKubelet(
                api=api,
                url=self.url,
                settings=settings,
                cgroup_root=self.choice.cgroup_root,
                workdir=kubelet_dir,
                hooks=hooks,
                static_cgroup_path=self.recorded_cgroup_for if recorded_path else None,
            ) as kubelet:
                self.kubelet = kubelet
                self.ready()
                await self.stopped()
                for task in self._handovers:
                    task.cancel()
                # Watches a user left open (`kubectl get tj -w` on `--serve`'s kubeconfig) would hold
                # the server's shutdown for a minute; the operator's are closed by now.
                api.close_watches()

    def recorded_cgroup_for(self, run: PodRun) -> str | None:
        """Without cgroups: the cgroup the agent is told a pod has, so the recorded record matches it.
        Here every pod (one per run); ``demo --distributed`` names only the rank that is OOM-killed."""
        return str(kernel.recorded_cgroup_path())

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        client = self.api.servers[0].client
        async with client.post(
            path, data=json.dumps(body), headers={"Content-Type": "application/json"}
        ) as r:
            text = await r.text()
            if r.status >= 400:
                raise DemoFailed(f"POST {path}: HTTP {r.status}: {text[:300]}")
            result: dict[str, Any] = json.loads(text)
            return result

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call(self._post(path, body))

    # -- kubelet hooks (on the cluster loop) ------------------------------------------------------

    def _started(self, run: PodRun) -> None:
        self.pods.add(uid=run.uid, namespace=run.namespace, name=run.name, cgroup_path=run.cgroup_path)
        limit = quantity.format_mib(run.limit_bytes) if run.limit_bytes else "none"
        if run.cgroup is not None:
            where = f"in memory cgroup {run.cgroup_path} (v{run.cgroup.version}, limit {limit})"
        else:
            where = (
                f"without a memory cgroup: the demo kubelet enforces the {limit} limit itself "
                "(summed anonymous PSS, SIGKILL to the largest process)"
            )
        self.progress.say(f"pod {run.namespace}/{run.name} starts {where}")

    def _line(self, run: PodRun, text: bytes) -> None:
        line = text.decode("utf-8", errors="replace")
        if memory_line.MARKER in line:
            self.memory_lines[run.uid].append(line)
            self.progress.say(f"  {line}")
        elif line.startswith(
            ("validation loader:", "evaluator:", "pod memory:", "RuntimeError", "training finished")
        ):
            self.progress.say(f"  {line}")

    def _exited(self, run: PodRun) -> None:
        """With the real kernel, nothing: the agent reads the record from /dev/kmsg in its own time.

        Recorded: the agent is handed the bundled real record (whose cgroup it was told is this pod's)
        a kernel-log quiet period after the kill, as the real agent would hand it over.
        """
        if self.choice.mode == "real" or run.reason != "OOMKilled":
            return
        task = asyncio.get_running_loop().create_task(
            self._hand_over_recorded(run.limit_bytes), name="demo-recorded"
        )
        self._handovers.add(task)
        task.add_done_callback(self._handovers.discard)

    async def _hand_over_recorded(self, limit_bytes: int | None) -> None:
        await asyncio.sleep(RECORDED_HANDOVER_S)
        await self.agent.agent.sample_once()
        # Scaled to the pod's limit, and its source says so (`kernel.recorded_records`).
        self.agent.agent.on_records(kernel.recorded_records(limit_bytes))


async def _stored_lines(
    store: LogStore, *, namespace: str, pod: str, container: str, within_s: float
) -> list[tuple[int, bytes]] | None:
    """The followed log once the follower has stored its end (or after ``within_s``); None if none."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        try:
            inst = store.find(namespace=namespace, pod=pod, container=container)
        except LogNotFound:
            inst = None
        if inst is not None and inst.ended is not None:
            break
        if loop.time() > deadline:
            if inst is None:
                return None
            break
        await asyncio.sleep(0.05)
    items = await reading.read_lines(inst)
    return [(item.ts_ns, item.text) for item in items if isinstance(item, LogLine)]


@contextlib.contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    path = Path(tempfile.mkdtemp(prefix="podmortem-demo-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


#: The operator's log follower in the demo: quick reconnects, so a stream cut costs little time.
DEMO_FOLLOW = FollowSettings(read_timeout_s=10.0, backoff_min_s=0.05, backoff_max_s=0.5)


def say_kernel(choice: kernel.KernelChoice, progress: Progress) -> None:
    """The first progress line: the real kernel and where, or RECORDED and why."""
    if choice.mode == "real":
        assert choice.cgroup_root is not None
        progress.say(
            f"kernel: real (memory cgroups v{choice.cgroup_root.version} at {choice.cgroup_root.path}, "
            "OOM records from /dev/kmsg)",
            stamp=False,
        )
        return
    why = "; ".join(choice.reasons) or "--kernel recorded was asked for"
    progress.say(f"kernel: RECORDED — {why}.", stamp=False)
    progress.say(
        f"  The pod limit is enforced by the demo kubelet, and the kernel record the agent serves is "
        f"a recorded real one ({kernel.RECORDED_EXAMPLE}: {kernel.RECORDED_SOURCE}).",
        stamp=False,
    )


class Demo:
    """Runs the story once per policy and returns what happened (see `run`)."""

    def __init__(self, settings: DemoSettings | None = None, *, progress: TextIO | None = None) -> None:
        self.settings = settings or DemoSettings()
        self.progress = Progress(progress)

    def run(
        self, *, then: Callable[[Serving], None] | None = None
    ) -> tuple[kernel.KernelChoice, list[RunResult]]:
        """The story once per policy; then ``then``, if given, while everything still runs."""
        s = self.settings
        choice = kernel.choose(s.kernel)
        say = self.progress.say
        say_kernel(choice, self.progress)
        results: list[RunResult] = []
        with _workdir(s.keep_dir) as workdir:
            cluster = _Cluster(choice=choice, workdir=workdir, demo=s, progress=self.progress)
            try:
                cluster.start()
            except StartFailed as exc:
                raise DemoFailed(str(exc)) from exc
            operator: OperatorThread | None = None
            try:
                operator = OperatorThread(
                    url=cluster.url,
                    settings=self._operator_settings(cluster, workdir),
                    follow=DEMO_FOLLOW,
                    name="demo-operator",
                )
                try:
                    operator.start()
                except StartFailed as exc:
                    raise DemoFailed(str(exc)) from exc
                say(
                    f"emulated Kubernetes API at {cluster.url}; node agent on "
                    f"127.0.0.1:{cluster.agent.port}; operator (kopf) and the demo kubelet for node {NODE} "
                    f"running; work dir {workdir}",
                    stamp=False,
                )
                for i, policy in enumerate(s.policies, 1):
                    results.append(self._one(cluster, operator, policy, i, choice))
                if then is not None:
                    running = operator

                    def stopped() -> str | None:
                        if cluster.error is not None:
                            return f"the emulated cluster stopped: {cluster.error!r}"
                        if running.error is not None:
                            return f"the operator stopped: {running.error!r}"
                        return None

                    then(Serving(choice=choice, results=results, api_url=cluster.url,
                                 log_url=operator.running[0].log_url, workdir=workdir, namespace=s.namespace,
                                 cluster=cluster, api=cluster.api, stopped=stopped))
            finally:
                if operator is not None:
                    operator.stop()
                cluster.stop()
        return choice, results

    def _report_page(self, operator: OperatorThread, name: str, report: ReportDocument) -> None:
        """Say where the operator serves the report's page; with ``--keep-dir``, save the page there."""
        path = report.report_url or f"/reports/{self.settings.namespace}/{name}"
        url = operator.running[0].log_url + path if path.startswith("/") else path
        keep = self.settings.keep_dir
        if keep is None:
            self.progress.say(f"report page: {url} (served while the demo runs; --keep-dir saves it)")
            return
        out = keep / "reports" / f"{name}.html"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                page = response.read()
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(page)
        except OSError as exc:
            self.progress.say(f"report page: {url} (not saved: {exc})")
            return
        self.progress.say(f"report page: {url}, saved to {out}")

    def _operator_settings(self, cluster: _Cluster, workdir: Path) -> OperatorSettings:
        return OperatorSettings(
            agent=AgentAccessSettings(
                namespace=AGENT_NAMESPACE,
                port=cluster.agent.port,
                token_path=workdir / "agent-token",
                label_selector=",".join(f"{k}={v}" for k, v in AGENT_LABELS.items()),
                # Ask again for a late kernel record every 0.25-1 s: the demo waits for it to show.
                record_retry_min_s=0.25,
                record_retry_max_s=1.0,
            ),
            prometheus=PrometheusSettings(url=None),
            store_dir=workdir / "logs",
            foreign_kinds=(),
            listen_host="127.0.0.1",
            metrics_port=0,
            health_port=0,
            log_http_port=self.settings.log_http_port,
            log_base_url=self.settings.log_base_url,
            log_http_auth=False,
            last_log_line_interval_s=1.0,
        )

    def _one(
        self,
        cluster: _Cluster,
        operator: OperatorThread,
        policy: str,
        index: int,
        choice: kernel.KernelChoice,
    ) -> RunResult:
        s = self.settings
        say = self.progress.say
        name = f"pointgroup-{policy}"
        pod = jobs.pod_name(name)
        path = (
            f"/apis/{TRAININGJOB_GROUP}/{TRAININGJOB_VERSION}/namespaces/{s.namespace}/{TRAININGJOB_PLURAL}"
        )
        say("", stamp=False)
        say(f"== run {index}/{len(s.policies)}: validation loader policy {policy}", stamp=False)
        self.progress.restart()
        started = time.monotonic()
        deadline = started + s.run_timeout_s
        cluster.create(
            path,
            training_job(
                name, namespace=s.namespace, policy=policy, limit_bytes=s.limit_bytes, epochs=s.epochs
            ),
        )
        say(
            f"TrainingJob {s.namespace}/{name} created: the trainer under a "
            f"{quantity.format_mib(s.limit_bytes)} memory limit; the operator creates its pod"
        )
        run = cluster.call(
            cluster.kubelet.wait_for(s.namespace, pod, within_s=s.run_timeout_s), timeout=s.run_timeout_s + 5
        )
        cluster.call(
            asyncio.wait_for(run.done.wait(), max(1.0, deadline - time.monotonic())),
            timeout=s.run_timeout_s + 5,
        )
        if run.watchdog is not None:
            run.peak_bytes = _sampled_peak(run.peak_bytes, cluster.memory_lines.get(run.uid, []))
        oom = run.reason == "OOMKilled"
        how = (
            f", cgroup oom_kill count {run.oom_kills}"
            if run.cgroup is not None
            else (
                f", killed by the demo kubelet's limit (pid {run.watchdog.kill.pid})"
                if run.watchdog is not None and run.watchdog.kill is not None
                else ""
            )
        )
        # No peak here: the pod's one peak is the one the operator names in status.memory (from the
        # kernel's record at a kill, else the last memory line), printed below once it is in.
        say(f"container exited {run.exit_code} ({run.reason}{how})")

        def stored() -> dict[str, Any] | None:
            found = cluster.sync(
                lambda: cluster.api.stored(
                    f"{TRAININGJOB_GROUP}/{TRAININGJOB_VERSION}/{TRAININGJOB_PLURAL}", s.namespace, name
                )
            )
            return found[0] if found else None

        def ended() -> dict[str, Any] | None:
            """The job once Succeeded, or Failed with a report (the first, maybe without the record)."""
            obj = stored()
            st = (obj or {}).get("status") or {}
            done = st.get("phase") == "Succeeded" or (st.get("phase") == "Failed" and st.get("failureReport"))
            return obj if done else None

        def settled() -> dict[str, Any] | None:
            """The job once its report no longer waits for the kernel record (attached or given up)."""
            obj = ended()
            report = stored_reports.read(obj)
            return obj if obj is not None and (report is None or not report.pending_record) else None

        seen = time.monotonic()
        tj = _wait(ended, until=deadline, what=f"TrainingJob {name} to end (Succeeded, or Failed, reported)")
        report = stored_reports.read(tj)
        recorded = f" [{RECORDED_LABEL}]" if choice.mode == "recorded" else ""
        if report is not None:
            pending = report.pending_record
            say(
                f"failure report in TrainingJob status {time.monotonic() - seen:.1f} s after the kubelet "
                f"wrote the termination: verdict {report.report.verdict} "
                f"({stored_reports.finding_codes(report)}); "
                f"kernel record {report.kernel_record_state}"
                + (
                    " (not at the node agent yet: the report and its Event say so; the operator asks "
                    "again and patches the record in)"
                    if pending
                    else ""
                )
            )
            if pending:
                tj = _wait(settled, until=deadline, what=f"the kernel record in TrainingJob {name}'s report")
                report = stored_reports.read(tj) or report
                state = report.kernel_record_state
                say(
                    f"the operator asked the agent again: kernel record {state}"
                    + (recorded if state == kernel_record.ATTACHED else "")
                    + f" {time.monotonic() - seen:.1f} s after the termination; report updated"
                    + (" from it" if state == kernel_record.ATTACHED else "")
                    + f": verdict {report.report.verdict} ({stored_reports.finding_codes(report)})"
                )
        else:
            say(f"TrainingJob {(tj.get('status') or {}).get('phase')}")
        evidence = cluster.call(cluster.agent.kernel_records_for(run.uid, within_s=0.0))
        record = evidence.kernel_records[-1] if evidence is not None else None
        if oom:
            say(_record_line(record, choice.mode))
            latest = stored_reports.read(tj)
            evidence_line = _memory_evidence_line(latest) if latest is not None else None
            if evidence_line:
                say(evidence_line)
        say(pod_peak_line(tj))
        delivered = operator.call(
            _stored_lines(
                operator.running[0].store,
                namespace=s.namespace,
                pod=pod,
                container=run.container,
                within_s=max(1.0, deadline - time.monotonic()),
            ),
            timeout=s.run_timeout_s + 5,
        )
        check = check_log(run.produced, delivered or [], cuts=run.cuts_served)
        tj = copy.deepcopy(stored() or tj)
        reconnects = ((tj.get("status") or {}).get("log") or {}).get("reconnects")
        say(
            f"log followed through {check.cuts} stream cut(s): produced {check.produced} lines, delivered "
            f"{check.delivered}, lost {check.lost}, duplicated {check.duplicated}"
            + (", in order" if check.in_order else ", OUT OF ORDER")
            + (f"; the follower reconnected {reconnects} time(s)" if reconnects is not None else "")
        )
        events = cluster.sync(
            lambda: [
                e
                for e in cluster.api.stored("v1/events", s.namespace)
                if (e.get("involvedObject") or {}).get("name") == name
            ]
        )
        result = RunResult(
            policy=policy,
            training_job=tj,
            log=check,
            kernel=choice.mode,
            exit_code=run.exit_code,
            reason=run.reason,
            peak_bytes=run.peak_bytes,
            limit_bytes=run.limit_bytes,
            memory_lines=list(cluster.memory_lines.get(run.uid, [])),
            kernel_record=record,
            events=copy.deepcopy(events),
            seconds=time.monotonic() - started,
        )
        if report is not None:
            self._report_page(operator, name, report)
        say(f"kubectl describe trainingjob {name}", stamp=True)
        labels = recorded_labels(tj) if choice.mode == "recorded" else describe.Labels()
        hide = frozenset() if self.settings.full_describe else describe.BRIEF_HIDDEN
        say(describe.describe(tj, events=events, labels=labels, hide=hide), stamp=False)
        return result


def recorded_labels(tj: dict[str, Any]) -> describe.Labels:
    """What `describe` marks in recorded mode besides what the object says itself: each part of the
    report taken from the recorded kernel record, and the pod memory figures (no cgroup: PSS sums).

    The ``Failed`` condition, the ``KernelRecordAttached`` Event and ``failureReport.record_source``
    carry the label in the object (the operator writes the record's ``source``), so a real ``kubectl
    describe`` shows it too; they are not marked again here."""
    report = stored_reports.read(tj)
    attached = report is not None and report.kernel_record_state == kernel_record.ATTACHED
    mark = f"[{RECORDED_LABEL}]"
    fields: dict[tuple[str, ...], str] = {("status", "memory"): f"[{PSS_MEASURE}]"}
    if attached:
        base = ("status", "failureReport")
        for key in ("verdict", "tasks", "findings", "kill", "cgroup"):
            fields[(*base, key)] = mark
        fields[(*base, "evidence", "kernelRecord")] = mark
    return describe.Labels(fields=fields)


def pod_peak_words(tj: dict[str, Any]) -> str:
    """``256Mi/256Mi (100%, kernel) from the kernel's OOM record at the kill``: the TrainingJob's one peak
    (``status.memory.peakOfLimit``, the Peak/Limit column) and where it came from (``peakSource``)."""
    memory = (tj.get("status") or {}).get("memory") or {}
    figure = memory.get("peakOfLimit")
    if not figure:
        return "? (no memory line and no kernel record)"
    source = memory.get("peakSource")
    return f"{figure} from {source}" if source else str(figure)


def pod_peak_line(tj: dict[str, Any]) -> str:
    """The progress line naming the pod's peak, as every surface names it."""
    where = "status.memory and the Peak/Limit column"
    if (tj.get("status") or {}).get("failureReport"):
        where += ", the report's evidence.peak and its page"
    return f"pod peak {pod_peak_words(tj)} (the same in {where})"


def peak_text(peak: int, limit: int | None, measure: str) -> str:
    """``256Mi/256Mi (100%; cgroup max usage)``: `peak_of_limit`'s figure, and what measured it."""
    figure = peak_of_limit(peak, limit) or ""
    return f"{figure[:-1]}; {measure})" if figure.endswith(")") else f"{figure} ({measure})"


def _peak_words(peak: int | None, limit: int | None, mode: kernel.KernelMode, lines: list[str]) -> str:
    """``; pod peak 256Mi/256Mi (100%; cgroup max usage); last memory line (epoch 2): pod peak 227Mi``."""
    if not peak:
        return ""
    text = f"; pod peak {peak_text(peak, limit, peak_measure(mode) + ' over the run')}"
    last = _last_memory_line(lines)
    if last is not None and last.pod is not None:
        text += f"; last memory line (epoch {last.epoch}): pod peak {short_size(last.pod.peak_bytes)}"
    return text


def _last_memory_line(lines: list[str]) -> memory_line.MemoryLine | None:
    return next((m for m in map(_parse_line, reversed(lines)) if m is not None), None)


def _memory_evidence_line(report: ReportDocument) -> str | None:
    """The report's sampled working set, named as what it is: samples under the pod's peak, not a peak."""
    ws = report.evidence.working_set
    highest = ws.peak_bytes
    if not highest:
        return None
    return (
        f"working set in the report: {len(ws.points)} sample(s) from {ws.source or '?'}, the highest "
        f"{short_size(highest)} (usage less inactive file, sampled: it misses a rise between two "
        "samples; the page's curve ends at the kernel's usage at the kill)"
    )


def _record_line(record: OomKillRecord | None, mode: kernel.KernelMode) -> str:
    if record is None:
        return (
            "kernel: no OOM record of this pod reached the agent (the report says what it could "
            "find without one)"
        )
    label = "real, read by the agent from /dev/kmsg" if mode == "real" else (record.source or RECORDED_LABEL)
    victim = f"pid {record.victim_pid} ({record.victim_comm})"
    memcg = record.oom_memcg or "?"
    counter = record.counters.get("memory")
    usage = (
        f", usage {counter.usage_kb // 1024}Mi of limit {counter.limit_kb // 1024}Mi"
        if counter is not None
        else ""
    )
    return f"kernel OOM kill ({label}): {victim} in memcg {memcg}{usage}"


def _wait(probe: Callable[[], T | None], *, until: float, what: str, poll_s: float = 0.05) -> T:
    try:
        return wait_for(probe, what=what, timeout=max(0.0, until - time.monotonic()), poll_s=poll_s)
    except TimeoutError as exc:
        raise DemoFailed(str(exc)) from exc
