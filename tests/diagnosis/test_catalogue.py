"""Every catalogued message, rendered from its format string with generated fields, is found again.

The recogniser is compiled from the format strings (podmortem.diagnosis.catalogue); here each
entry's format string is filled in by hypothesis, the way its printing code fills it in, put after
a prefix some tool adds, and `catalogue.find` must name the entry's verdict and give back every
number the message holds.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from podmortem.cli import diagnose_inputs
from podmortem.diagnosis import catalogue, pod_events, training_log
from podmortem.kernel import log_lines, oom_parser
from podmortem.reports import codes

#: Characters of generated words and texts: no "-" or ":", so that no field spells another message's
#: words ("Mem-Info:", "oom-kill:") before the one rendered.
_WORD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_."
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _size() -> st.SearchStrategy[tuple[str, int]]:
    """A size as torch ("20.00 MiB"), TensorFlow ("6.88GiB") or XLA ("8000000000 bytes") print it."""
    def torch_like(whole: int, cents: int, unit: str, space: bool) -> tuple[str, int]:
        text = f"{whole}.{cents:02d}{' ' if space else ''}{unit}"
        return text, catalogue.size_bytes(text)

    def numpy_like(units: float, unit: str) -> tuple[str, int]:
        # numpy's _ArrayMemoryError._size_to_string: three significant figures that keep their point
        # ("100. MiB", "7.45 GiB"), all the digits from 1000 up.
        text = f"{units:#.3g} {unit}" if round(units) < 1000 else f"{units:#.0f} {unit}"
        return text, catalogue.size_bytes(text)

    spelled = st.builds(torch_like, st.integers(0, 1023), st.integers(0, 99), st.sampled_from(_UNITS),
                        st.booleans())
    counted = st.integers(0, 10**12).map(lambda n: (f"{n} bytes", n))
    numpy = st.builds(numpy_like, st.floats(1, 1023.9), st.sampled_from(_UNITS[1:]))
    return st.one_of(spelled, counted, numpy)


#: Numbers the printing code prints signed (``%hd``, an exit code); the others are counts or ids.
_SIGNED = ("oom_score_adj", "exit_code", "signal")


def _value(kind: str, name: str = "") -> st.SearchStrategy[tuple[str, int | None]]:
    """A field's printed text and, for numbers, the number it stands for."""
    if kind == "int":
        return st.integers(-1000 if name in _SIGNED else 0, 10**12).map(lambda n: (str(n), n))
    if kind == "hex":
        return st.integers(0, 2**32).map(lambda n: (hex(n), n))
    if kind == "size":
        return _size()
    word = st.text(_WORD, min_size=1, max_size=20)
    if kind in ("word", "comm"):
        return word.map(lambda w: (w, None))
    if kind == "path":
        return st.lists(word, min_size=1, max_size=4).map(lambda parts: ("/" + "/".join(parts), None))
    return st.text(_WORD + " /|", min_size=1, max_size=30).map(lambda t: (t.strip() or "x", None))


_PLACEHOLDER = re.compile(catalogue._PLACEHOLDER.pattern)


def _render(entry: catalogue.Entry, values: list[str]) -> str:
    it = iter(values)
    text = _PLACEHOLDER.sub(lambda m: "%" if m.group(0) == "%%" else next(it), entry.format)
    return text.rstrip(" ")


@st.composite
def _message(draw: st.DrawFn, entry: catalogue.Entry) -> tuple[str, dict[str, int]]:
    printed: list[str] = []
    numbers: dict[str, int] = {}
    for f in entry.fields:
        text, number = draw(_value(f.kind, f.name))
        printed.append(text)
        if number is not None:
            numbers[f.name] = number
    return _render(entry, printed), numbers


#: Prefixes tools put before a message: a grep file name, a host, a level, a logger's, a viewer's
#: column, a rank; and any printable text ending where a prefix ends.
_PREFIXES = st.one_of(
    st.sampled_from([
        "", "messages-20150510:", "10.0.0.1: kern:    info: [2025-01-02T03:04:05.678Z]: ", "[Mar19 10:02] ",
        "[  +0.000003] ", "  12 ", "ERROR: ", "[rank3]: ", "trainer-0 | ", "\"", "│ ",
        "E0101 12:00:00.1 1 x.go:1] ",
    ]),
    st.builds(lambda text, end: text + end,
              st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=76),
              st.sampled_from([": ", "] ", " | ", ":"])),
)


@pytest.mark.parametrize("entry", catalogue.ENTRIES, ids=lambda e: e.key)
def test_every_entry_is_found_with_its_verdict_and_numbers(entry: catalogue.Entry) -> None:
    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(message=_message(entry), prefix=_PREFIXES)
    def check(message: tuple[str, dict[str, int]], prefix: str) -> None:
        text, numbers = message
        assume(catalogue.find(prefix) is None)  # a prefix that is itself a catalogued message is none
        found = catalogue.find(prefix + text)
        assert found is not None, prefix + text
        assert found.entry.verdict == entry.verdict, (found.entry.key, prefix + text)
        if found.entry is entry:
            for name, number in numbers.items():
                assert found.number(name) == number, (name, prefix + text)
        if entry.fields[:1] == () or entry.fields[0].kind not in ("comm", "text", "word", "path", "int"):
            assert found.start >= len(prefix.rstrip()) - 1, (found.start, prefix + text)

    check()


def test_entries_are_facts_with_a_source_and_a_known_verdict() -> None:
    assert len({e.key for e in catalogue.ENTRIES}) == len(catalogue.ENTRIES)
    for e in catalogue.ENTRIES:
        assert e.project and e.source and e.versions and e.format, e.key
        assert e.verdict is None or e.verdict in codes.VERDICTS, e.key
        assert e.kind in ("kernel", "training", "pod"), e.key
        # An entry read in its source says where; one that was not says nothing it did not read.
        assert bool(e.read_at) == e.verified, e.key


def test_numpy_keeps_a_bare_point_in_its_sizes() -> None:
    found = catalogue.find("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 100. MiB for an "
                           "array with shape (13107200,) and data type float64")
    assert found is not None and found.entry.key == "numpy-unable-to-allocate"
    assert found.number("size") == 100 * 2**20


@pytest.mark.parametrize("text", [
    "Process was Killed by the user",          # prose, not a shell's job report
    "Killed processes are listed below",
    "we caught MemoryError: and went on",
    "CUDA error: device-side assert triggered",  # a CUDA error, but not a lack of memory
])
def test_words_in_prose_are_no_message(text: str) -> None:
    found = catalogue.find(text)
    assert found is None or found.entry.verdict is None, found


def test_the_first_message_in_a_line_wins() -> None:
    found = catalogue.find("Memory cgroup out of memory: Killed process 7 (python) total-vm:1kB, "
                           "anon-rss:1kB, file-rss:0kB, shmem-rss:0kB")
    assert found is not None and found.entry.key == "kernel-killed-memcg"
    assert found.number("pid") == 7 and found.start == 0


#: A value the recogniser needs to see as the printing code would print it (not any word): TensorFlow
#: names a device by its full name, and a GPU OOM is one only on a GPU.
_AS_PRINTED: dict[tuple[str, str], st.SearchStrategy[tuple[str, int | None]]] = {
    ("tf-oom-tensor", "device"): st.integers(0, 15).map(
        lambda n: (f"/job:localhost/replica:0/task:0/device:GPU:{n}", None)),
    ("tf-oom-tensor", "allocator"): st.integers(0, 15).map(lambda n: (f"GPU_{n}_bfc", None)),
}


#: The kernel's fields within what the kernel can print: a comm of at most 15 characters (TASK_COMM_LEN),
#: a pid of at most PID_MAX_LIMIT, an oom_score_adj within OOM_SCORE_ADJ_MIN..MAX.
_KERNEL_VALUES: dict[str, st.SearchStrategy[tuple[str, int | None]]] = {
    "comm": st.text(_WORD, min_size=1, max_size=15).map(lambda w: (w, None)),
    "pid": st.integers(1, 4_194_304).map(lambda n: (str(n), n)),
    "oom_score_adj": st.integers(-1000, 1000).map(lambda n: (str(n), n)),
}


@st.composite
def _printed(draw: st.DrawFn, entry: catalogue.Entry) -> tuple[str, dict[str, int]]:
    printed: list[str] = []
    numbers: dict[str, int] = {}
    for f in entry.fields:
        kernel = _KERNEL_VALUES.get(f.name) if entry.kind == "kernel" else None
        value = _AS_PRINTED.get((entry.key, f.name), _value(f.kind, f.name) if kernel is None else kernel)
        text, number = draw(value)
        printed.append(text)
        if number is not None:
            numbers[f.name] = number
    return _render(entry, printed), numbers


def _by_verdict(*verdicts: str) -> list[catalogue.Entry]:
    return [e for e in catalogue.ENTRIES if e.verdict in verdicts]


_SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("entry", _by_verdict("cuda-oom"), ids=lambda e: e.key)
def test_every_gpu_oom_is_read_as_one_naming_its_framework_with_its_numbers(entry: catalogue.Entry) -> None:
    @_SETTINGS
    @given(message=_printed(entry), prefix=_PREFIXES)
    def check(message: tuple[str, dict[str, int]], prefix: str) -> None:
        text, numbers = message
        assume(catalogue.find(prefix) is None)
        oom = training_log.cuda_oom(["step 7 loss 0.25", prefix + text])
        assert oom is not None, prefix + text
        assert oom.framework == entry.framework, (oom.framework, prefix + text)
        for name in ("tried", "total", "free", "allocated", "device"):
            if name in numbers:
                assert getattr(oom, name) == numbers[name], (name, prefix + text)

    check()


@pytest.mark.parametrize("entry", _by_verdict("sigkill-not-oom"), ids=lambda e: e.key)
def test_every_reported_sigkill_is_read_with_its_pid(entry: catalogue.Entry) -> None:
    @_SETTINGS
    @given(message=_printed(entry), prefix=_PREFIXES)
    def check(message: tuple[str, dict[str, int]], prefix: str) -> None:
        text, numbers = message
        assume(catalogue.find(prefix) is None)
        kill = training_log.shell_kill(["epoch 2", prefix + text])
        assert kill is not None, prefix + text
        if kill.source == entry.key:
            assert kill.pid == numbers.get("pid"), prefix + text

    check()


@pytest.mark.parametrize("entry", _by_verdict("segfault"), ids=lambda e: e.key)
def test_every_reported_segfault_is_read(entry: catalogue.Entry) -> None:
    @_SETTINGS
    @given(message=_printed(entry), prefix=_PREFIXES)
    def check(message: tuple[str, dict[str, int]], prefix: str) -> None:
        text, _numbers = message
        assume(catalogue.find(prefix) is None)
        lines = ["epoch 2", prefix + text]
        read = training_log.worker_segfault(lines) if entry.key.startswith("torch-") else \
            training_log.shell_segfault(lines)
        assert read is not None and text.rstrip(".") in read, prefix + text

    check()


@pytest.mark.parametrize("entry", [e for e in catalogue.ENTRIES if e.kind == "pod" and e.verdict],
                         ids=lambda e: e.key)
def test_every_pod_message_pasted_alone_tells_the_pods_end(entry: catalogue.Entry) -> None:
    @_SETTINGS
    @given(message=_printed(entry), prefix=_PREFIXES)
    def check(message: tuple[str, dict[str, int]], prefix: str) -> None:
        text, _numbers = message
        assume(catalogue.find(prefix) is None)
        line = prefix + text
        assert pod_events.kind_of([line]), line
        (pod,) = pod_events.pods_from_events([line])
        status = pod["status"]
        told = status.get("message") or status["conditions"][0]["message"]
        assert text.rstrip(". ") in told, line

    check()


@pytest.mark.parametrize("entry", [e for e in catalogue.KERNEL if e.verdict], ids=lambda e: e.key)
def test_every_kernel_verdict_line_makes_its_text_kernel_text(entry: catalogue.Entry) -> None:
    @_SETTINGS
    @given(message=_printed(entry), prefix=_PREFIXES)
    def check(message: tuple[str, dict[str, int]], prefix: str) -> None:
        text, _numbers = message
        assume(catalogue.find(prefix) is None)
        assert diagnose_inputs.kernel_shaped(f"note\n{prefix}{text}\n".encode()), prefix + text

    check()


_KILL_LINES = [catalogue.BY_KEY[k] for k in (
    "kernel-killed-global", "kernel-killed-memcg", "kernel-killed-4x", "kernel-kill-choice-global",
    "kernel-kill-choice-memcg")]
_HEADERS = [catalogue.BY_KEY[k] for k in ("kernel-oom-header", "kernel-oom-header-nodemask",
                                          "kernel-oom-header-3x")]


@pytest.mark.parametrize("header", _HEADERS, ids=lambda e: e.key)
@pytest.mark.parametrize("entry", _KILL_LINES, ids=lambda e: e.key)
def test_every_kill_line_behind_any_prefix_is_a_record_with_its_victim(
    entry: catalogue.Entry, header: catalogue.Entry
) -> None:
    @_SETTINGS
    @given(head=_printed(header), message=_printed(entry), prefix=_PREFIXES)
    def check(head: tuple[str, dict[str, int]], message: tuple[str, dict[str, int]], prefix: str) -> None:
        text, numbers = message
        assume(catalogue.find(prefix) is None)
        # As tests/kernel/test_metamorphic.py: a prefix that is a log's own or a paste's mark is read as
        # one, and one that makes the line another program's quoting the kernel is no record's.
        alone = log_lines.split(prefix + "x", None)
        assume(alone is not None and alone.fmt == "plain" and alone.msg == (prefix + "x").strip())
        assume(not log_lines.quotes_kernel(prefix))
        records = oom_parser.parse_lines([prefix + head[0], prefix + text])
        assert len(records) == 1, (prefix + head[0], prefix + text)
        (record,) = records
        if "choice" in entry.key:
            assert record.chosen is not None and record.chosen.pid == numbers["pid"], prefix + text
        else:
            (killed,) = record.killed
            assert (killed.pid, killed.anon_rss_kb) == (numbers["pid"], numbers["anon_rss_kb"]), prefix + text
        if entry.verdict is not None:
            assert record.scope == ("global" if entry.verdict == "global-oom" else "memcg"), prefix + text

    check()
