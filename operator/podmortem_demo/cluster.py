"""The demo's Kubernetes API: the emulation in ``podmortem_demo.emulated``, pod status kept where written.

:class:`podmortem_demo.emulated.PodLogsApi` answers ``GET pods/{name}`` from its own
emulated pods, so tests can make a pod "run" without anyone writing its status.
The demo has a kubelet that writes the status of the pods the operator created,
so here a pod read returns the stored object, the same one watches and lists
show; only ``pods/{name}/log`` is served by the emulation. :class:`LiveLog`
appends the lines a real process prints, with the time they were read, to the
emulated container log.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from podmortem_demo.emulated import PodLogsApi, kubeconfig_for, resources, running_cluster
from podmortem_demo.emulated.kubelet import Container

#: The emulated cluster on a local port, as the tests start it, is here too (see `podmortem_demo.emulated`).
__all__ = ["DemoApi", "LiveLog", "kubeconfig_for", "running_cluster"]


@attrs.define(kw_only=True)
class DemoApi(PodLogsApi):
    """The emulated API with the resources the operator uses, and pod reads from the stored objects."""

    pod_reads_from_kubelet: bool = False  # the demo's kubelet writes real statuses to the objects

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        resources.declare(self)

    def stored(self, resource: str, namespace: str | None, name: str | None = None) -> list[dict[str, Any]]:
        """Live objects of ``group/version/plural`` (``v1/pods``), as stored (call on the API's loop)."""
        out = []
        for (res, ns, obj_name), obj in self.objects.items():
            if obj.deleted or f"{res.group}/{res.version}/{res.plural}".lstrip("/") != resource:
                continue
            if (namespace is None or ns == namespace) and (name is None or obj_name == name):
                out.append(obj.raw)
        return out


class LiveLog:
    """Appends a real process's output lines to an emulated container log, with real timestamps.

    The container runtime stamps each line when it reads it from the pipe; these
    stamps never go backwards, even if two pipes race, so the log stays ordered
    as the real one is.
    """

    def __init__(self, container: Container) -> None:
        self.container = container
        self.lines: list[tuple[int, bytes]] = []
        self._last_ns = 0

    def append(self, text: bytes) -> None:
        """One line without its newline; call on the API's loop."""
        now = max(time.time_ns(), self._last_ns)
        self._last_ns = now
        self.lines.append((now, text))
        self.container.current.log.append([(now, text)])

    def close(self, exit_code: int) -> None:
        self.container.terminate(exit_code)
