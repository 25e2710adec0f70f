"""The root of podmortem's own exceptions.

Callers that must not die on podmortem's expected failures (a bad setting, a
cluster that is away) catch :class:`PodmortemError`; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations


class PodmortemError(Exception):
    """An expected failure, with a message written for the person running podmortem."""
