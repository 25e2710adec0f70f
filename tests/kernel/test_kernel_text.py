"""The kernel's own OOM texts are found behind any prefix: checked against the catalogue of format strings.

`log_lines.KERNEL_TEXTS` is what the kernel-text reader looks for after a prefix that is no log's
own; podmortem.diagnosis.catalogue holds the kernel's format strings as the kernel writes them.
Every catalogued kernel message, rendered with generated fields and put after a file name, a
level, a viewer's column or a logger's prefix, must be read as that message.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.diagnosis.test_catalogue import _message

from podmortem.diagnosis import catalogue
from podmortem.kernel import log_lines

_PREFIXES = ("WARNING: ", "node-7 | ", "│ ", '"', "[pod/trainer-0/main] ", "kern.warn ", "E!! ")


@pytest.mark.parametrize("entry", catalogue.KERNEL, ids=lambda e: e.key)
def test_every_kernel_message_is_read_behind_a_prefix(entry: catalogue.Entry) -> None:
    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(message=_message(entry), prefix=st.sampled_from(_PREFIXES))
    def check(message: tuple[str, dict[str, int]], prefix: str) -> None:
        text = message[0]
        if entry.fields and entry.fields[0].kind == "comm":
            text = "python3" + text[text.index(" invoked"):]  # a comm is one word here
        line = log_lines.split(prefix + text, None)
        assert line is not None and line.msg == text.strip(), (prefix + text, line)

    check()


def test_the_reader_looks_for_every_catalogued_kernel_text() -> None:
    """Each catalogued kernel message starts with one of the texts the reader looks for."""
    for entry in catalogue.KERNEL:
        head = catalogue._PLACEHOLDER.split(entry.format)
        start = head[0] or head[1]
        assert any(start.startswith(t) or t.startswith(start) for t in log_lines.KERNEL_TEXTS) or \
            entry.fields[0].kind in ("comm", "int"), entry.key


@pytest.mark.parametrize("line", [
    "kubelet[2271]: Got sys oom event: Task in /kubepods/x killed as a result of limit of /kubepods",
    'level=info msg="Killed process 5 (python) total-vm:1kB, anon-rss:1kB, file-rss:0kB"',
    "May 19 18:14:43 node-a systemd-oomd: Killed process 5 (python)",
])
def test_another_programs_quote_is_no_kernel_line(line: str) -> None:
    read = log_lines.split(line, None)
    assert read is not None and read.fmt == "plain" and read.msg == line.strip()
