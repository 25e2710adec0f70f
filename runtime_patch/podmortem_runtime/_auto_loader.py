"""The ``"auto"`` validation loader: its policy is chosen when its workers are about to be forked.

A loader built while the trainer is small may first be iterated when it is large,
and a user's own trainer may build it late; deciding at construction time forks
from whatever the trainer has become by then. `AutoPolicyLoader` asks its
``decide`` callback at its first iterator, just before torch creates the worker
queues and processes, and then keeps that decision: persistent fork workers stay
alive (never forked again), forkserver workers are started anew at each pass
from the small server, and "none" loads in the trainer.

Kept apart from `podmortem_runtime.val_loader` because it imports torch.
"""

from __future__ import annotations

import logging
import multiprocessing.context
from collections.abc import Callable
from typing import Any

import torch.utils.data

from podmortem_runtime.loader_policy import PolicyChoice, ResolvedPolicy

log = logging.getLogger("podmortem_runtime.val_loader")


class AutoPolicyLoader(torch.utils.data.DataLoader):  # type: ignore[type-arg]
    """A DataLoader whose worker policy is resolved at its first iterator (see the module docstring).

    Built with ``persistent_workers=True`` so that a fork decision keeps its workers;
    a fork-server or no-worker decision switches that off before any worker starts.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        num_workers: int,
        decide: Callable[[], PolicyChoice],
        context: Callable[[ResolvedPolicy], multiprocessing.context.BaseContext],
        on_choice: Callable[[PolicyChoice], object] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, num_workers=num_workers, persistent_workers=True, **kwargs)
        self._decide = decide
        self._context = context
        self._on_choice = on_choice
        self.choice: PolicyChoice | None = None
        """None until the first iterator; then what was decided and why."""

    def __iter__(self) -> Any:
        self.resolve_policy()
        return super().__iter__()

    def resolve_policy(self) -> PolicyChoice:
        """Decide now (once): what `prestart_workers` calls before deciding whether to start workers."""
        if self.choice is None:
            self.choice = self._apply(self._decide())
        return self.choice

    def _apply(self, choice: PolicyChoice) -> PolicyChoice:
        self.choice = choice
        log.info("validation loader: %s (%s)", choice.policy, choice.reason)
        if choice.policy == "none":
            self.num_workers = 0
        else:
            self.multiprocessing_context = self._context(choice.policy)
        if choice.policy != "persistent":
            # DataLoader refuses to change this attribute after construction; no iterator exists yet.
            object.__setattr__(self, "persistent_workers", False)
        if self._on_choice is not None:
            self._on_choice(choice)
        return choice
