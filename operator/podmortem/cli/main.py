"""Entry point of the ``podmortem`` command.

Each subcommand lives in its own module under ``podmortem.cli`` and exposes
``register(subparsers)``. Registration must stay cheap and import nothing heavy:
``pip install podmortem`` (pydantic only) must still give a working ``diagnose``,
so modules import kopf/aiohttp/kubernetes_asyncio inside their run functions.

Commands that live outside the product package register through the
``podmortem.commands`` entry-point group: ``podmortem demo`` comes from
``podmortem_demo`` (the emulated cluster), which the product never imports.
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
    "report",
    "logs",
    "operator",
    "agent",
    "sidecar",
)
#: Entry-point group of commands from other packages (``podmortem_demo`` adds ``demo``).
PLUGIN_GROUP = "podmortem.commands"


#: Commands whose process must stay small: started alone, they register only themselves (the sidecar
#: runs in every training pod, and the other commands' imports would double its memory).
LEAN: tuple[str, ...] = ("sidecar",)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; ``only``: just that one subcommand (one of `LEAN`), for a lean process."""
    parser = argparse.ArgumentParser(
        prog="podmortem",
        description="Why did my training pod die? OOM forensics, lossless pod logs, failure reports.",
    )
    parser.add_argument("--version", action="version", version=f"podmortem {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in (only,) if only is not None else COMMANDS:
        module = importlib.import_module(f"podmortem.cli.{name}")
        module.register(subparsers)
    if only is None:
        from importlib import metadata

        for entry in sorted(metadata.entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
            entry.load().register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_in[0] if args_in and args_in[0] in LEAN else None)
    args = parser.parse_args(args_in)
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
