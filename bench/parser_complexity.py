"""Benchmark: every parser of outside input runs in linear time in its input.

Each parser that reads what a trainer, the API server, a kubelet or a person's paste hands us is fed
one adversarial shape at 1x, 2x, 4x and 8x its base size: a kernel record then long ordinary lines,
long runs of continuation lines, deep nesting, a very long single line, many short lines. The time
of each size is the best of a few runs of this process's CPU time (``time.process_time``), so other
work on a shared machine counts little; a case too quick to time is repeated until its base size
takes about 20 ms. Growth per doubling is taken over the three doublings (the cube root of 8x over
1x), so one noisy step does not decide; above 2.3x per doubling a case FAILS and the script exits 1.
A linear parser doubles (2.0x), a quadratic one quadruples (4.0x).

For the kernel text, which ``diagnose`` streams, the peak of memory Python allocated (``tracemalloc``)
at 1x and 8x is printed too, the input arriving in 64 KiB pieces: it should stay flat (a very long
line included: ``diagnose`` reads 64 KiB of a line and skips the rest). (The other
readers take a bounded whole: a pod object or describe text up to 16 MiB, a watch event up to
16 MiB, a termination message up to 4 KiB, a request body up to the webhook's cap, a log's tail.)

The HTTP parameters are measured up to 8 KiB of query, the request line aiohttp accepts; a watch
event from 2 to 16 MiB, ``MAX_EVENT_BYTES``; an AdmissionReview's long value up to 1 MiB, the
webhook's default body cap.

glibc's malloc raises its mmap threshold after a large block is freed, so which sizes of a case
get their big buffers from mmap (grown by mremap, no copy) and which from the heap (grown by
copying) depends on what ran before: an 8x that costs 8 times its 4x with a linear parser. The
script runs itself again with the threshold pinned (``MALLOC_MMAP_THRESHOLD_``) so that every
size allocates alike. For the same reason a shape that is one long buffer starts above 2 MiB (a
core's L2 cache here) or stays within its reader's own bound, so that its four sizes do not
straddle the cache: 1 MiB in L2 and 8 MiB out of it differ by more than the algorithm does.

    python bench/parser_complexity.py [--only NAME] [--runs 5] [--scale F]

``--only`` takes a substring of the parser or shape; ``--scale`` multiplies every base size (0.25
for a quick look).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import io
import json
import os
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import yarl

from podmortem.cli import diagnose_files, diagnose_inputs
from podmortem.diagnosis import pasted, pod_describe, pod_documents, training_log
from podmortem.kernel import kmsg, oom_parser
from podmortem.logs.serving import http
from podmortem.operator import settings as operator_settings
from podmortem.operator.watching import admission, pod_watch
from podmortem.reports import sidecar_evidence as evidence

#: Above this growth per doubling a case fails: linear is 2.0, n log n about 2.2, quadratic 4.0.
LIMIT = 2.3
SCALES = (1, 2, 4, 8)
#: A case whose base size takes less CPU time than this is repeated to reach it.
MIN_TIMED_S = 0.02
#: Pieces a streamed input arrives in when its memory is measured (smaller than every 1x input).
PIECE = 64 << 10


@dataclass(frozen=True)
class Case:
    parser: str
    shape: str
    #: The input at ``n`` units (n = base size x scale).
    make: Callable[[int], Any]
    run: Callable[[Any], object]
    base: int
    #: Whether the parser streams its input (its memory peak is measured and should stay flat).
    streams: bool = False


# -- inputs ----------------------------------------------------------------------------------------

_RECORD = (
    "[  425.146217] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
    "[  425.146228] CPU: 0 UID: 0 PID: 6054 Comm: python3 Not tainted 6.18.44 #1\n"
    "[  425.146390] memory: usage 131072kB, limit 131072kB, failcnt 101\n"
    "[  425.146640] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/kubepods/pod1,task_memcg=/kubepods/pod1/c1,task=python3,pid=6054,uid=0\n"
    "[  425.146647] Memory cgroup out of memory: Killed process 6054 (python3) total-vm:98488kB, "
    "anon-rss:88820kB, file-rss:6616kB, shmem-rss:0kB, UID:0 pgtables:232kB oom_score_adj:0\n"
)


def _console_line(i: int) -> str:
    return f"{i:06d} epoch=3 step={i} loss=0.{i % 97:02d} lr=3e-4 grad_norm=1.{i % 89:02d} ".ljust(90, "x")


def record_then_long_lines(n: int) -> bytes:
    """Issue 36's paste: a kernel record, then a console's ordinary 90-character lines."""
    return (_RECORD + "".join(_console_line(i) + "\n" for i in range(n))).encode()


def continuation_run(n: int) -> bytes:
    """A stamped oom-kill line the kernel never ended, then ``n`` parts that each could be its rest."""
    head = "[  1.000000] oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/kubepods/pod1"
    return (head + "".join("\n ,task_memcg=/kubepods/pod1/" + "c" * 60 for _ in range(n)) + "\n").encode()


def many_records(n: int) -> bytes:
    """``n`` kills of one pid and cgroup a minute apart (a crash loop's records, or one pasted many times)."""
    out = []
    for i in range(n):
        t = 1000.0 + 60.0 * i
        out.append(
            f"[{t:12.6f}] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
            f"[{t + 0.001:12.6f}] Memory cgroup out of memory: Killed process 6054 (python3) "
            "total-vm:98488kB, "
            "anon-rss:88820kB, file-rss:6616kB, shmem-rss:0kB, UID:0 pgtables:232kB oom_score_adj:0\n"
        )
    return "".join(out).encode()


def many_short_lines(n: int) -> bytes:
    return "".join(f"[{i:6d}.000000] x\n" for i in range(n)).encode()


def long_single_line(n: int) -> bytes:
    return ("[  1.000000] python3 invoked oom-killer: gfp_mask=" + "(" * n + "\n").encode()


def read_kernel_text(data: bytes) -> object:
    """What ``podmortem diagnose`` does with kernel text: its reader's lines into the parser."""
    return read_kernel_stream(io.BytesIO(data))


def read_kernel_stream(stream: io.RawIOBase | io.BytesIO) -> object:
    with io.BufferedReader(stream) as buffered:  # type: ignore[arg-type]
        return oom_parser.parse_lines(diagnose_files.lines(buffered))


def read_log_stream(data: bytes) -> object:
    """A training log (or console capture) as ``diagnose`` reads it: chunks, a tail, kernel lines in it."""
    return diagnose_inputs.read_log(io.BytesIO(data), "log", look_for_kernel=True)  # type: ignore[arg-type]


def traceback_lines(n: int) -> list[str]:
    frames = [f'  File "/app/train.py", line {i}, in step{i}\n    loss = model(batch)\n' for i in range(n)]
    end = "RuntimeError: CUDA error: an illegal memory access\n"
    return ["Traceback (most recent call last):\n", *frames, end]


def long_log_line(n: int) -> list[str]:
    return ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate " + "1" * n + "\n"]


def chained_exceptions(n: int) -> list[str]:
    lines: list[str] = []
    for i in range(n):
        lines += ["Traceback (most recent call last):\n", f'  File "x.py", line {i}, in f\n',
                  f"ValueError: {i}\n",
                  "\nDuring handling of the above exception, another exception occurred:\n\n"]
    return lines


def pod_yaml(n: int) -> str:
    statuses = "".join(
        f"  - name: c{i}\n    containerID: containerd://{i:064x}\n    lastState:\n      terminated:\n"
        f"        exitCode: 137\n        reason: OOMKilled\n    ready: false\n    restartCount: 1\n"
        for i in range(n)
    )
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: d\nstatus:\n  phase: Failed\n" \
        "  containerStatuses:\n" + statuses


def pod_json(n: int) -> str:
    statuses = [{"name": f"c{i}", "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
                for i in range(n)]
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                       "status": {"phase": "Failed", "containerStatuses": statuses}}, indent=2)


def pod_fragment(n: int) -> str:
    """A part of a pod's YAML whose indentation was lost, with elisions: the loose reader's input."""
    return "lastState:\n" + "".join(
        f"terminated:\nexitCode: 137\nreason: OOMKilled\n...\nname: c{i}\n" for i in range(n))


def deep_json(n: int) -> str:
    return '{"kind": "Pod", "status": ' + '{"a": ' * n + "1" + "}" * n + "}"


def long_yaml_value(n: int) -> str:
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + "p" * n + "\nstatus:\n  phase: Failed\n"


def describe_text(n: int) -> str:
    containers = "".join(
        f"  c{i}:\n    Container ID:  containerd://{i:064x}\n    State:          Running\n"
        f"    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137\n"
        for i in range(n)
    )
    return f"Name:         p\nNamespace:    d\nStatus:       Running\nContainers:\n{containers}"


def describe_joined(n: int) -> str:
    """describe output whose lines were joined into one (a paste that lost its newlines)."""
    return "Name: p Namespace: d Status: Failed " + " ".join(
        f"c{i}: State: Terminated Reason: OOMKilled Exit Code: 137" for i in range(n))


def describe_long_line(n: int) -> str:
    return "Name:         p\nNamespace:    d\nMessage:      " + "a:" * n + "\n"


def parse_describe(text: str) -> object:
    try:
        return pod_describe.pods_from_describe(text)
    except pasted.BadInput:
        return None


def parse_document(text: str) -> object:
    try:
        return pod_documents.pods_from_document(text)
    except pasted.BadInput:
        return None


def evidence_string(n: int) -> bytes:
    return json.dumps({"v": 1, "comm": "x" * n}).encode()


def evidence_nested(n: int) -> bytes:
    return b"[" * n + b"]" * n


def parse_evidence(data: bytes) -> object:
    try:
        return evidence.parse(data)
    except evidence.EvidenceInvalid:
        return None


_INJECTION = operator_settings.SidecarInjectionSettings(image="podmortem:bench")


def review(pod: dict[str, Any]) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": "d", "object": pod}}).encode()


def review_containers(n: int) -> bytes:
    env = [{"name": "A", "value": "1"}]
    containers = [{"name": f"c{i}", "image": "trainer", "env": env} for i in range(n)]
    return review({"metadata": {"name": "p", "labels": {"podmortem.io/sidecar": "true"}},
                   "spec": {"containers": containers}})


def review_deep(n: int) -> bytes:
    return b'{"apiVersion": "admission.k8s.io/v1", "request": ' + b'{"a": ' * n + b"1" + b"}" * n + b"}"


def review_long_value(n: int) -> bytes:
    return review({"metadata": {"name": "p", "annotations": {"a": "x" * n}},
                   "spec": {"containers": [{"name": "c", "image": "i"}]}})


def admit(body: bytes) -> object:
    """The webhook's own steps on a request body: JSON (its errors answered 'allowed'), then the decision."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return admission.decide(parsed, _INJECTION)


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at : at + size]


def watch_lines(data: bytes, chunk: int) -> object:
    async def collect() -> int:
        count = 0
        async for _ in pod_watch.event_lines(_chunks(data, chunk), limit=len(data) + 1):
            count += 1
        return count

    return asyncio.run(collect())


def watch_long_event(n: int) -> bytes:
    return b'{"type": "MODIFIED", "object": {"a": "' + b"x" * n + b'"}}\n'


def watch_many_events(n: int) -> bytes:
    return b'{"type": "MODIFIED", "object": {}}\n' * n


def query(text: str) -> object:
    try:
        return http.parse_query(yarl.URL("/logs/d/p?" + text).query)
    except http.BadParams:
        return None


def _kmsg(data: bytes) -> object:
    return kmsg.parse_record(data)


CASES = [
    Case("kernel (diagnose)", "a record then long lines", record_then_long_lines, read_kernel_text, 3000,
         True),
    Case("kernel (diagnose)", "continuation run", continuation_run, read_kernel_text, 3000, True),
    Case("kernel (diagnose)", "many records, same kill", many_records, read_kernel_text, 400),
    Case("kernel (diagnose)", "many short lines", many_short_lines, read_kernel_text, 20000, True),
    Case("kernel (diagnose)", "very long single line", long_single_line, read_kernel_text, 4 << 20, True),
    Case("kernel (log + console)", "a record then long lines", record_then_long_lines, read_log_stream, 3000,
         True),
    # One read() of /dev/kmsg is one record of at most kmsg.READ_SIZE (16 KiB): 8x is that.
    Case("kernel (/dev/kmsg)", "very long record", lambda n: b"4,1,2,-;" + b"x" * n, _kmsg,
         kmsg.READ_SIZE // 8 - 8),
    Case("training log", "long traceback", traceback_lines, training_log.read, 2000),
    Case("training log", "chained exceptions", chained_exceptions, training_log.read, 500),
    Case("training log", "very long single line", long_log_line, training_log.read, 1 << 18),
    Case("pod document", "many statuses (YAML)", pod_yaml, parse_document, 100),
    Case("pod document", "many statuses (JSON)", pod_json, parse_document, 500),
    Case("pod document", "fragment, indentation lost", pod_fragment, parse_document, 300),
    Case("pod document", "deep nesting (JSON)", deep_json, parse_document, 100),
    Case("pod document", "very long single line", long_yaml_value, parse_document, 1 << 18),
    Case("describe", "many containers", describe_text, parse_describe, 300),
    Case("describe", "lines joined into one", describe_joined, parse_describe, 300),
    Case("describe", "very long single line", describe_long_line, parse_describe, 1 << 17),
    Case("sidecar evidence", "long string (to the cap)", evidence_string, parse_evidence, 400),
    Case("sidecar evidence", "deep nesting (to the cap)", evidence_nested, parse_evidence, 200),
    Case("sidecar evidence", "over the cap", lambda n: b" " * n + b"{}", parse_evidence, 1 << 20),
    Case("AdmissionReview", "many containers", review_containers, admit, 200),
    Case("AdmissionReview", "deep nesting", review_deep, admit, 100),
    # The webhook reads at most max_request_bytes of a body (1 MiB by default): 8x is that.
    Case("AdmissionReview", "very long value", review_long_value, admit, 128 << 10),
    Case("watch lines", "one long event, 4 KiB chunks", watch_long_event,
         lambda d: watch_lines(d, 4 << 10), 2 << 20),
    Case("watch lines", "many short events, 1 KiB chunks", watch_many_events,
         lambda d: watch_lines(d, 1 << 10), 10000),
    # aiohttp refuses a request line over 8,190 bytes (its max_line_size) before a handler runs: 8x is that.
    Case("HTTP parameters", "one parameter many times", lambda n: "tail=1&" * n, query, 140),
    Case("HTTP parameters", "many unknown parameters", lambda n: "".join(f"x{i}=1&" for i in range(n)), query,
         120),
    Case("HTTP parameters", "very long value", lambda n: "since=" + " " * n + "1h", query, 1000),
]


# -- measuring -------------------------------------------------------------------------------------


def _cpu(case: Case, data: Any, repeat: int, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        gc.collect()  # a full pass of the cyclic collector left over from the run before is not this run's
        t0 = time.process_time()
        for _ in range(repeat):
            case.run(data)
        best = min(best, time.process_time() - t0)
    return best


def _repeats(case: Case, data: Any) -> int:
    """How many calls make the base size take `MIN_TIMED_S` (1 for a case that is slow enough)."""
    repeat = 1
    while (took := _cpu(case, data, repeat, 1)) < MIN_TIMED_S and repeat < 1 << 16:
        repeat *= 2 if took * 8 > MIN_TIMED_S else 8
    return repeat


def measure(case: Case, runs: int, scale: float) -> tuple[list[float], float, str]:
    base = max(1, int(case.base * scale))
    inputs = {k: case.make(base * k) for k in SCALES}
    repeat = _repeats(case, inputs[1])
    times = [_cpu(case, inputs[k], repeat, runs) / repeat for k in SCALES]
    growth = (times[-1] / times[0]) ** (1 / (len(SCALES) - 1)) if times[0] > 0 else float("inf")
    memory = ""
    if case.streams:
        peaks = [_peak_of_stream(case, inputs[k]) for k in (1, SCALES[-1])]
        memory = f"{peaks[0] / 1024:,.0f} -> {peaks[1] / 1024:,.0f} KiB"
    return times, growth, memory


def _peak_of_stream(case: Case, data: bytes) -> int:
    """Python's peak allocation while the input streams through in `PIECE` pieces (the input's own
    bytes are made before counting starts)."""
    pieces = [data[at : at + PIECE] for at in range(0, len(data), PIECE)]
    tracemalloc.start()
    try:
        if case.run is read_kernel_text:
            read_kernel_stream(_Pieces(pieces))
        elif case.run is read_log_stream:
            diagnose_inputs.read_log(_Pieces(pieces), "log", look_for_kernel=True)
        else:
            case.run(data)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class _Pieces(io.RawIOBase):
    """A stream that arrives in pieces, each freed once read."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces[::-1]
        self.left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self.left and self.pieces:
            self.left = self.pieces.pop()
        data, self.left = self.left[: len(buffer)], self.left[len(buffer) :]
        buffer[: len(data)] = data
        return len(data)


#: glibc's malloc with its mmap threshold pinned (the environment variable also turns off its
#: dynamic adjustment); see the module's docstring.
_PINNED = {"MALLOC_MMAP_THRESHOLD_": str(128 << 10)}


def main() -> int:
    if any(os.environ.get(k) != v for k, v in _PINNED.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **_PINNED})
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="a substring of the parser or shape")
    parser.add_argument("--runs", type=int, default=5, help="runs per size; the best counts")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every base size")
    args = parser.parse_args()
    cases = [c for c in CASES if args.only.lower() in f"{c.parser} {c.shape}".lower()]
    print(f"{'parser':<22} {'shape':<32} " + " ".join(f"{f'{k}x ms':>9}" for k in SCALES)
          + f" {'per 2x':>7}  verdict  memory peak 1x -> 8x")
    failed = []
    for case in cases:
        times, growth, memory = measure(case, args.runs, args.scale)
        verdict = "ok" if growth <= LIMIT else "FAIL"
        if verdict == "FAIL":
            failed.append(case)
        cells = " ".join(f"{t * 1000:9.2f}" for t in times)
        print(f"{case.parser:<22} {case.shape:<32} {cells} {growth:6.2f}x  {verdict:<7}  {memory}",
              flush=True)
    print(f"{len(cases) - len(failed)} of {len(cases)} cases within {LIMIT}x per doubling")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
