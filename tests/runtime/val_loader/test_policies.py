"""make_val_loader's policies and the documented "auto" rule (no cgroups needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.utils.data

from podmortem_runtime import loader_policy, val_loader

ROOT = Path(__file__).resolve().parents[3]
GIB = 1024**3


MIB = 1024**2


@pytest.mark.parametrize(
    ("policy", "workers", "private", "expected"),
    [
        ("auto", 0, GIB, "none"),
        ("auto", 4, 100 * MIB, "persistent"),
        ("auto", 4, 256 * MIB, "persistent"),  # at the budget: still forks
        ("auto", 4, 256 * MIB + 1, "forkserver"),
        ("auto", 4, 400 * MIB, "forkserver"),  # the late-built loader: 400 MB of masks
        ("persistent", 0, 0, "none"),
        ("forkserver", 2, 100 * GIB, "forkserver"),
        ("none", 8, 0, "none"),
    ],
)
def test_choose_policy(policy: loader_policy.Policy, workers: int, private: int, expected: str) -> None:
    choice = val_loader.choose_policy(policy, num_workers=workers, private_bytes=private)
    assert choice.policy == expected
    assert choice.reason


@pytest.mark.parametrize(
    ("private", "usage", "limit", "expected"),
    [
        (100 * MIB, 1 * GIB, None, "persistent"),  # no limit: the budget alone decides
        (100 * MIB, 1 * GIB, 2 * GIB, "persistent"),
        (200 * MIB, 1900 * MIB, 2 * GIB, "none"),  # small, but a full copy would not fit
        (1 * GIB, 1 * GIB, 2 * GIB, "forkserver"),
        (1 * GIB, 1600 * MIB, 2 * GIB, "none"),  # 400 MiB left: no room for a fork server
    ],
)
def test_auto_weighs_the_pod_limit(private: int, usage: int, limit: int | None, expected: str) -> None:
    memory = val_loader.ForkTimeMemory(private, usage, limit)
    choice = val_loader.choose_policy("auto", num_workers=2, memory=memory)
    assert choice.policy == expected, choice.reason
    if limit is not None:
        assert "left under the pod limit" in choice.reason


def test_auto_reads_this_process_when_not_told() -> None:
    choice = val_loader.choose_policy("auto", num_workers=2, fork_budget_bytes=1)
    assert choice.policy == "forkserver"
    assert "exceeds the fork budget" in choice.reason


def test_bad_arguments_are_clear() -> None:
    with pytest.raises(ValueError, match=r"unknown validation loader policy 'fork'.*none, persistent"):
        val_loader.choose_policy("fork", num_workers=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_workers must be >= 0"):
        val_loader.choose_policy("auto", num_workers=-1)


DATA = torch.utils.data.TensorDataset(torch.arange(10))


@pytest.mark.parametrize("policy", ["none", "persistent", "forkserver"])
def test_every_policy_yields_every_item_in_order(policy: loader_policy.Policy) -> None:
    loader = val_loader.make_val_loader(DATA, batch_size=3, num_workers=2, policy=policy)
    assert loader.num_workers == (0 if policy == "none" else 2)
    assert loader.persistent_workers == (policy == "persistent")
    assert val_loader.prestart_workers(loader) == (policy == "persistent")
    for _ in range(2):
        assert torch.cat([batch[0] for batch in loader]).tolist() == list(range(10))


@pytest.mark.parametrize(("budget", "expected"), [(GIB, "persistent"), (1, "forkserver")])
def test_auto_decides_when_workers_are_about_to_start(budget: int, expected: str) -> None:
    seen: list[loader_policy.PolicyChoice] = []
    loader = val_loader.make_val_loader(
        DATA, batch_size=3, num_workers=2, policy="auto", fork_budget_bytes=budget, on_choice=seen.append
    )
    assert seen == [] and loader.choice is None, "nothing is decided when the loader is built"
    assert val_loader.prestart_workers(loader) == (expected == "persistent")
    assert [c.policy for c in seen] == [expected]
    assert loader.persistent_workers == (expected == "persistent")
    expected_context = "fork" if expected == "persistent" else "forkserver"
    assert loader.multiprocessing_context.get_start_method() == expected_context
    for _ in range(2):
        assert torch.cat([batch[0] for batch in loader]).tolist() == list(range(10))
    assert len(seen) == 1, "decided once"


def test_auto_late_built_loader_reads_the_grown_trainer() -> None:
    """Built small, first iterated after the trainer grew past the budget: the fork server, not a fork."""
    budget = val_loader.ForkTimeMemory.read().private_bytes + 64 * 1024**2
    loader = val_loader.make_val_loader(
        DATA, batch_size=5, num_workers=1, policy="auto", fork_budget_bytes=budget
    )
    heap = torch.ones(96 * 1024**2, dtype=torch.uint8)  # written, so resident: grown after the build
    assert val_loader.prestart_workers(loader) is False
    assert loader.choice is not None and loader.choice.policy == "forkserver", loader.choice
    del heap


def test_worker_init_chains_the_users_own() -> None:
    seen: list[int] = []
    val_loader.WorkerInit(None, seen.append)(3)
    assert seen == [3]


def test_malloc_threshold_is_set_in_a_fresh_process() -> None:
    code = "from podmortem_runtime import val_loader; print(val_loader.set_malloc_mmap_threshold(131072))"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "runtime_patch")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
