"""The emulated API's lists, watches, conflicts and Event checks, where the real control plane is not built.

The same checks run against kube-apiserver v1.36.3 too, in tests/controlplane/test_emulation_matches.py
(which holds them); here they run against the emulation alone, outside the ``controlplane`` marker.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tests.controlplane.test_emulation_matches import CHECKS, Cluster, emulated_cluster


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__.removeprefix("check_") for c in CHECKS])
def test_the_emulated_api(check: Callable[[Cluster], None], tmp_path: Path) -> None:
    with emulated_cluster(tmp_path) as cluster:
        check(cluster)
