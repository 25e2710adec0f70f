"""A kwok node that was not Ready for a while keeps its address, so pod logs still go through it.

kwok plays its node-initialize stage again whenever a node is not Ready: the node lifecycle controller
marks it ``Unknown`` when kwok did not renew the node's lease within the grace period (kwok killed
and started again, or starved of CPU on a loaded machine). Played on a node holding only an
``InternalIP``, that stage wrote an empty ``addresses`` list, and for up to 10 minutes (until a
heartbeat wrote the address back) the API server answered every log request of the node's pods with
500 "no preferred addresses found": an operator started then stored nothing.
"""

from __future__ import annotations

import time
from typing import Any

from tests.controlplane.cluster import ControlPlane, cri_line


def _ready_condition(node: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def test_a_node_initialised_again_keeps_its_address_and_serves_logs(control_plane: ControlPlane,
                                                                    namespace: str) -> None:
    plane = control_plane
    [node] = plane.add_nodes(1, prefix="kwok-reinit")
    before = plane.get(f"/api/v1/nodes/{node}")
    assert before is not None
    assert {"type": "InternalIP", "address": "127.0.0.1"} in before["status"]["addresses"]

    # What the node lifecycle controller writes when the lease lapsed; kwok initialises the node again.
    stale = _ready_condition(before)["lastHeartbeatTime"]
    time.sleep(1.1)  # heartbeat times are whole seconds: the new one must differ from the old
    code, answer = plane.request(
        "PATCH", f"/api/v1/nodes/{node}/status",
        {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                    "message": "Kubelet stopped posting node status."}]}},
        content_type="application/strategic-merge-patch+json")
    assert code == 200, answer

    def initialised_again() -> dict[str, Any] | None:
        body = plane.get(f"/api/v1/nodes/{node}")
        ready = _ready_condition(body) if body else {}
        return body if ready.get("status") == "True" and ready.get("lastHeartbeatTime") != stale else None

    after = plane.wait(initialised_again, what=f"kwok initialising node {node} again", timeout=60)
    assert {"type": "InternalIP", "address": "127.0.0.1"} in (after["status"].get("addresses") or []), after

    # And the API server reaches the node for a pod's log.
    plane.serve_logs(namespace, "talker", ["main"])
    plane.pod_log_file(namespace, "talker", "main").write_text(cri_line("still reachable"))
    plane.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "talker", "namespace": namespace},
                 "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]}})
    plane.wait(lambda: (plane.get(f"/api/v1/namespaces/{namespace}/pods/talker") or {})
               .get("status", {}).get("phase") == "Running" or None, what="the pod Running", timeout=60)
    path = f"/api/v1/namespaces/{namespace}/pods/talker/log?container=main"
    status, body = plane.request("GET", path)
    assert (status, body) == (200, "still reachable\n"), (status, body)
