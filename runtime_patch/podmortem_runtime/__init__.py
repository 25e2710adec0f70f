"""Code for the GPU trainer image: memory-lean evaluation, fork-free validation, a memory line.

It must import without kopf or aiohttp (and without torch, for the numpy paths),
so that ``pip install podmortem[runtime]`` stays small in a trainer image.
"""

__version__ = "0.1.0"
