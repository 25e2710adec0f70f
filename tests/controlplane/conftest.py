"""The real control plane, once per test session, and a namespace of its own for each test.

Skips with the reason when hack/control-plane/build.sh has not built the binaries; fails instead when
``PODMORTEM_REQUIRE_CONTROL_PLANE=1`` (CI sets it after building them), so a CI run can never pass by
skipping what it claims to test.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest
from tests.controlplane.cluster import ControlPlane, missing_binaries, running


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    missing = missing_binaries()
    if missing:
        reason = (f"the real control plane is not built ({', '.join(missing)} missing): "
                  "run `bash hack/control-plane/build.sh` (about 20 minutes the first time)")
        if os.environ.get("PODMORTEM_REQUIRE_CONTROL_PLANE") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    with running(tmp_path_factory.mktemp("control-plane"), nodes=3) as plane:
        yield plane


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named for the test; deleted after it (the namespace controller empties it)."""
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    control_plane.create_namespace(name)
    yield name
    control_plane.run("kubectl", "delete", "namespace", name, "--wait=false", check=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark this folder's tests ``controlplane``, so ``-m "not controlplane"`` leaves them out."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here + os.sep):
            item.add_marker(pytest.mark.controlplane)
