"""podmortem: why a long training pod died, told from the kernel's own records.

The package is layered (checked by import-linter, see ``.importlinter`` and
docs/layout.md): ``cli`` above ``operator`` | ``agent`` (independent of each
other), above ``logs`` | ``diagnosis`` | ``kernel`` | ``cgroups``, above
``kube`` | ``memory_line`` | ``reports``. The pure core (parsers, the log
cursor, diagnosis rules, report models) does no I/O and imports none of kopf,
aiohttp or kubernetes_asyncio.
"""

__version__ = "0.1.0"
