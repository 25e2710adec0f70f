"""Compile the dense pass once, at image build time, into numba's on-disk cache.

The first dense evaluation in a process compiles the pass (seconds, and LLVM's own
memory) unless numba finds it in its cache. A pod's container filesystem is new at
every restart, so the cache has to be in the image: set ``NUMBA_CACHE_DIR`` to a
folder of the image and run this module in the Dockerfile::

    ENV NUMBA_CACHE_DIR=/opt/podmortem/numba-cache
    RUN python -m podmortem_runtime.insseg.warm

Every mask dtype is read as the unsigned integer of its width, so the four widths
(bool/uint8, float16, int32/float32, int64/float64) are all the compiled variants a
trainer needs. numba keys cached code by CPU model as well: an image built on a
different CPU than the one that runs it compiles again there (and caches that too).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from podmortem_runtime.insseg import _numba
from podmortem_runtime.insseg.columns import ColumnCodes

#: One dtype per element width the pass is compiled for.
DTYPES = (np.uint8, np.float16, np.int32, np.int64)


def warm() -> list[str]:
    """Run the pass once per width, direct and mapped; what was compiled or loaded, for the build log."""
    done = []
    codes = np.zeros(256, dtype=np.uint16)
    for dtype in DTYPES:
        masks = np.zeros((2, 256), dtype=dtype)
        masks[0, :10] = 1
        rows = np.arange(2, dtype=np.int64)
        started = time.perf_counter()
        bits = 0x7FFF if dtype == np.float16 else 0
        view = masks.view(np.int16) if dtype == np.float16 else masks
        _numba.count_rows(view, rows, ColumnCodes.direct(codes, n_bins=4), 4, bits=bits)
        mapped = ColumnCodes.mapped(codes, np.arange(256), n_columns=256, n_bins=4)
        _numba.count_rows(view, rows, mapped, 4, bits=bits)
        done.append(f"{np.dtype(dtype).name}: {time.perf_counter() - started:.1f}s")
    return done


def main() -> int:
    where = os.environ.get("NUMBA_CACHE_DIR", "beside the package (NUMBA_CACHE_DIR unset)")
    print(f"podmortem dense pass, numba cache {where}: " + ", ".join(warm()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
