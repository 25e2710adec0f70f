"""Pointcept integration: hooks and trainer pieces registered in Pointcept's registries.

Importing this package needs Pointcept itself; without it the import fails with a
message that says so, rather than a bare ModuleNotFoundError deep inside.
"""

from __future__ import annotations

try:
    import pointcept  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by tests through a subprocess
    raise ImportError(
        "podmortem_runtime.pointcept needs Pointcept importable in this environment "
        "(the trainer image's Pointcept checkout on PYTHONPATH). The framework-free parts "
        "are podmortem_runtime.insseg, podmortem_runtime.val_loader and podmortem_runtime.memory."
    ) from exc
