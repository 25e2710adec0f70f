"""What every fuzz target in this folder shares: atheris set up over podmortem's own code, a CPU budget.

A target is a module with ``check(data: bytes) -> None``, which feeds one input to its parser and
raises only on a finding: an exception the parser does not document. ``check`` imports the parser
when first called, so that `main` can import it under atheris' instrumentation (coverage of
podmortem's modules only: the fuzzer steers by what our code does, not by what json or yaml do).
The test suite replays the findings kept in ``tests/fixtures/fuzz/`` through the same ``check``
without atheris (``tests/diagnosis/test_fuzz_regressions.py``).

Run a target alone with libFuzzer's flags (``python bench/fuzz/kernel.py -help=1``), or all of them
with ``bench/fuzz.py``. ``PODMORTEM_FUZZ_CPU_S`` stops a target cleanly after that much CPU time;
``PODMORTEM_FUZZ_SLOWEST`` names a file where the slowest input so far is kept, its CPU seconds in
a ``.s`` file beside it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

#: Inputs not counted for the slowest: the first calls pay for imports and caches filled once.
WARM_UP = 100


def main(check: Callable[[bytes], None]) -> None:
    import atheris

    budget = float(os.environ.get("PODMORTEM_FUZZ_CPU_S", "inf"))
    slowest_path = os.environ.get("PODMORTEM_FUZZ_SLOWEST")
    slowest = 0.0
    count = 0

    def one_input(data: bytes) -> None:
        nonlocal slowest, count
        t0 = time.process_time()
        check(data)
        took = time.process_time() - t0
        count += 1
        if slowest_path is not None and took > slowest and count > WARM_UP:
            slowest = took
            Path(slowest_path).write_bytes(data)
            Path(slowest_path + ".s").write_text(f"{took:.6f}\n")
        if t0 > budget:
            sys.stderr.write(f"#cpu-budget {budget:.0f} s spent\n")
            sys.stderr.flush()
            os._exit(0)

    with atheris.instrument_imports(include=["podmortem"]):
        check(b"")
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
