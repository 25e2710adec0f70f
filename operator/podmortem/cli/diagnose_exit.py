"""``podmortem diagnose``'s exit codes, shared by the kernel-text report and the combined one.

Scripts tell the three outcomes apart by them: a report was printed, the input could not be read,
or the input holds no failure podmortem knows.
"""

from __future__ import annotations

#: A report was printed.
EXIT_OK = 0
#: The input could not be read (missing file, bad arguments).
EXIT_INPUT = 2
#: The input holds no OOM-kill record (nor a failure of another kind).
EXIT_NO_RECORD = 3
