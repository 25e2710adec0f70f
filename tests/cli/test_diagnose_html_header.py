"""``podmortem diagnose --html FILE`` as a user runs it: the page's header says what the record says.

The record is a real one (a runc init killed in a Kubernetes pod, syslog form, EL7 kernel): it names
the pod's uid, the container's id, the host and the time the kernel log printed. The text output of
the same record shows them; the page's header must too, and must not show fields the record lacks
(no ``pod /``, no separators around nothing, no "unknown"). The record is the page's input, so its
kernel record is there: the page must not call it "unknown".
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

#: The ``podmortem`` console script of the environment running the tests.
PODMORTEM = str(Path(sys.executable).with_name("podmortem"))
RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"
RECORD = RECORDS / "02-k8s-v1-syslog-kmem-runc-el7.log"


def _page(path: Path) -> str:
    done = subprocess.run([PODMORTEM, "diagnose", "--html", str(path)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _header(doc: str) -> str:
    """The text of the first ``<p class="meta">``: the pod's details under the title."""
    m = re.search(r'<p class="meta">(.*?)</p>', doc)
    assert m is not None, doc[:2000]
    return m.group(1)


def test_the_header_is_filled_from_the_record_and_leaves_out_what_it_lacks() -> None:
    doc = _page(RECORD)
    header = _header(doc)
    # what the record holds (the text output shows the same)
    assert "6c4333b3-a663-11ea-b39f-6c92bf85beda" in header, header
    assert "bbd5e4b5f9c1" in header, header
    assert "Jun 17 03:18:17" in header, header
    assert "host-xx" in header, header
    # nothing empty: no "pod /", no "container" without a value, no separators around nothing
    assert "pod /" not in header and "unknown" not in header, header
    parts = header.split(" · ")
    assert all(p.strip() and p == p.strip() for p in parts), parts
    assert not re.search(r"\b(container|node|exit|ended|reported)\s*(·|$)", header), header
    # the record is the input: it is attached, not unknown
    state = re.search(r"kernel OOM record: <b>([^<]*)</b>", doc)
    assert state is not None and state.group(1) == "attached", doc[-3000:]
