"""Can a worker started in a fresh process (a fork server, spawn) rebuild the loader's objects?

A fork-server or spawn worker gets the dataset, the collate function and the worker init
function by pickle. A class or function is pickled by reference (module and name), so the
worker must import that module. For ``__main__`` it re-imports the main script: that re-runs
a script without an ``if __name__ == "__main__":`` guard (its training too), and there is
nothing to re-import at all under ``python -c``, in an interactive session or a notebook,
where the worker then dies with ``Can't get attribute 'DS' on <module '__main__'>``. A plain
fork needs none of this. So ``"auto"`` asks `problem` before it picks a fork server, and picks
something that works where the answer is not None.

No torch here: pure Python, called once per loader when ``"auto"`` would pick a fork server.
"""

from __future__ import annotations

import ast
import pickle
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class _Discard:
    """A file that keeps nothing: pickling only to see what is referenced costs no memory."""

    def write(self, data: bytes) -> int:
        return len(data)


class _References(pickle.Pickler):
    """Records the ``__main__`` classes and functions an object graph is pickled with."""

    def __init__(self) -> None:
        super().__init__(_Discard(), protocol=pickle.HIGHEST_PROTOCOL)
        self.from_main: list[str] = []

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type | types.FunctionType) and getattr(obj, "__module__", None) == "__main__":
            name = getattr(obj, "__qualname__", repr(obj))
            if name not in self.from_main:
                self.from_main.append(name)
        return NotImplemented


def main_reimport_problem() -> str | None:
    """Why a fresh process could not safely re-import ``__main__``, or None if it can."""
    main = sys.modules.get("__main__")
    file = getattr(main, "__file__", None)
    if main is None or not file:
        return ("__main__ is no file (python -c, an interactive session or a notebook), "
                "so a worker in a fresh process cannot import it")
    path = Path(file)
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError) as exc:
        return f"the main script {path} cannot be read back ({exc.__class__.__name__})"
    if not any(_is_main_guard(node) for node in tree.body):
        return (f"the main script {path} has no 'if __name__ == \"__main__\":' guard, so a worker "
                "re-importing it would run it again")
    return None


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


def problem(objects: Iterable[tuple[str, Any]]) -> str | None:
    """Why workers in fresh processes could not rebuild these ``(what, object)`` pairs, or None.

    Each object is pickled into nothing (a dataset holding arrays costs one pass over them,
    no copy): one that does not pickle (a lambda, a local class, an open file) cannot reach
    such a worker at all; one that refers to ``__main__`` needs `main_reimport_problem` to
    say None.
    """
    for what, obj in objects:
        if obj is None:
            continue
        refs = _References()
        try:
            refs.dump(obj)
        except (pickle.PicklingError, TypeError, AttributeError, ValueError, RecursionError) as exc:
            shown = str(exc).splitlines()[0][:200] if str(exc) else exc.__class__.__name__
            return f"the {what} does not pickle ({shown}), and a fork server must send it to each worker"
        if refs.from_main:
            main = main_reimport_problem()
            if main is not None:
                return f"the {what} uses {', '.join(refs.from_main[:3])} from __main__, and {main}"
    return None
