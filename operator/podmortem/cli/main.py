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
import os
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


#: Commands whose process must stay small or start fast: started alone, they register only themselves
#: (the sidecar runs in every training pod, and the other commands' imports would double its memory;
#: ``logs`` is started once per look at a log, and registering every command and scanning the installed
#: packages' entry points cost it about a quarter of its start-up CPU).
LEAN: tuple[str, ...] = ("sidecar", "logs")


#: The kubectl plugin's executable (``kubectl podmortem ...`` runs it with the rest of the command line).
PLUGIN_EXECUTABLE = "kubectl-podmortem"


def program_name(argv0: str | None = None) -> str:
    """``podmortem``, or ``kubectl podmortem`` when run as the kubectl plugin (usage says what was typed)."""
    name = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    return "kubectl podmortem" if name.startswith(PLUGIN_EXECUTABLE) else "podmortem"


def build_parser(only: str | None = None, *, prog: str = "podmortem") -> argparse.ArgumentParser:
    """The whole CLI; ``only``: just that one subcommand (one of `LEAN`), for a lean process."""
    parser = argparse.ArgumentParser(
        prog=prog,
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
    for sub in subparsers.choices.values():
        # An unknown flag is the subcommand's mistake: `main` shows that subcommand's usage.
        sub.set_defaults(_subparser=sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_in[0] if args_in and args_in[0] in LEAN else None, prog=program_name())
    args, unknown = parser.parse_known_args(args_in)
    if unknown:
        owner: argparse.ArgumentParser = getattr(args, "_subparser", None) or parser
        owner.error(f"unrecognized arguments: {' '.join(unknown)}")  # exits 2 with its usage
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
