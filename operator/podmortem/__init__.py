"""podmortem: why a long training pod died, told from the kernel's own records.

The package is layered (checked by import-linter, see pyproject.toml):
``cli``/``handlers``/``agent`` sit above ``logs``/``kernel``/``cgroups``,
which sit above ``diagnosis``, which sits above ``reports``. The pure core
(parsers, the log cursor, diagnosis rules, report models) does no I/O and
imports none of kopf, aiohttp or kubernetes_asyncio.
"""

__version__ = "0.1.0"
