"""The emulated cluster for ``bench/report_latency.py --pods``, run as a process of its own.

So the operator's process holds only the operator: kmock, the emulated kubelet
and the P pods' log files live here. Prints the API URL on stdout once P
annotated pods are Running with a few log lines each, then serves until stdin closes.

Usage: python bench/_operator_cluster.py PODS
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import kmock

from podmortem.testing import PodLogsApi


async def main(pods: int) -> None:
    api = PodLogsApi()
    api.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs={"get", "list"}
    )
    api.resources["v1/events"] = kmock.ResourceInfo(kind="Event", namespaced=True, verbs={"create", "list"})
    async with api, kmock.Server(api) as server:
        client = api.servers[0].client

        async def send(method: str, path: str, body: Any, ctype: str = "application/json") -> None:
            async with client.request(
                method, path, data=json.dumps(body), headers={"Content-Type": ctype}
            ) as r:
                if r.status >= 400:
                    raise RuntimeError(f"{method} {path}: {r.status} {await r.text()}")

        for i in range(pods):
            name = f"idle-{i}"
            await send(
                "POST",
                "/api/v1/namespaces/bench/pods",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": "bench",
                        "annotations": {"podmortem.io/watch": "true"},
                    },
                    "spec": {"containers": [{"name": "trainer", "image": "x"}]},
                },
            )
            pod = api.add_pod(name, namespace="bench", containers=("trainer",), seed=i)
            pod.containers["trainer"].write(20)
            cid = pod.containers["trainer"].current.container_id
            await send(
                "PATCH",
                f"/api/v1/namespaces/bench/pods/{name}",
                {
                    "status": {
                        "phase": "Running",
                        "containerStatuses": [
                            {
                                "name": "trainer",
                                "containerID": cid,
                                "restartCount": 0,
                                "state": {"running": {"startedAt": "2024-05-01T10:00:00Z"}},
                            }
                        ],
                    }
                },
                "application/merge-patch+json",
            )
        print(str(server.url).rstrip("/"), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
