"""The store's index of pods: each pod's directory, found without a glob, and its containers' instances.

A pod's directory is ``<root>/<namespace>/<job>/<pod>`` (see ``layout``); a reader names only
the namespace and the pod, so each namespace's pod directories are indexed by one directory
scan the first time it is touched. A pod's containers' instances are loaded lazily, off the
event loop, once (``recovery`` repairs them as they load).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from podmortem import files
from podmortem.logs.storage import layout, recovery
from podmortem.logs.storage.damage import DamageLedger
from podmortem.logs.storage.errors import LogNotFound, StoreError
from podmortem.logs.storage.instance import DamageSink, Instance

logger = logging.getLogger(__name__)


class Pod:
    """A pod's stored log: its directory and its containers' instances (loaded lazily)."""

    def __init__(self, *, path: Path, namespace: str, job: str, name: str) -> None:
        self.path = path
        self.namespace = namespace
        self.job = job
        self.name = name
        self.instances: dict[str, list[Instance]] = {}
        #: Held while a container's new instance is created (its meta is written off the loop).
        self.create_lock = asyncio.Lock()
        #: Held while a container's stored instances are loaded off the loop.
        self.load_lock = asyncio.Lock()
        #: The index let go of this object (`PodIndex.release`): a sink still holding it writes
        #: through the index's current one instead, so one directory never has two writers' objects.
        self.released = False

    def container_names(self) -> list[str]:
        """Containers with a stored log: on disk, or created here (never a name only asked about)."""
        names = {name for name, insts in self.instances.items() if insts}
        with contextlib.suppress(FileNotFoundError):
            names.update(p.name for p in self.path.iterdir() if files.is_real_dir(p))
        return sorted(names)


class PodIndex:
    """The pods a store knows, by (namespace, name), and where their directories are."""

    def __init__(self, *, root: Path, read_only: bool, damage: DamageLedger, on_damage: DamageSink) -> None:
        self.root = root
        self.read_only = read_only
        #: Counts the damage each load found.
        self._damage = damage
        #: What loaded instances report the damage their readers meet to.
        self._on_damage = on_damage
        self._by_name: dict[tuple[str, str], Pod] = {}
        #: Per namespace, pod name -> its directories (one per job it was filed under), built by one
        #: directory scan the first time the namespace is touched, so that finding a pod's directory
        #: costs no glob over every job. Entries whose directory is gone are dropped when looked up.
        self._pod_dirs: dict[str, dict[str, list[Path]]] = {}

    def __iter__(self) -> Iterator[Pod]:
        return iter(list(self._by_name.values()))

    def all_instances(self) -> Iterator[Instance]:
        """Every loaded instance of every pod the store holds."""
        for pod in self._by_name.values():
            for insts in pod.instances.values():
                yield from insts

    def prune(self) -> None:
        """Forget pods whose directory retention deleted and that no writer holds open."""
        for key, pod in list(self._by_name.items()):
            if not pod.path.exists() and not any(i.fd is not None for v in pod.instances.values() for i in v):
                del self._by_name[key]

    def held(self, namespace: str, name: str) -> Pod | None:
        """The pod as the index holds it now, if it does (no load, no directory scan)."""
        return self._by_name.get((namespace, name))

    def release(self, namespace: str, name: str) -> bool:
        """Forget a pod nobody writes any more (its instances reload from disk when read): what the
        index holds of every pod ever followed would otherwise stay until retention deletes its
        directory. False (kept) while any of its segments is open or being written."""
        key = (namespace, name)
        pod = self._by_name.get(key)
        if pod is None:
            return False
        for insts in pod.instances.values():
            for inst in insts:
                if inst.fd is not None or inst.lock.locked():
                    return False
        if pod.create_lock.locked() or pod.load_lock.locked():
            return False
        del self._by_name[key]
        pod.released = True
        return True

    def clear(self) -> None:
        self._by_name.clear()

    def reset(self, *, read_only: bool) -> None:
        """Forget every pod and directory scan, and load from now on as ``read_only`` says."""
        self._by_name.clear()
        self._pod_dirs.clear()
        self.read_only = read_only

    def get(self, namespace: str, name: str, *, job: str | None = None, create: bool = False) -> Pod:
        key = (layout.check_name("namespace", namespace), layout.check_name("pod", name))
        pod = self._by_name.get(key)
        if pod is not None:
            return pod
        path = self._find_pod_dir(namespace, name)
        if path is None and not create and self.read_only:
            # Not indexed: a directory another process made since the scan (a read-only store
            # over a live one) must still be found, so scan the namespace again before giving up.
            # (A writable store made every directory itself: no rescan per unknown name.)
            self._pod_dirs.pop(namespace, None)
            path = self._find_pod_dir(namespace, name)
        if path is not None and not layout.no_links(self.root, path):
            logger.warning("log store: %s holds a symbolic link; not served", path)
            raise LogNotFound(f"no stored log for pod {namespace}/{name}")
        if path is not None:
            job = path.parent.name
        elif create:
            job = layout.check_name("job", job or name)
            path = self.root / namespace / job / name
            if not layout.no_links(self.root, path):
                raise StoreError(f"{path} holds a symbolic link; the store writes only its own directories")
            self.index_pod_dir(path)
        else:
            raise LogNotFound(f"no stored log for pod {namespace}/{name}")
        pod = Pod(path=path, namespace=namespace, job=job or name, name=name)
        self._by_name[key] = pod
        return pod

    def pod_dir(self, *, namespace: str, job: str, pod: str) -> Path | None:
        """The directory the store files a pod's logs in; None where it has none or holds a link.

        Files kept beside a pod's logs (the report's timeline) go here and nowhere else: retention
        deletes them with the logs, and nothing is written or read through a link planted in the
        store. A bare pod's job is its own name. Raises ValueError for a name Kubernetes refuses.
        """
        path = self.root / layout.check_name("namespace", namespace) / layout.check_name("job", job) / \
            layout.check_name("pod", pod)
        if not files.is_real_dir(path) or not layout.no_links(self.root, path):
            return None
        return path

    def _find_pod_dir(self, namespace: str, name: str) -> Path | None:
        """The pod's directory; under several jobs, the most recently modified one wins."""
        dirs = self._namespace_index(namespace).get(name)
        if not dirs:
            return None
        best: Path | None = None
        best_mtime = 0.0
        for path in list(dirs):
            try:
                mtime = path.stat().st_mtime
            except FileNotFoundError:
                dirs.remove(path)  # removed by retention (or not created yet)
                continue
            if best is None or mtime > best_mtime:
                best, best_mtime = path, mtime
        return best

    def _namespace_index(self, namespace: str) -> dict[str, list[Path]]:
        index = self._pod_dirs.get(namespace)
        if index is None:
            index = {}
            try:
                scan = os.scandir(self.root / namespace)
            except (FileNotFoundError, NotADirectoryError):
                # A namespace with no directory is not indexed: a reader may name any namespace
                # (200,000 unknown ones once left 200,000 entries, 47.7 MiB), and asking costs a stat.
                return index
            with scan as jobs:
                for job in jobs:
                    if not job.is_dir(follow_symlinks=False) or job.name.startswith("."):
                        continue
                    with contextlib.suppress(FileNotFoundError, NotADirectoryError), \
                            os.scandir(job.path) as pods:
                        for entry in pods:
                            if entry.is_dir(follow_symlinks=False):
                                index.setdefault(entry.name, []).append(Path(entry.path))
            self._pod_dirs[namespace] = index
        return index

    def index_pod_dir(self, path: Path) -> None:
        """Record a pod directory this store creates (or is about to create)."""
        index = self._pod_dirs.get(path.parent.parent.name)
        if index is None:
            return  # the namespace is scanned when first needed
        dirs = index.setdefault(path.name, [])
        if path not in dirs:
            dirs.append(path)

    def instances(self, pod: Pod, container: str) -> list[Instance]:
        insts = pod.instances.get(container)
        if insts is None:
            insts = self._damage.adopt(recovery.load_instances(
                pod.path / container, container=container, writable=not self.read_only,
                on_damage=self._on_damage,
            ))
            pod.instances[container] = insts
        return insts

    async def instances_off_loop(self, pod: Pod, container: str) -> list[Instance]:
        """`instances`, loading off the event loop.

        A load reads each instance's last segment (up to ``segment_bytes``): for a thousand
        pods after a restart, gigabytes.
        """
        insts = pod.instances.get(container)
        if insts is not None:
            return insts
        if not os.path.isdir(pod.path / container):  # noqa: ASYNC240 - one stat, cheaper than a thread hop
            # Nothing stored for it yet (a new pod): one stat here instead of a worker thread's round
            # trip, which at an operator's start over 10,000 new pods was a thread hop per pod.
            return pod.instances.setdefault(container, [])
        # One load at a time: once a load is cached, writers may append, and a second load must not
        # take their batch in flight for a torn tail to cut.
        async with pod.load_lock:
            insts = pod.instances.get(container)
            if insts is None:
                loaded = self._damage.adopt(await asyncio.to_thread(
                    recovery.load_instances, pod.path / container, container=container,
                    writable=not self.read_only, on_damage=self._on_damage,
                ))
                insts = pod.instances.setdefault(container, loaded)  # a reader's load on the loop won
        return insts
