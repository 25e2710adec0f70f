"""Puts the test-only Pointcept stand-in on the import path for one test, then takes it away.

Other test areas may import their own stand-in ``pointcept``; every module
named ``pointcept*`` or ``podmortem_runtime.pointcept*`` is set aside before
and restored after, so the stand-ins never meet.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

STANDIN = Path(__file__).with_name("standin")
_PREFIXES = ("pointcept", "podmortem_runtime.pointcept")


def _ours(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in _PREFIXES)


@contextlib.contextmanager
def standin_pointcept() -> Iterator[Path]:
    import podmortem_runtime

    saved = {name: mod for name, mod in sys.modules.items() if _ours(name)}
    saved_attr = podmortem_runtime.__dict__.get("pointcept")
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(STANDIN))
    try:
        yield STANDIN
    finally:
        sys.path.remove(str(STANDIN))
        for name in [n for n in sys.modules if _ours(n)]:
            del sys.modules[name]
        sys.modules.update(saved)
        if saved_attr is None:
            podmortem_runtime.__dict__.pop("pointcept", None)
        else:
            podmortem_runtime.__dict__["pointcept"] = saved_attr
