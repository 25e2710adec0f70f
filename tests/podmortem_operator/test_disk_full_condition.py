"""The operator says when a full volume pauses a job's log: ``DiskFull`` on the TrainingJob, and the metric.

The store lives on a real 4 MiB tmpfs, filled to ENOSPC by a file; needs root to mount (skipped
with the reason otherwise).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.full_volume import fill, tmpfs

from podmortem_demo.harness import Harness, harness, run_pod

TJ = "/apis/podmortem.io/v1alpha1/namespaces/default/trainingjobs"


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "vol") as path:
        yield path


def disk_full(h: Harness, name: str) -> dict[str, Any] | None:
    status = (h.get(f"{TJ}/{name}") or {}).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == "DiskFull"), None)


def metric(url: str, name: str) -> float | None:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def test_a_full_volume_sets_diskfull_and_clears_it_when_space_returns(tmp_path: Path, volume: Path) -> None:
    with harness(tmp_path) as h:
        h.add_agent_pod()
        settings = h.settings(store_dir=volume / "store", log_http_auth=False, last_log_line_interval_s=0.2)
        h.start_operator(settings)
        h.create(TJ, {
            "apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "full", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "pointgroup:1"}]}}},
        })
        h.wait(lambda: h.get("/api/v1/namespaces/default/pods/full-train"), what="the pod", timeout=60)
        run_pod(h, name="full-train")
        container = h.sync(lambda: h.api.pods["default", "full-train"]).containers["trainer"]
        h.sync(lambda: container.write(200))
        h.wait(lambda: ((h.get(f"{TJ}/full") or {}).get("status") or {}).get("log", {}).get("lines") == 200,
               what="the first lines stored", timeout=60)
        filler = fill(volume)
        h.sync(lambda: container.write(2000))
        cond = h.wait(lambda: (c := disk_full(h, "full")) and c["status"] == "True" and c, what="DiskFull",
                      timeout=60)
        assert cond["reason"] == "LogStoreFull" and "full-train (trainer)" in cond["message"]
        metrics_url = h.running[0].metrics_url
        assert metric(metrics_url, "podmortem_logs_store_full") == 1.0
        filler.unlink()
        cond = h.wait(lambda: (c := disk_full(h, "full")) and c["status"] == "False" and c,
                      what="DiskFull cleared", timeout=60)
        assert cond["reason"] == "LogStoreWritable"
        h.wait(lambda: ((h.get(f"{TJ}/full") or {}).get("status") or {}).get("log", {}).get("lines") == 2200,
               what="every line stored after space returned", timeout=60)
        assert metric(metrics_url, "podmortem_logs_store_full") == 0.0
