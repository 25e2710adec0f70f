"""Entry point of the ``podmortem`` command.

Each subcommand lives in its own module under ``podmortem.cli`` and exposes
``register(subparsers)``. Registration must stay cheap and import nothing heavy:
``pip install podmortem`` (pydantic only) must still give a working ``diagnose``,
so modules import kopf/aiohttp/kubernetes_asyncio inside their run functions.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from podmortem import __version__

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS: tuple[str, ...] = (
    "diagnose",
    "logs",
    "operator",
    "agent",
    "demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podmortem",
        description="Why did my training pod die? OOM forensics, lossless pod logs, failure reports.",
    )
    parser.add_argument("--version", action="version", version=f"podmortem {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"podmortem.cli.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `podmortem logs ... | head`: the reader left; that is not our error.
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
