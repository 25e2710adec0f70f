"""The validation loader's worker policies by name, and a policy chosen with its reason.

Both the policy choice (`podmortem_runtime.val_loader`) and the loader that applies it when its
workers are about to start (`podmortem_runtime._auto_loader`, which imports torch) speak these
names; kept apart from both so that neither imports the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Policy = Literal["none", "persistent", "forkserver", "spawn", "auto"]
ResolvedPolicy = Literal["none", "persistent", "forkserver", "spawn"]
POLICIES: tuple[str, ...] = ("none", "persistent", "forkserver", "spawn", "auto")


@dataclass(frozen=True)
class PolicyChoice:
    """What `podmortem_runtime.val_loader.choose_policy` picked and why, for the training log."""

    policy: ResolvedPolicy
    reason: str
