"""How ``podmortem logs`` tells apart the lines of several pods or containers on one stdout.

As stern prints them: ``POD CONTAINER line``, the pod's and the container's names each in a colour
chosen from their names (the same pod keeps its colour from one run to the next). One container of
one pod alone is printed bare, as ``kubectl logs`` prints it. Colour only on a terminal (``--color
auto``, the default; ``NO_COLOR`` or ``TERM=dumb`` turn it off), or as ``--color always|never`` says.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Mapping
from typing import TextIO

#: The ANSI foreground colours stern cycles through (red, green, yellow, blue, magenta, cyan), bright
#: variants after them, for names on a dark or a light background.
COLOURS: tuple[int, ...] = (31, 32, 33, 34, 35, 36, 91, 92, 93, 94, 95, 96)
RESET = "\x1b[0m"
MODES = ("auto", "always", "never")


def use_colour(mode: str, stream: TextIO | object, environ: Mapping[str, str] | None = None) -> bool:
    """Whether to colour: ``always``, ``never``, or (``auto``) when ``stream`` is a terminal and neither
    ``NO_COLOR`` (https://no-color.org) nor ``TERM=dumb`` says otherwise."""
    if mode != "auto":
        return mode == "always"
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def colour_of(name: str) -> int:
    """The ANSI colour code of a name: the same for the same name, in every run."""
    return COLOURS[zlib.crc32(name.encode()) % len(COLOURS)]


def paint(text: str, colour: int) -> str:
    return f"\x1b[{colour}m{text}{RESET}"


def prefixer(pod: str, *, colour: bool) -> Callable[[str], bytes]:
    """The tag put before each line of one of ``pod``'s containers: ``pod container `` (coloured)."""
    cache: dict[str, bytes] = {}

    def tag(container: str) -> bytes:
        value = cache.get(container)
        if value is None:
            if colour:
                value = (f"{paint(pod, colour_of(pod))} "
                         f"{paint(container, colour_of(pod + '/' + container))} ").encode()
            else:
                value = f"{pod} {container} ".encode()
            cache[container] = value
        return value

    return tag
