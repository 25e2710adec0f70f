"""A trainer-like program that fails the way the PointGroup post-mortem's trainer did.

``podmortem demo`` runs it as the training pod's container, under a real memory
limit. Each epoch it trains (progress lines), then evaluates: a validation
loader's workers load scenes while the evaluator keeps a full-size mask per
proposal for every scene (the leak: it grows each epoch) and rewrites the masks
it already kept. It ends every epoch with ``podmortem_runtime``'s memory line.

With ``--val-policy fresh-fork`` (Pointcept's validation loader: workers but no
``persistent_workers``) the workers are forked at every evaluation from the
grown trainer, so each rewrite leaves the old pages to the workers: a second
copy of the heap, charged to the same cgroup, and the kernel OOM-kills the pod.
Any other value is a policy of ``podmortem_runtime.val_loader`` ("none",
"persistent", "forkserver", "spawn", "auto"), resolved by its own rule; with it
the same job completes under the same limit.

``--evaluator`` picks what evaluation keeps. ``pointcept`` (the default, the
post-mortem's evaluator) keeps every proposal's full-size mask until AP runs, so
the heap grows by ``scenes × proposals × mask`` bytes an epoch. ``lean`` is the
runtime patch's evaluator (``podmortem_runtime.insseg``): each scene's masks are
counted against its ground truth as they come and dropped, and only the counts
(a few hundred bytes a scene) are kept for AP, so the heap does not grow. The
fix the demo shows is both: the lean evaluator and a loader policy.

torch is not needed: the workers are ``multiprocessing`` processes with the
context the policy names, and the heap is numpy arrays. Run it with
``python -m podmortem_demo.trainer --help``.

Where the demo kubelet could not give the pod a memory cgroup it says so in
``PODMORTEM_DEMO_PSS_LIMIT_BYTES`` (see `podmortem_demo.watchdog`): the memory
line's ``pod`` figures are then the summed charged PSS of this process tree
against that limit (`TreePss`), not the host cgroup the process happens to sit
in, and an evaluation step that passes the limit waits for the kubelet's kill.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from podmortem_demo import watchdog
from podmortem_runtime import insseg, loader_policy, memory, own_cgroup, val_loader
from podmortem_runtime.insseg import association

MIB = 1024**2
#: The baseline policy: Pointcept's validation loader (workers forked anew at every evaluation).
FRESH_FORK = "fresh-fork"
POLICIES = (FRESH_FORK, *loader_policy.POLICIES)
#: Pointcept's evaluator: a full-size mask kept per proposal of every scene (grows each epoch).
POINTCEPT = "pointcept"
#: The runtime patch's evaluator: per-scene counts kept, masks dropped (flat).
LEAN = "lean"
EVALUATORS = (POINTCEPT, LEAN)
#: The demo scenes' classes (index 0 is the ignored "void" class, as in ScanNet's lists).
CLASS_NAMES = ("void", "chair", "table", "door", "window")


@dataclass(frozen=True)
class TrainerSettings:
    """The size and pace of the run. Defaults fit a 256 MiB pod limit and finish in a few seconds."""

    #: Epochs to run. With the defaults, fresh-fork is killed in epoch 3 and the others finish epoch 3.
    epochs: int = 4
    #: Training steps (one log line each) per epoch: enough lines for a log with a cut in the middle.
    steps: int = 250
    #: Seconds to sleep per training step, so the log is written over time, like a real trainer's.
    step_s: float = 0.002
    #: Validation scenes per evaluation; each is loaded by a worker.
    scenes: int = 8
    #: Proposals per scene; the evaluator keeps one full-size mask for each (the leak).
    proposals: int = 5
    #: Bytes of one proposal mask (one bool per point of the scene). 1 MiB × 5 × 8 = 40 MiB per epoch.
    mask_bytes: int = MIB
    #: Validation loader workers.
    workers: int = 2
    #: Bytes of one scene as a worker loads it (points and features).
    scene_bytes: int = 256 * 1024
    #: Without a memory cgroup: seconds an evaluation step past the limit waits for the demo
    #: kubelet's kill (it looks every 20 ms) before going on.
    charge_wait_s: float = 10.0


# -- the pod's memory where no cgroup holds it ------------------------------------------------------


class TreePss(own_cgroup.OwnCgroup):
    """The pod's memory without a memory cgroup: this process tree's summed charged PSS, the demo
    kubelet's own measure, against the limit it enforces; read like a cgroup by the memory line.

    The kernel keeps no peak of it, so the line says ``seen peak`` (what the sampler saw).
    """

    def __init__(self, limit_bytes: int | None, *, pid: int | None = None) -> None:
        self.pid = os.getpid() if pid is None else pid
        super().__init__(Path(f"/proc/{self.pid}"), version=1, mount_point=Path("/proc"))
        self.limit_bytes = limit_bytes

    def __repr__(self) -> str:
        return f"TreePss(pid={self.pid}, limit_bytes={self.limit_bytes})"

    def usage(self) -> int:
        return sum(watchdog.tree_charged_pss(self.pid).values())

    def peak(self) -> int | None:
        return None

    def limit(self) -> int | None:
        return self.limit_bytes

    def stat(self) -> dict[str, int]:
        return {}

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> TreePss | None:
        """The account the demo kubelet asked for in ``PSS_LIMIT_ENV``; None inside a real cgroup."""
        value = (os.environ if environ is None else environ).get(watchdog.PSS_LIMIT_ENV)
        if value is None:
            return None
        return cls(int(value) if value.strip() else None)


# -- the validation loader's workers ----------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _worker_main(
    conn: multiprocessing.connection.Connection,
    trainer_pid: int,
    scene_bytes: int,
    malloc_threshold: int | None,
) -> None:
    """Load scenes on request until told to stop (``None``) or the trainer is gone (as torch's do)."""
    if malloc_threshold is not None:
        val_loader.set_malloc_mmap_threshold(malloc_threshold)
    while True:
        try:
            while not conn.poll(0.5):
                if not _alive(trainer_pid):
                    return
            scene = conn.recv()
        except EOFError:
            return
        if scene is None:
            return
        rng = np.random.default_rng(scene)
        conn.send(rng.random(scene_bytes // 8))


class WorkerDied(RuntimeError):
    """A worker was killed while loading (e.g. the OOM killer chose it); like torch's DataLoader error."""


WorkerContext = (
    multiprocessing.context.ForkContext
    | multiprocessing.context.ForkServerContext
    | multiprocessing.context.SpawnContext
)


def worker_context(method: str) -> WorkerContext:
    """The multiprocessing context a resolved policy starts its workers with."""
    if method == "fork":
        return multiprocessing.get_context("fork")
    if method == "forkserver":
        return multiprocessing.get_context("forkserver")
    if method == "spawn":
        return multiprocessing.get_context("spawn")
    raise ValueError(f"no worker start method {method!r}")


class SceneLoader:
    """``workers`` processes of a multiprocessing context, each serving scene loads over a pipe."""

    def __init__(
        self,
        *,
        context: WorkerContext,
        workers: int,
        scene_bytes: int,
        malloc_threshold: int | None,
    ) -> None:
        self._conns: list[multiprocessing.connection.Connection] = []
        self._procs: list[multiprocessing.process.BaseProcess] = []
        for _ in range(workers):
            ours, theirs = context.Pipe()
            proc = context.Process(
                target=_worker_main, args=(theirs, os.getpid(), scene_bytes, malloc_threshold), daemon=True
            )
            proc.start()
            theirs.close()
            self._conns.append(ours)
            self._procs.append(proc)

    def load(self, scene: int) -> Any:
        i = scene % len(self._conns)
        try:
            self._conns[i].send(scene)
            return self._conns[i].recv()
        except (EOFError, OSError) as exc:
            proc = self._procs[i]
            proc.join(1.0)
            raise WorkerDied(
                f"DataLoader worker (pid {proc.pid}) exited unexpectedly with exit code {proc.exitcode}"
            ) from exc

    def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in self._procs:
            proc.join(5.0)
        for conn in self._conns:
            conn.close()


def load_in_process(scene: int, scene_bytes: int) -> Any:
    rng = np.random.default_rng(scene)
    return rng.random(scene_bytes // 8)


# -- the trainer ------------------------------------------------------------------------------------


class Trainer:
    """Training progress, a leaking evaluator, and the validation loader the policy asks for."""

    def __init__(self, settings: TrainerSettings, policy: str, *, evaluator: str = POINTCEPT) -> None:
        self.s = settings
        self.policy = policy
        self.evaluator = evaluator
        #: The evaluator's leak: a full-size mask per proposal for every validation scene, never freed.
        self.kept_masks: list[Any] = []
        #: The lean evaluator's whole state: one scene's counts per evaluated scene (of this epoch).
        self.scene_counts: list[insseg.Scene] = []
        self.resolved: str = FRESH_FORK
        self.persistent: SceneLoader | None = None
        #: The pod's memory where no cgroup holds it (see `TreePss`); None in a real memory cgroup.
        self.account: TreePss | None = TreePss.from_env()
        self.sampler: memory.PeakSampler | None = None

    def say(self, text: str) -> None:
        print(text, flush=True)

    def start(self) -> None:
        if self.policy == FRESH_FORK:
            self.resolved = FRESH_FORK
            reason = "baseline: workers forked anew at every evaluation (Pointcept's validation loader)"
        else:
            choice = val_loader.choose_policy(self.policy, num_workers=self.s.workers)  # type: ignore[arg-type]
            self.resolved, reason = choice.policy, choice.reason
        self.say(f"validation loader: {self.resolved} ({reason}), {self.s.workers} workers")
        if self.resolved == "persistent":
            # Forked now, while the trainer is small; kept for the whole run.
            self.persistent = SceneLoader(
                context=worker_context("fork"),
                workers=self.s.workers,
                scene_bytes=self.s.scene_bytes,
                malloc_threshold=val_loader.DEFAULT_MALLOC_MMAP_THRESHOLD,
            )
        if self.account is not None:
            cap = self.account.limit_bytes
            limit = "no" if cap is None else memory.format_bytes(cap)
            self.say(
                f"pod memory: no memory cgroup holds this pod; its figures are the summed charged PSS of "
                f"this process tree, against the {limit} limit the demo kubelet enforces"
            )
            self.sampler = memory.PeakSampler(self.account, interval_s=0.05).start()
        else:
            self.sampler = memory.start_sampler(interval_s=0.05)
        if self.evaluator == LEAN:
            # numba's compiled pass would cost its import and a compile (~100 MiB, seconds) in this
            # small pod; numpy reads these few proposals as fast.
            association.DENSE_BACKEND = "numpy"
            self.say("evaluator: lean (podmortem_runtime.insseg: per-scene counts kept, masks dropped)")
        else:
            self.say("evaluator: pointcept (a full-size mask kept per proposal until AP)")

    def train(self, epoch: int) -> None:
        s = self.s
        rng = np.random.default_rng(epoch)
        loss = 2.0 / (epoch + 1)
        for step in range(s.steps):
            loss *= 0.999
            if step % 10 == 0 or step == s.steps - 1:
                self.say(
                    f"epoch {epoch} step {step + 1}/{s.steps} loss {loss + rng.random() * 0.01:.4f} "
                    f"lr {0.01 * 0.9**epoch:.5f}"
                )
            else:
                self.say(f"epoch {epoch} step {step + 1}/{s.steps} loss {loss:.4f}")
            time.sleep(s.step_s)

    def _loader(self) -> tuple[SceneLoader | None, bool]:
        """The loader for this evaluation, and whether it is to be closed after it."""
        if self.resolved == "none":
            return None, False
        if self.resolved == "persistent":
            return self.persistent, False
        method = "fork" if self.resolved == FRESH_FORK else self.resolved
        loader = SceneLoader(
            context=worker_context(method),
            workers=self.s.workers,
            scene_bytes=self.s.scene_bytes,
            malloc_threshold=None,
        )
        return loader, True

    def evaluate(self, epoch: int) -> None:
        s = self.s
        loader, close = self._loader()
        older = len(self.kept_masks)
        self.scene_counts = []
        try:
            for scene in range(s.scenes):
                points = loader.load(scene) if loader is not None else load_in_process(scene, s.scene_bytes)
                score = float(points[:1024].mean())
                if self.evaluator == LEAN:
                    self.scene_counts.append(self._count_scene(epoch, scene))
                    kept = f"scenes counted {len(self.scene_counts)}"
                else:
                    # Full-size masks, one per proposal, kept for the final AP: the post-mortem's leak.
                    for _ in range(s.proposals):
                        self.kept_masks.append(np.ones(s.mask_bytes, dtype=np.bool_))
                    # Matching rewrites the masks kept so far, a slice per scene: copy-on-write gives
                    # the trainer fresh pages while forked workers keep the old ones.
                    lo, hi = older * scene // s.scenes, older * (scene + 1) // s.scenes
                    for mask in self.kept_masks[lo:hi]:
                        np.logical_not(mask, out=mask)
                    kept = f"masks kept {len(self.kept_masks)}"
                self.charge()
                self.say(
                    f"eval epoch {epoch} scene {scene + 1}/{s.scenes}: {s.proposals} proposals, "
                    f"score {score:.3f}, {kept}"
                )
        finally:
            if close and loader is not None:
                loader.close()
        if self.evaluator == LEAN:
            ap = insseg.average_precision(
                self.scene_counts, class_names=CLASS_NAMES, segment_ignore_index=(0,)
            )
            self.say(f"eval epoch {epoch}: mAP {ap['all_ap']:.3f} AP50 {ap['all_ap_50%']:.3f}")
        else:
            self.say(f"eval epoch {epoch}: mAP 0.{31 + epoch:02d} AP50 0.{52 + epoch:02d}")

    def _count_scene(self, epoch: int, scene: int) -> insseg.Scene:
        """One scene's proposals (full-size masks, as the model gives them) counted against its ground
        truth by the lean evaluator; the masks are dropped when this returns."""
        s = self.s
        n = s.mask_bytes
        rng = np.random.default_rng(epoch * 1000 + scene)
        # Ground truth: one instance per class (1..4) in contiguous blocks of the scene's points.
        block = max(1, n // len(CLASS_NAMES))
        instance = np.minimum(np.arange(n, dtype=np.int32) // block, len(CLASS_NAMES) - 1).astype(np.int32)
        segment = instance.copy()
        masks = np.zeros((s.proposals, n), dtype=np.bool_)
        classes = np.empty(s.proposals, dtype=np.int64)
        for p in range(s.proposals):
            target = 1 + (p % (len(CLASS_NAMES) - 1))
            lo = target * block + int(rng.integers(0, max(1, block // 4)))
            masks[p, lo : min(n, lo + block)] = True
            classes[p] = target
        scores = rng.random(s.proposals)
        return insseg.associate(
            classes, scores, masks, segment, instance,
            class_names=CLASS_NAMES, segment_ignore_index=(0,),
        )

    def charge(self) -> None:
        """Where the limit is enforced from outside (`TreePss`), wait while past it, up to
        ``charge_wait_s``: the kernel's charge path makes the allocating task wait for the OOM
        killer the same way. Inside a real memory cgroup, nothing: the kernel does it."""
        if self.account is None or self.account.limit_bytes is None:
            return
        deadline = time.monotonic() + self.s.charge_wait_s
        while True:
            usage = self.account.usage()
            if self.sampler is not None:
                self.sampler.observe(usage)
            if usage <= self.account.limit_bytes or time.monotonic() >= deadline:
                return
            time.sleep(0.01)

    def run(self) -> int:
        self.start()
        try:
            for epoch in range(self.s.epochs):
                self.train(epoch)
                self.evaluate(epoch)
                self.say(memory.memory_line(epoch, sampler=self.sampler))
        except WorkerDied as exc:
            self.say(f"RuntimeError: {exc}")
            return 1
        finally:
            if self.persistent is not None:
                self.persistent.close()
            if self.account is not None and self.sampler is not None:
                self.sampler.stop()
            else:
                memory.stop_sampler()
        self.say(f"training finished: {self.s.epochs} epochs")
        return 0


def build_parser() -> argparse.ArgumentParser:
    d = TrainerSettings()
    p = argparse.ArgumentParser(
        prog="python -m podmortem_demo.trainer",
        description="A trainer-like program whose evaluation leaks masks and whose validation loader "
        "forks workers; podmortem demo runs it as the training pod's container.",
    )
    p.add_argument(
        "--val-policy",
        choices=POLICIES,
        default=FRESH_FORK,
        help="fresh-fork (the baseline that gets OOM-killed) or a podmortem_runtime.val_loader "
        "policy (default: %(default)s)",
    )
    p.add_argument(
        "--evaluator",
        choices=EVALUATORS,
        default=POINTCEPT,
        help="pointcept (keeps a full-size mask per proposal: grows each epoch) or lean "
        "(podmortem_runtime.insseg: keeps per-scene counts) (default: %(default)s)",
    )
    p.add_argument("--epochs", type=int, default=d.epochs, help="epochs (default: %(default)s)")
    p.add_argument(
        "--steps", type=int, default=d.steps, help="training steps per epoch (default: %(default)s)"
    )
    p.add_argument(
        "--step-seconds", type=float, default=d.step_s, help="sleep per step (default: %(default)s)"
    )
    p.add_argument("--scenes", type=int, default=d.scenes, help="validation scenes (default: %(default)s)")
    p.add_argument(
        "--proposals", type=int, default=d.proposals, help="proposals per scene (default: %(default)s)"
    )
    p.add_argument(
        "--mask-mib",
        type=float,
        default=d.mask_bytes / MIB,
        help="MiB per proposal mask (default: %(default)s)",
    )
    p.add_argument("--workers", type=int, default=d.workers, help="validation workers (default: %(default)s)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = TrainerSettings(
        epochs=args.epochs,
        steps=args.steps,
        step_s=args.step_seconds,
        scenes=args.scenes,
        proposals=args.proposals,
        mask_bytes=int(args.mask_mib * MIB),
        workers=args.workers,
    )
    print(
        f"trainer pid {os.getpid()}: {settings.epochs} epochs, val policy {args.val_policy}, "
        f"evaluator {args.evaluator}",
        flush=True,
    )
    return Trainer(settings, args.val_policy, evaluator=args.evaluator).run()


if __name__ == "__main__":
    sys.exit(main())
