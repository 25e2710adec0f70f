"""``bench/operator_scale.py --cluster real`` runs end to end on the real control plane (50 pods).

What the bench measures is printed, not asserted; this checks that the real mode works, that the
operator follows every pod with one request each (its stream) plus a handful for the whole start,
and that API Priority and Fairness turned nothing away.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.controlplane.cluster import missing_binaries

REPO = Path(__file__).resolve().parents[2]


def test_the_scale_bench_follows_every_pod_on_the_real_control_plane() -> None:
    missing = missing_binaries()
    if missing:
        reason = f"the real control plane is not built ({', '.join(missing)} missing)"
        if os.environ.get("PODMORTEM_REQUIRE_CONTROL_PLANE") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "operator_scale.py"), "--cluster", "real", "--pods", "50",
         "--nodes", "2", "--idle", "0", "--line-every", "0", "--startup-timeout", "60"],
        capture_output=True, text=True, timeout=240, cwd=REPO)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "every pod's first lines stored" in out, out[-4000:]
    per_pod = re.search(r"the operator's requests: .* = ([0-9.]+) per pod", out)
    assert per_pod is not None, out[-4000:]
    assert float(per_pod.group(1)) <= 1.5, out[-4000:]  # 50 streams and one start's lists, no pod reads
    assert "APF rejected (429): none" in out, out[-4000:]
