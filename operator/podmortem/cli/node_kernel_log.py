"""The node's kernel log, read through a short-lived pod on that node, as ``kubectl debug node/NAME`` does.

``podmortem diagnose pod/NAME --node-kernel-log`` (opt-in: it writes to the cluster) puts one pod on
the failed pod's node that runs ``dmesg`` once, reads its output as the pod's log, and deletes it,
so the kernel's OOM-kill record (the victim, the cgroup, every process's memory) joins the report
as it would with the node agent. The pod:

* runs on ``spec.nodeName`` of the failed pod, tolerating every taint, for at most
  `DEADLINE_S` (``activeDeadlineSeconds``), never restarted, in the failed pod's namespace;
* adds the one capability ``syslog(2)`` needs, ``CAP_SYSLOG``, to an image's ``dmesg`` (busybox by
  default; ``--node-kernel-log-image``). Pod Security "baseline" and "restricted" refuse an added
  SYSLOG: the namespace must allow "privileged" pods, as ``kubectl debug node`` needs too;
* needs ``create``, ``get`` and ``delete`` on pods and ``get`` on ``pods/log`` there.

The kernel keeps its log in a ring buffer of a few hundred KiB to a few MiB: a kill long ago on a
busy node may have been overwritten; the report then says no record was found.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from podmortem.kube.read_at_most import read_at_most

if TYPE_CHECKING:
    from podmortem.kube.session import ApiSession

#: The image whose ``dmesg`` reads the kernel log (busybox's reads it with syslog(2)).
DEFAULT_IMAGE = "busybox:1.36"
#: Seconds the pod may live, and that this waits for it: pulling a small image and one dmesg.
DEADLINE_S = 60
#: Seconds between two looks at the pod while it runs.
POLL_S = 1.0
#: Bytes of kernel log read at most (the kernel's ring buffer is at most a few MiB).
MAX_BYTES = 16 << 20
#: Label that tells these pods apart (``kubectl delete pod -l`` cleans up after an interrupted run).
LABEL = "app.kubernetes.io/name"
LABEL_VALUE = "podmortem-node-kernel-log"

HELP = (
    "also read the kernel log of each failed pod's node through a short-lived pod that runs dmesg there "
    "(as kubectl debug node/NAME does): it writes to the cluster, so it is opt-in. The pod runs in the "
    "failed pod's namespace on its node, with CAP_SYSLOG added (the namespace must allow Pod Security "
    "'privileged'), tolerating every taint, for at most 60 s, and is deleted after; it needs create, get "
    "and delete on pods and get on pods/log there"
)


class NodeLogError(Exception):
    """The node's kernel log could not be read: one line saying why."""


@dataclass(frozen=True)
class NodeKernelLog:
    node: str
    lines: list[bytes]


def pod_spec(name: str, namespace: str, node: str, image: str) -> dict[str, Any]:
    """The pod that prints the node's kernel log once."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL: LABEL_VALUE}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": DEADLINE_S,
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "dmesg", "image": image, "command": ["dmesg"],
                "securityContext": {
                    "runAsUser": 0, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"], "add": ["SYSLOG"]},
                },
                "resources": {"limits": {"memory": "32Mi", "cpu": "100m"}},
            }],
        },
    }


def _pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


async def read(api: ApiSession, *, namespace: str, node: str, image: str = DEFAULT_IMAGE,
               deadline_s: float = DEADLINE_S) -> NodeKernelLog:
    """Create the pod on ``node``, wait for it to end, read its log, delete it. Raises `NodeLogError`."""
    import asyncio

    from podmortem.kube.api import KubeError

    name = f"podmortem-kernel-log-{secrets.token_hex(4)}"
    path = f"{_pods(namespace)}/{name}"
    try:
        await api.request("POST", _pods(namespace), body=pod_spec(name, namespace, node, image))
    except KubeError as exc:
        raise NodeLogError(f"cannot create pod {namespace}/{name} on node {node}: HTTP {exc.status} "
                           f"{' '.join(str(exc.body or exc.reason).split())[:300]}") from None
    try:
        end = time.monotonic() + deadline_s
        while True:
            pod = await api.request("GET", path)
            phase = _phase(pod)
            if phase in ("Succeeded", "Failed"):
                break
            if time.monotonic() >= end:
                raise NodeLogError(f"pod {namespace}/{name} on node {node} did not end within "
                                   f"{deadline_s:g} s (phase {phase}; an image pull, or a scheduling "
                                   "refusal?)")
            await asyncio.sleep(POLL_S)
        async with api.response("GET", f"{path}/log", query=[("limitBytes", str(MAX_BYTES))],
                                headers={"Accept": "*/*"}) as response:
            body: bytes = await read_at_most(response.content, MAX_BYTES + 1)
            if response.status != 200:
                raise NodeLogError(f"cannot read pod {namespace}/{name}'s log: HTTP {response.status}")
        if phase == "Failed":
            said = " ".join(body[-300:].decode("utf-8", "replace").split())
            raise NodeLogError(f"dmesg failed on node {node} (without CAP_SYSLOG, or dmesg_restrict): {said}")
        return NodeKernelLog(node=node, lines=body[:MAX_BYTES].splitlines())
    except KubeError as exc:
        raise NodeLogError(f"pod {namespace}/{name} on node {node}: HTTP {exc.status}") from None
    finally:
        # Best effort: its deadline ends it anyway, and the label finds it for a clean-up by hand.
        with contextlib.suppress(Exception):
            await api.request("DELETE", path)
