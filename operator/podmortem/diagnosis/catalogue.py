"""The failure messages a training pod's death leaves, as the code that prints them writes them.

Why a catalogue: each round of hand-written patterns fitted the records it was shown, and the
next unseen record came from a framework or a tool whose wording no pattern knew. Here every
entry is a fact copied from the printing code (the project, its source file, the format string
as written there, the versions that print it) with the verdict the message means, and the
recogniser is compiled from those format strings, so that adding a message is adding a fact.
``tests/diagnosis/test_catalogue.py`` renders every format string with generated fields and
checks that `find` gives the entry's verdict and numbers back.

A format string is written in its source's own notation: printf conversions (``%d``, ``%lu``,
``%s``, ``%#x``, ``%pGg``...) for C, ``{}`` for Python's ``str.format``, C++ stream pieces and
f-strings; C++ ``<<`` and ``TORCH_CHECK`` argument lists are written with ``{}`` where a value
goes. `Field` says, in order, what each placeholder holds, which is what the recogniser reads.

A message is found wherever it starts in a line (`find`): after a grep file name, a host, a
level, a viewer's columns or a logging prefix. Each entry's longest literal piece is looked for
first (a substring test), and only a line holding it is matched, from at most `Entry.lead`
characters before it, with bounded fields: linear in the line's length.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

#: What a field holds, as a regex: bounded, so that a match costs at most a constant per position.
_KIND_PATTERNS: dict[str, str] = {
    "int": r"-?\d{1,20}",
    "hex": r"(?:0x)?[0-9a-fA-F]{1,16}",
    #: A size as the printing code formats it: torch's ``format_size`` ("30.29 GiB"), TensorFlow's
    #: ``HumanReadableNumBytes`` ("6.88GiB"), XLA's byte counts ("8000000000 bytes"), NumPy's
    #: ``'{:#.3g} {}'`` (which keeps a bare point: "100. MiB").
    "size": r"\d{1,20}(?:\.\d{0,6})?\s?(?:[KMGTPE]i?B|B|bytes)",
    "word": r"[^\s,;()]{1,255}",
    #: A kernel task's comm before " invoked oom-killer": its last word (comms are 15 characters).
    "comm": r"\S{1,64}",
    "path": r"/[^\s,]{0,1023}",
    #: Free text (a comm, a shape, a signal's name): any characters, up to the next literal.
    "text": r".{0,512}?",
    #: Free text at the end of the message: the rest of the line.
    "rest": r".{0,4096}",
}
#: The pattern of a printed size (`_KIND_PATTERNS`'s "size"), for recognisers that read the same sizes.
SIZE_PATTERN = _KIND_PATTERNS["size"]
_SIZE_UNITS = {
    "B": 1, "BYTES": 1, "KB": 1024, "KIB": 1024, "MB": 1024**2, "MIB": 1024**2, "GB": 1024**3,
    "GIB": 1024**3, "TB": 1024**4, "TIB": 1024**4, "PB": 1024**5, "PIB": 1024**5, "EB": 1024**6,
    "EIB": 1024**6,
}
#: A placeholder in any of the notations above: printf conversions with flags, width, length and the
#: kernel's ``%p`` extensions, Go's ``%v``; ``{}``/``{name}``/``{name!r}``/``{:fmt}``.
_PLACEHOLDER = re.compile(
    r"%(?:[#0 +-]{0,3}\*?\d{0,3}(?:hh|h|ll|l|z|j|t)?[diouxXscvq]|\*?p[A-Za-z]{1,3}|%)|\{[^{}]{0,32}\}"
)


@dataclass(frozen=True)
class Field:
    """One placeholder of a format string: what it is called in the report and what it holds."""

    name: str
    kind: str  # a key of _KIND_PATTERNS


@dataclass(frozen=True)
class Entry:
    """One message, as its printing code writes it, and what it means."""

    key: str
    project: str
    source: str
    #: The format string as written in ``source`` (see the module's notes on notation).
    format: str
    versions: str
    #: The verdict code the message means (`podmortem.reports.codes.VERDICTS`), or None where it only
    #: places a record (a kernel OOM header, Mem-Info) and the rest of the record decides.
    verdict: str | None
    fields: tuple[Field, ...] = ()
    #: "kernel" (the kernel's own text: a line holding it is kernel text whatever precedes it),
    #: "training" (a trainer's, framework's or shell's words), "pod" (the kubelet's, the API's).
    kind: str = "training"
    #: The framework or program that printed it, as the report names it ("PyTorch", "TensorFlow"...).
    framework: str = ""
    #: The message is the whole line after its prefix (a shell's lone ``Killed``): nothing may follow.
    whole: bool = False
    #: Whether the format string was read in the printing code's own source (`read_at` says where),
    #: rather than taken from printed records or memory: an unverified entry is a guess to check.
    verified: bool = False
    #: Where the format string was read: repository and path, with the commit or version when known.
    read_at: str = ""
    #: The message must start at a word boundary (a shell's ``Killed`` is not ``...Killed``).
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)
    anchor: str = field(init=False, repr=False, compare=False)
    lead: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pattern, anchor, lead = _compile(self.format, self.fields, whole=self.whole)
        object.__setattr__(self, "pattern", pattern)
        object.__setattr__(self, "anchor", anchor)
        object.__setattr__(self, "lead", lead)


def _compile(fmt: str, fields: tuple[Field, ...], *, whole: bool) -> tuple[re.Pattern[str], str, int]:
    """The regex of a format string (one named group per field), its longest literal piece, and how
    many characters of a match can come before that piece at most."""
    pieces: list[str] = []
    literals: list[tuple[str, int]] = []  # (literal, most characters before it in a match)
    before = 0
    at = 0
    index = 0
    for m in _PLACEHOLDER.finditer(fmt):
        literal = fmt[at:m.start()]
        if m.group(0) == "%%":
            literal += "%"
            pieces.append(_literal(literal))
            literals.append((literal, before))
            before += len(literal)
            at = m.end()
            continue
        pieces.append(_literal(literal))
        literals.append((literal, before))
        before += len(literal)
        if index >= len(fields):
            raise ValueError(f"{fmt!r}: more placeholders than fields")
        f = fields[index]
        pieces.append(f"(?P<{f.name}>{_KIND_PATTERNS[f.kind]})")
        before += _most(f.kind)
        index += 1
        at = m.end()
    if index != len(fields):
        raise ValueError(f"{fmt!r}: {len(fields)} fields for {index} placeholders")
    tail = fmt[at:].rstrip(" ")  # "%v. ": the kubelet's messages are joined; a line ends without it
    # A message's final full stop is the one character a poster drops ("... Segmentation fault"):
    # the message is whole without it.
    stop = tail.endswith(".") and len(fmt) > 1
    if stop:
        tail = tail[:-1]
    pieces.append(_literal(tail) + (r"\.?" if stop else ""))
    literals.append((tail, before))
    body = "".join(pieces)
    if fmt[:1].isalnum():
        body = r"(?<![\w])" + body  # a word of its own: "Killed" is not the end of "NotKilled"
    if whole:
        # The whole line after a prefix: at its start, after a progress bar's "\r", or after a
        # prefix's closing bracket, bar, colon or line number ("[pod/x] Killed", "node | Killed",
        # "[rank0]: ", "  12 Killed"), inside quote marks ("\"Killed\","), or Markdown's emphasis
        # ("**Killed**", a poster's bold).
        body = (rf"(?:^|(?<=[\r\]|│:>\d\"'*]))[ \t]{{0,{_WHOLE_SPACES}}}" + body
                + r"\s*(?:[\"'],?\s*|\*{1,3}\s*)?$")
    anchor, lead = max(literals, key=lambda item: len(item[0].strip()))
    lead += len(anchor) - len(anchor.lstrip()) + (_WHOLE_SPACES if whole else 0)
    return re.compile(body), anchor.strip(), lead


#: Spaces a whole-line message may have before it, after its prefix (a viewer's column, padding).
_WHOLE_SPACES = 64


def _literal(text: str) -> str:
    """A literal piece; a space matches a run of spaces (a shell pads its columns)."""
    return " +".join(re.escape(part) for part in re.split(r" +", text))


def _most(kind: str) -> int:
    return {"int": 21, "hex": 18, "size": 36, "word": 255, "comm": 64, "path": 1024, "text": 512,
            "rest": 4096}[kind]


def _f(*spec: str) -> tuple[Field, ...]:
    """Fields from ``"name:kind"`` strings."""
    return tuple(Field(*s.split(":")) for s in spec)


_KERNEL = "Linux kernel"
_TORCH = "PyTorch"
#: Where the kernel's OOM messages were read: the one stored tree of mm/oom_kill.c (a 4.14-4.18 tree,
#: with ``mmap_sem`` and ``or sacrifice child``) and the stored 5.x and 6.x texts of the same calls.
_OOM_KILL_4X = "torvalds/linux@c797bc88 mm/oom_kill.c"
_MEMCONTROL = "mm/memcontrol.c as stored (file ids 2480715, 5479647: mem_cgroup_print_oom_*)"
_DL_CPP = "pytorch torch/csrc/DataLoader.cpp as stored (file id 31280903)"
#: zsh's job report: printjob() writes "zsh: " (the current job) or "[N]  + " and, with jobs -l, the pid,
#: then sigmsg() padded, then the job's text; sigmsg's words come from Src/signames2.awk.
_ZSH_JOBS = ("zsh-users/zsh@01ae64c0 Src/jobs.c printjob() and zsh-users/zsh@04a89199 Src/signames2.awk "
             "(KILL: \"killed\", SEGV: \"segmentation fault\")")
_HELPERS_GO = ("kubernetes pkg/kubelet/eviction/helpers.go as stored (file ids 36239374, 46230366259; the "
               "1.27+ wording quoted from master by file id 60868225381)")

#: strsignal()'s words for SIGKILL and SIGSEGV in glibc's translations (bash and dash print them for a job
#: killed by a signal, in the user's locale: "已杀死" under zh_CN.UTF-8), as compiled in glibc 2.36's libc.mo.
_GLIBC_SIGNAL_WORDS: tuple[tuple[str, str, str | None], ...] = (
    ("zh_CN", "已杀死", "段错误"),
    ("zh_TW", "強制結束", "程式記憶體區段錯誤"),
    ("ja", "強制終了", None),  # ja keeps "Segmentation fault"
    ("ko", "죽었음", "세그멘테이션 오류"),
    ("de", "Getötet", "Speicherzugriffsfehler"),
    ("fr", "Processus arrêté", "Erreur de segmentation"),
    ("es", "Terminado (killed)", "Violación de segmento"),
    ("it", "Ucciso", "Errore di segmentazione"),
    ("pt_BR", "Morto", "Falha de segmentação"),
    ("ru", "Убито", "Ошибка сегментирования"),
)
_GLIBC_PO = "glibc 2.36 po/{}.po as compiled (/usr/share/locale/{}/LC_MESSAGES/libc.mo, Debian 12's locales)"
_LOCALIZED_SIGNAL_REPORTS: tuple[Entry, ...] = tuple(
    Entry(f"shell-{what}-{locale}", "bash/dash",
          f"bash jobs.c notify_of_job_status: j_strsignal({signal}), strsignal() translated by glibc for the "
          f"{locale} locale",
          words, "bash 3-5, dash 0.5; glibc 2.x", verdict, whole=True, framework="shell", verified=True,
          read_at=_GLIBC_PO.format(locale, locale))
    for locale, killed, segv in _GLIBC_SIGNAL_WORDS
    for what, signal, words, verdict in (("killed", "SIGKILL", killed, "sigkill-not-oom"),
                                         ("segfault", "SIGSEGV", segv, "segfault"))
    if words is not None
)

#: zsh's job report for a numbered job: printjob() writes "[%ld]  %c " (the job's number, then '+' for the
#: current job, '-' for the previous, ' ' for another), with jobs -l or LONG_LIST_JOBS the pid ("%d "), then
#: sigmsg(SIGKILL) padded to the longest status, then the job's text. The notification of a job that
#: ended (what a log or terminal keeps) carries the pid; `jobs` without -l, which does not, is a query.
_ZSH_NUMBERED_KILLS: tuple[Entry, ...] = tuple(
    Entry(f"zsh-killed-job{suffix}", "zsh",
          "Src/jobs.c printjob, a numbered job (sigmsg(SIGKILL) = \"killed\")",
          fmt, "zsh 4-5", "sigkill-not-oom", fields, framework="zsh", verified=True, read_at=_ZSH_JOBS)
    for suffix, fmt, fields in (
        ("-pid", "[%d] %d killed %s", _f("job:int", "pid:int", "command:rest")),
        ("-current-pid", "[%d] + %d killed %s", _f("job:int", "pid:int", "command:rest")),
        ("-previous-pid", "[%d] - %d killed %s", _f("job:int", "pid:int", "command:rest")),
    )
)
#: Volcano's evictor (pkg/scheduler/cache/cache.go defaultEvictor.Evict): the victim's Warning event
#: "Evict" with fmt.Sprintf("Pod is evicted, because of %v", reason); the actions pass "preempt" (a
#: higher-priority job in the queue) and "reclaim" (another queue taking back its share): both are the
#: scheduler taking the node from a running pod for another, a preemption.
_VOLCANO_EVICT = ("volcano-sh/volcano pkg/scheduler/cache/cache.go defaultEvictor.Evict as stored (file ids "
                  "6326600503, 21310075121, 21728888964)")

ENTRIES: tuple[Entry, ...] = (
    # -- the kernel: mm/oom_kill.c ----------------------------------------------------------------
    Entry("kernel-oom-header", _KERNEL, "mm/oom_kill.c dump_header()",
          "%s invoked oom-killer: gfp_mask=%#x(%pGg), order=%d, oom_score_adj=%hd",
          "4.5-4.8, 4.19-6.12 (4.9-4.18 print a nodemask between: kernel-oom-header-nodemask)", None,
          _f("comm:comm", "gfp_mask:hex", "gfp_flags:text", "order:int", "oom_score_adj:int"),
          kind="kernel", framework="kernel", verified=True,
          read_at="mm/oom_kill.c as compiled (file id 65150787329, @.str.85) and its 4.19 change (file id "
                  "24049981624)"),
    Entry("kernel-oom-header-nodemask", _KERNEL, "mm/oom_kill.c dump_header() (pr_warn + pr_cont)",
          "%s invoked oom-killer: gfp_mask=%#x(%pGg), nodemask=%*pbl,  order=%d, oom_score_adj=%hd",
          "4.9-4.18 (nodemask is \"(null)\" when none)", None,
          _f("comm:comm", "gfp_mask:hex", "gfp_flags:text", "nodemask:text", "order:int",
             "oom_score_adj:int"),
          kind="kernel", framework="kernel", verified=True, read_at=_OOM_KILL_4X),
    Entry("kernel-oom-header-3x", _KERNEL, "mm/oom_kill.c dump_header()",
          "%s invoked oom-killer: gfp_mask=0x%x, order=%d, oom_score_adj=%hd",
          "3.10-4.4", None, _f("comm:comm", "gfp_mask:hex", "order:int", "oom_score_adj:int"),
          kind="kernel", framework="kernel", verified=True,
          read_at="mm/oom_kill.c dump_header() as stored (file ids 38977457, 15125783511)"),
    Entry("kernel-oom-kill-summary", _KERNEL,
          "mm/oom_kill.c dump_oom_summary()/dump_oom_victim(), with cpuset_print_current_mems_allowed() "
          "and mem_cgroup_print_oom_context() continuing the line",
          "oom-kill:constraint=%s,nodemask=%*pbl,cpuset=%s,mems_allowed=%*pbl,oom_memcg=%s,task_memcg=%s,"
          "task=%s,pid=%d,uid=%d",
          "5.0-6.12 (4.19: the memcg context before the cpuset)", None,
          _f("constraint:word", "nodemask:text", "cpuset:text", "mems_allowed:text", "oom_memcg:text",
             "task_memcg:text", "task:text", "pid:int", "uid:int"),
          kind="kernel", framework="kernel", verified=True,
          read_at="mm/oom_kill.c dump_oom_summary() as stored (file id 18158938699) and mm/memcontrol.c "
                  "mem_cgroup_print_oom_context() (file id 2480715)"),
    Entry("kernel-oom-kill-summary-global", _KERNEL,
          "the same line for a global OOM: mem_cgroup_print_oom_context() writes \",global_oom\" in place of "
          "\",oom_memcg=...\"",
          "oom-kill:constraint=%s,nodemask=%*pbl,cpuset=%s,mems_allowed=%*pbl,global_oom,task_memcg=%s,"
          "task=%s,pid=%d,uid=%d",
          "5.0-6.12", None,
          _f("constraint:word", "nodemask:text", "cpuset:text", "mems_allowed:text", "task_memcg:text",
             "task:text", "pid:int", "uid:int"),
          kind="kernel", framework="kernel", verified=True,
          read_at="mm/memcontrol.c mem_cgroup_print_oom_context() (file id 2480715: "
                  "pr_cont(\",global_oom\"))"),
    Entry("kernel-killed-global", _KERNEL, "mm/oom_kill.c __oom_kill_process(victim, \"Out of memory\")",
          "Out of memory: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB, "
          "shmem-rss:%lukB",
          "5.1-6.12 (5.3+: UID:%u pgtables:%lukB oom_score_adj:%hd follow)", "global-oom",
          _f("pid:int", "comm:text", "total_vm_kb:int", "anon_rss_kb:int", "file_rss_kb:int",
             "shmem_rss_kb:int"),
          kind="kernel", framework="kernel", verified=True,
          read_at="mm/oom_kill.c __oom_kill_process() \"%s: Killed process ...\" as compiled (file id "
                  "65150787329, @.str.83) and in its patches (file ids 6063354008, 11053562637)"),
    Entry("kernel-killed-memcg", _KERNEL,
          "mm/oom_kill.c __oom_kill_process(victim, \"Memory cgroup out of memory\")",
          "Memory cgroup out of memory: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, "
          "file-rss:%lukB, shmem-rss:%lukB",
          "5.1-6.12 (5.3+: UID:%u pgtables:%lukB oom_score_adj:%hd follow)", "memcg-limit",
          _f("pid:int", "comm:text", "total_vm_kb:int", "anon_rss_kb:int", "file_rss_kb:int",
             "shmem_rss_kb:int"),
          kind="kernel", framework="kernel", verified=True,
          read_at="mm/oom_kill.c __oom_kill_process() as compiled (file id 65150787329, @.str.83)"),
    Entry("kernel-killed-4x", _KERNEL, "mm/oom_kill.c oom_kill_process()",
          "Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB",
          "3.10-5.0 (4.6+: shmem-rss:%lukB follows)", None,
          _f("pid:int", "comm:text", "total_vm_kb:int", "anon_rss_kb:int", "file_rss_kb:int"),
          kind="kernel", framework="kernel", verified=True, read_at=_OOM_KILL_4X),
    Entry("kernel-kill-choice-memcg", _KERNEL,
          "mm/oom_kill.c oom_kill_process(oc, \"Memory cgroup out of memory\"): \"%s: Kill process %d (%s) "
          "score %u or sacrifice child\"",
          "Memory cgroup out of memory: Kill process %d (%s) score %u or sacrifice child",
          "3.10-5.0", "memcg-limit", _f("pid:int", "comm:text", "score:int"),
          kind="kernel", framework="kernel", verified=True, read_at=_OOM_KILL_4X),
    Entry("kernel-kill-choice-global", _KERNEL,
          "mm/oom_kill.c oom_kill_process(oc, \"Out of memory\"): \"%s: Kill process %d (%s) score %u or "
          "sacrifice child\"",
          "Out of memory: Kill process %d (%s) score %u or sacrifice child",
          "3.10-5.0", "global-oom", _f("pid:int", "comm:text", "score:int"),
          kind="kernel", framework="kernel", verified=True, read_at=_OOM_KILL_4X),
    Entry("kernel-oom-reaper", _KERNEL, "mm/oom_kill.c __oom_reap_task_mm() / oom_reap_task_mm()",
          "oom_reaper: reaped process %d (%s), now anon-rss:%lukB, file-rss:%lukB, shmem-rss:%lukB",
          "4.6-6.12", None,
          _f("pid:int", "comm:text", "anon_rss_kb:int", "file_rss_kb:int", "shmem_rss_kb:int"),
          kind="kernel", framework="kernel", verified=True, read_at=_OOM_KILL_4X),
    Entry("kernel-no-killable", _KERNEL, "mm/oom_kill.c out_of_memory(): panic()",
          "Out of memory and no killable processes...", "3.10-6.12", None, kind="kernel", framework="kernel",
          verified=True, read_at="mm/oom_kill.c out_of_memory() in a stored patch (file id 30338694702)"),
    Entry("kernel-oom-group", _KERNEL, "mm/memcontrol.c mem_cgroup_print_oom_group()",
          "Tasks in %s are going to be killed due to memory.oom.group set", "4.19-6.12", "memcg-limit",
          _f("memcg:word"), kind="kernel", framework="kernel", verified=True, read_at=_MEMCONTROL),
    Entry("kernel-tasks-state", _KERNEL, "mm/oom_kill.c dump_tasks()",
          "Tasks state (memory values in pages):", "4.18-6.12", None, kind="kernel", framework="kernel",
          verified=True, read_at="mm/oom_kill.c as compiled (file id 41765683676, @.str.18)"),
    # -- the kernel: mm/memcontrol.c --------------------------------------------------------------
    Entry("kernel-task-in-limit", _KERNEL, "mm/memcontrol.c mem_cgroup_print_oom_info() (pr_info + pr_cont)",
          "Task in %s killed as a result of limit of %s", "3.10-4.18", "memcg-limit",
          _f("task_memcg:path", "limit_memcg:path"), kind="kernel", framework="kernel", verified=True,
          read_at=_MEMCONTROL),
    Entry("kernel-memcg-usage", _KERNEL, "mm/memcontrol.c mem_cgroup_print_oom_meminfo()",
          "memory: usage %llukB, limit %llukB, failcnt %lu", "3.10-6.12 (3.x: failcnt %llu)", "memcg-limit",
          _f("usage_kb:int", "limit_kb:int", "failcnt:int"), kind="kernel", framework="kernel", verified=True,
          read_at=_MEMCONTROL),
    Entry("kernel-memsw-usage", _KERNEL, "mm/memcontrol.c mem_cgroup_print_oom_meminfo()",
          "memory+swap: usage %llukB, limit %llukB, failcnt %lu", "3.10-6.12 (v1)", "memcg-limit",
          _f("usage_kb:int", "limit_kb:int", "failcnt:int"), kind="kernel", framework="kernel", verified=True,
          read_at=_MEMCONTROL),
    Entry("kernel-kmem-usage", _KERNEL, "mm/memcontrol.c mem_cgroup_print_oom_meminfo()",
          "kmem: usage %llukB, limit %llukB, failcnt %lu", "3.8-6.12 (v1)", "memcg-limit",
          _f("usage_kb:int", "limit_kb:int", "failcnt:int"), kind="kernel", framework="kernel", verified=True,
          read_at=_MEMCONTROL),
    Entry("kernel-swap-usage", _KERNEL, "mm/memcontrol.c mem_cgroup_print_oom_meminfo()",
          "swap: usage %llukB, limit %llukB, failcnt %lu", "4.19-6.12 (v2)", "memcg-limit",
          _f("usage_kb:int", "limit_kb:int", "failcnt:int"), kind="kernel", framework="kernel", verified=True,
          read_at=_MEMCONTROL),
    Entry("kernel-memcg-stats", _KERNEL,
          "mm/memcontrol.c mem_cgroup_print_oom_meminfo(): pr_info(\"Memory cgroup stats for \") + the path "
          "+ pr_cont(\":\")",
          "Memory cgroup stats for %s:", "3.10-6.12", "memcg-limit", _f("memcg:word"),
          kind="kernel", framework="kernel", verified=True, read_at=_MEMCONTROL),
    # -- the kernel: show_mem (lib/show_mem.c, mm/page_alloc.c; mm/show_mem.c from 6.1) ----------------
    Entry("kernel-mem-info", _KERNEL, "lib/show_mem.c show_mem() (mm/show_mem.c __show_mem() from 6.1)",
          "Mem-Info:", "3.10-6.12", None, kind="kernel", framework="kernel", verified=True,
          read_at="mm/show_mem.c __show_mem() as stored (file id 5267661526) and lib/show_mem.c (file id "
                  "46928360610)"),
    Entry("kernel-pages-ram", _KERNEL, "lib/show_mem.c show_mem() (mm/show_mem.c __show_mem() from 6.1)",
          "%lu pages RAM", "3.10-6.12", None, _f("pages:int"), kind="kernel", framework="kernel",
          verified=True, read_at="lib/show_mem.c show_mem() as stored (file ids 86288342, 66535463779)"),
    Entry("kernel-pagecache", _KERNEL,
          "mm/page_alloc.c show_free_areas() (mm/show_mem.c __show_free_areas() from 6.1)",
          "%ld total pagecache pages", "3.10-6.12", None, _f("pages:int"), kind="kernel", framework="kernel",
          verified=True, read_at="mm/page_alloc.c show_free_areas() in a stored patch (file id 1248821556)"),
    # -- NVIDIA's kernel driver ---------------------------------------------------------------------
    Entry("nvidia-xid", "NVIDIA driver",
          "src/nvidia/src/kernel/gpu/rc/kernel_rc.c krcReportXid() (open-gpu-kernel-modules); the closed "
          "driver prints the same prefix",
          "NVRM: Xid (PCI:%04x:%02x:%02x): %d, %s",
          "open and closed drivers 3xx-5xx (Xid 31, 43, 48, 79, 94...)", None,
          _f("pci_domain:hex", "pci_bus:hex", "pci_slot:text", "xid:int", "detail:rest"), kind="kernel",
          framework="NVIDIA driver", verified=True,
          read_at="NVIDIA/open-gpu-kernel-modules kernel_rc.c as stored (file id 1046076755: \"NVRM: Xid "
                  "(PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s\")"),
    # -- PyTorch ------------------------------------------------------------------------------------
    Entry("torch-cuda-oom-2x", _TORCH, "c10/cuda/CUDACachingAllocator.cpp DeviceCachingAllocator::malloc()",
          "CUDA out of memory. Tried to allocate {}. GPU {} has a total capacity of {} of which {} is free.",
          "2.1-2.8", "cuda-oom", _f("tried:size", "device:int", "total:size", "free:size"),
          framework=_TORCH, verified=True,
          read_at="pytorch c10/cuda/CUDACachingAllocator.cpp TORCH_CHECK_WITH(OutOfMemoryError, ...) as "
                  "stored (file ids 79076714, 3232397)"),
    Entry("torch-oom-device-generic", _TORCH,
          "c10/core/CachingDeviceAllocator.h malloc(): the caching allocator shared by CUDA and other "
          "devices, whose message no longer names CUDA",
          "Out of memory. Tried to allocate {}. GPU {} has a total capacity of {} of which {} is free.",
          "2.9-2.10 (PYTORCH_ALLOC_CONF)", "cuda-oom",
          _f("tried:size", "device:int", "total:size", "free:size"),
          framework=_TORCH, verified=True,
          read_at="a stored copy of PyTorch's device-generic caching allocator (file id 5778688186)"),
    Entry("torch-xpu-oom", _TORCH, "c10/xpu/XPUCachingAllocator.cpp malloc()",
          "XPU out of memory. Tried to allocate {}. GPU {} has a total capacity of {} of which {} is free.",
          "2.5-2.9", "cuda-oom", _f("tried:size", "device:int", "total:size", "free:size"),
          framework="PyTorch (XPU)", verified=True,
          read_at="pytorch c10/xpu/XPUCachingAllocator.cpp as stored (file id 285290287)"),
    Entry("torch-cuda-oom-1x", _TORCH, "c10/cuda/CUDACachingAllocator.cpp malloc()",
          "CUDA out of memory. Tried to allocate {} (GPU {}; {} total capacity; {} already allocated; "
          "{} free;",
          "1.0-2.0", "cuda-oom", _f("tried:size", "device:int", "total:size", "allocated:size", "free:size"),
          framework=_TORCH, verified=True,
          read_at="pytorch c10/cuda/CUDACachingAllocator.cpp 1.x as stored (file ids 171536164, "
                  "42605107017)"),
    # The same messages' tail from "Tried to allocate" on, as a poster or a wrapping viewer leaves it: the
    # caching allocator's own clause, which nothing else prints.
    Entry("torch-oom-tail-2x", _TORCH,
          "c10/cuda/CUDACachingAllocator.cpp DeviceCachingAllocator::malloc(), the message after "
          "\"CUDA out of memory. \"",
          "Tried to allocate {}. GPU {} has a total capacity of {} of which {} is free.",
          "2.1-2.10", "cuda-oom", _f("tried:size", "device:int", "total:size", "free:size"),
          framework=_TORCH, verified=True,
          read_at="pytorch c10/cuda/CUDACachingAllocator.cpp TORCH_CHECK_WITH(OutOfMemoryError, ...) as "
                  "stored (file ids 79076714, 3232397)"),
    Entry("torch-oom-tail-1x", _TORCH,
          "c10/cuda/CUDACachingAllocator.cpp malloc() 1.x, the message after \"CUDA out of memory. \"",
          "Tried to allocate {} (GPU {}; {} total capacity; {} already allocated; {} free;",
          "1.0-2.0", "cuda-oom", _f("tried:size", "device:int", "total:size", "allocated:size", "free:size"),
          framework=_TORCH, verified=True,
          read_at="pytorch c10/cuda/CUDACachingAllocator.cpp 1.x as stored (file ids 171536164, "
                  "42605107017)"),
    Entry("torch-dataloader-killed", _TORCH,
          "torch/csrc/DataLoader.cpp _error_if_any_worker_fails: \"DataLoader worker (pid \" << pid << \") "
          "is "
          "killed by signal: \" << strsignal(si_status) << \". \"",
          "DataLoader worker (pid {}) is killed by signal: Killed.", "1.0-2.9", "sigkill-not-oom",
          _f("pid:int"), framework=_TORCH, verified=True, read_at=_DL_CPP),
    Entry("torch-dataloader-segv", _TORCH, "torch/csrc/DataLoader.cpp _error_if_any_worker_fails",
          "DataLoader worker (pid {}) is killed by signal: Segmentation fault.", "1.0-2.9", "segfault",
          _f("pid:int"), framework=_TORCH, verified=True, read_at=_DL_CPP),
    Entry("torch-dataloader-bus", _TORCH, "torch/csrc/DataLoader.cpp _error_if_any_worker_fails (SIGBUS)",
          "DataLoader worker (pid {}) is killed by signal: Bus error.", "1.0-2.9", "shm-full",
          _f("pid:int"), framework=_TORCH, verified=True, read_at=_DL_CPP),
    Entry("torch-dataloader-exit-code", _TORCH, "torch/csrc/DataLoader.cpp _error_if_any_worker_fails",
          "DataLoader worker (pid {}) exited unexpectedly with exit code {}.", "1.0-2.9", None,
          _f("pid:int", "exit_code:int"), framework=_TORCH, verified=True, read_at=_DL_CPP),
    Entry("torch-dataloader-exited", _TORCH, "torch/utils/data/dataloader.py _try_get_data",
          "DataLoader worker (pid(s) {}) exited unexpectedly", "1.0-2.9", None, _f("pids:text"),
          framework=_TORCH, verified=True,
          read_at="pytorch torch/utils/data/dataloader.py as stored (file ids 14824304163, 5759898814)"),
    Entry("torch-elastic-signal", _TORCH,
          "torch/distributed/elastic/multiprocessing/errors/__init__.py ProcessFailure.__post_init__: "
          "f\"Signal {-self.exitcode} ({self.signal_name()}) received by PID {self.pid}\"",
          "Signal {} ({}) received by PID {}", "1.9-2.9", None, _f("signal:int", "name:word", "pid:int"),
          framework="torchrun", verified=True,
          read_at="pytorch torch/distributed/elastic/multiprocessing/errors/__init__.py as stored (file ids "
                  "143561061, 35429618)"),
    Entry("torch-elastic-failure-exitcode", _TORCH,
          "torch/distributed/elastic/multiprocessing/errors/__init__.py _FAILURE_FORMAT_TEMPLATE "
          "(ChildFailedError's summary): \"  exitcode  : ${exitcode} (pid: ${pid})\"",
          "exitcode  : {} (pid: {})", "1.9-2.9 (newer: the signal's name follows)", None,
          _f("exit_code:int", "pid:int"), framework="torchrun", verified=True,
          read_at="pytorch torch/distributed/elastic/multiprocessing/errors/__init__.py as stored (file id "
                  "35429618)"),
    Entry("torch-elastic-agent-failed", _TORCH,
          "torch/distributed/elastic/multiprocessing/api.py SubprocessContext._poll: logger.error(...)",
          "failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s", "1.9-2.9", None,
          _f("exit_code:int", "local_rank:int", "pid:int", "binary:rest"), framework="torchrun",
          verified=True,
          read_at="pytorch torch/distributed/elastic/multiprocessing/api.py as stored (file id 55180238910)"),
    Entry("torch-nccl-watchdog", _TORCH,
          "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp watchdog: c10::str(\"[Rank \", rank_, \"] \", "
          "\"Watchdog caught collective operation timeout: \", work, \" ran for \", ms, \" milliseconds "
          "before timing out.\")",
          "Watchdog caught collective operation timeout: {}", "1.13-2.9", None, _f("work:rest"),
          framework="NCCL", verified=True,
          read_at="pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp as stored (file id 68186916)"),
    # -- launchers: CPython's subprocess (torch.distributed.launch, HF accelerate), DeepSpeed ---------
    Entry("python-called-process-signal", "CPython",
          "Lib/subprocess.py CalledProcessError.__str__: \"Command '%s' died with %r.\" % (cmd, "
          "signal.Signals(-returncode)), the repr written out (torch.distributed.launch's, accelerate "
          "launch's)",
          "Command '{}' died with <Signals.{}: {}>.", "3.5-3.13", None,
          _f("command:text", "name:word", "signal:int"), framework="launcher", verified=True,
          read_at="cpython Lib/subprocess.py as stored (file ids 62126998, 3113876879)"),
    Entry("python-called-process-exit", "CPython", "Lib/subprocess.py CalledProcessError.__str__",
          "Command '{}' returned non-zero exit status {}.", "3.x", None, _f("command:text", "exit_code:int"),
          framework="launcher", verified=True,
          read_at="cpython Lib/subprocess.py as stored (file id 62126998)"),
    Entry("deepspeed-exit-code", "DeepSpeed",
          "deepspeed/launcher/launch.py sigkill_handler: logger.error(f\"{cmd} exits with return code = "
          "{last_return_code}\")",
          "{} exits with return code = {}", "0.3-0.16", None, _f("command:text", "exit_code:int"),
          framework="DeepSpeed", verified=True,
          read_at="deepspeedai/DeepSpeed deepspeed/launcher/launch.py as stored (file ids 29205039335, "
                  "305604312)"),
    Entry("accelerate-no-batch-size", "HF accelerate",
          "src/accelerate/utils/memory.py find_executable_batch_size: the batch size halved on each "
          "out-of-memory error (should_reduce_batch_size: CUDA's, cuDNN's, and the CPU allocator's words) "
          "until none is left",
          "No executable batch size found, reached zero.", "0.5-1.x", "cuda-oom", framework="HF accelerate",
          verified=True, read_at="huggingface/accelerate src/accelerate/utils/memory.py as stored (file ids "
                                 "19874799507, 38287226)"),
    # -- the CUDA runtime, cuBLAS, cuDNN (the text after PyTorch's "CUDA error: ") ------------------
    Entry("cuda-runtime-oom", "PyTorch / CUDA runtime",
          "c10/cuda/CUDAException.cpp c10_cuda_check_implementation: \"CUDA error: \" + "
          "cudaGetErrorString(cudaErrorMemoryAllocation) (the runtime's own string is in its closed library)",
          "CUDA error: out of memory", "torch 1.0-2.9, CUDA 8-13", "cuda-oom", framework="CUDA runtime",
          verified=True,
          read_at="pytorch c10/cuda/CUDAException.cpp as stored (file ids 60114805282, 705357944)"),
    Entry("cublas-alloc-failed", "cuBLAS",
          "aten/src/ATen/cuda/Exceptions.h TORCH_CUDABLAS_CHECK: \"CUDA error: \", "
          "_cublasGetErrorEnum(__err), \" when calling `\" #EXPR \"`\"",
          "CUBLAS_STATUS_ALLOC_FAILED when calling `{}`", "torch 1.5-2.9, CUDA 8-13", "cuda-oom",
          _f("call:text"),
          framework="cuBLAS", verified=True,
          read_at="pytorch aten/src/ATen/cuda/Exceptions.h as stored (file id 52967332)"),
    Entry("cudnn-alloc-failed", "cuDNN",
          "aten/src/ATen/cudnn/Exceptions.h AT_CUDNN_CHECK: \"cuDNN error: \", cudnnGetErrorString(status)",
          "CUDNN_STATUS_ALLOC_FAILED", "cuDNN 7-9", "cuda-oom", framework="cuDNN", verified=True,
          read_at="pytorch aten/src/ATen/cudnn/Exceptions.h as stored (file id 49173980); the status's name "
                  "as cudnnGetErrorString returns it (file id 20380702339)"),
    # -- TensorFlow ---------------------------------------------------------------------------------
    Entry("tf-oom-tensor", "TensorFlow",
          "tensorflow/core/framework/op_kernel.cc OpKernelContext::allocate_tensor: "
          "errors::ResourceExhausted(\"OOM when allocating tensor with shape\", shape.DebugString(), ...)",
          "OOM when allocating tensor with shape[{}] and type {} on {} by allocator {}", "1.5-2.x",
          "cuda-oom",
          _f("shape:text", "dtype:word", "device:word", "allocator:word"), framework="TensorFlow",
          verified=True,
          read_at="tensorflow/core/framework/op_kernel.cc as stored (file ids 32180775, 13758762556)"),
    Entry("tf-oom-tensor-shape-only", "TensorFlow",
          "tensorflow/core/framework/op_kernel.cc OpKernelContext::allocate_tensor before the type, device "
          "and allocator were added to the message: errors::ResourceExhausted(\"OOM when allocating tensor "
          "with shape\", shape.DebugString())",
          "OOM when allocating tensor with shape[{}]", "1.0-1.4", None, _f("shape:text"),
          framework="TensorFlow"),
    Entry("tf-bfc-ran-out", "TensorFlow",
          "tensorflow/core/common_runtime/bfc_allocator.cc BFCAllocator::AllocateRawInternal",
          "Allocator ({}) ran out of memory trying to allocate {}", "1.x-2.x (XLA's tsl BFC allocator too)",
          "cuda-oom", _f("allocator:word", "tried:size"), framework="TensorFlow", verified=True,
          read_at="tensorflow/tensorflow@010f3edc tensorflow/core/common_runtime/bfc_allocator.cc"),
    Entry("tf-gpu-bfc-ran-out-old", "TensorFlow",
          "tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.cc GPUBFCAllocator::AllocateRawInternal",
          "Ran out of memory trying to allocate {}.  See logs for memory state", "0.6-1.0", "cuda-oom",
          _f("tried:size"), framework="TensorFlow", verified=True,
          read_at="a stored copy of TensorFlow's gpu_bfc_allocator.cc (file id 171350273)"),
    # -- JAX / XLA ----------------------------------------------------------------------------------
    Entry("xla-oom", "XLA",
          "xla/stream_executor/integrations/tf_allocator_adapter.cc TfAllocatorAdapter::Allocate: "
          "ResourceExhausted(\"Out of memory while trying to allocate \", size, \" bytes.\"), printed by "
          "absl::Status with its code's name",
          "RESOURCE_EXHAUSTED: Out of memory while trying to allocate {}.", "jaxlib 0.1.5x-0.7",
          "cuda-oom", _f("tried:size"), framework="JAX/XLA", verified=True,
          read_at="xla tf_allocator_adapter.cc as stored (file ids 17439671, 248744252)"),
    Entry("xla-oom-status-words", "XLA",
          "the same status printed by tensorflow/core/lib/core/status.cc Status::ToString before "
          "absl::Status "
          "(the code's name in words: \"Resource exhausted\")",
          "Resource exhausted: Out of memory while trying to allocate {}.",
          "jaxlib 0.1.x (2019-2020), TF 1.x",
          "cuda-oom", _f("tried:size"), framework="JAX/XLA", verified=True,
          read_at="tensorflow status.cc Status::ToString as stored (file id 27160872)"),
    Entry("xla-oom-allocating", "XLA",
          "xla/pjrt MaybeOwningGpuMemory::AllocateShared "
          "ResourceExhausted(\"Out of memory allocating %d bytes.\", size)",
          "RESOURCE_EXHAUSTED: Out of memory allocating %d bytes.", "jaxlib 0.3-0.4", "cuda-oom",
          _f("tried:int"), framework="JAX/XLA", verified=True,
          read_at="xla/pjrt tracked_device_buffer as stored (file id 6194799731)"),
    Entry("xla-cumemallocasync-oom", "XLA",
          "xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc AllocateRaw: LOG(ERROR) << Name() << "
          "\" cuMemAllocAsync failed to allocate \" << num_bytes << \" bytes: \" << "
          "GetCudaErrorMessage(result)",
          "cuMemAllocAsync failed to allocate %d bytes: %sCUDA_ERROR_OUT_OF_MEMORY", "jaxlib 0.4-0.7",
          "cuda-oom", _f("tried:int", "status:text"), framework="JAX/XLA", verified=True,
          read_at="gpu_cudamallocasync_allocator.cc as stored (file ids 70212049, 238005407)"),
    Entry("xla-cumemallocasync-oom-old", "XLA",
          "tensorflow/core/common_runtime/gpu/gpu_cudamallocasync_allocator.cc "
          "(before \" bytes\" was added)",
          "cuMemAllocAsync failed to allocate %d: %sCUDA_ERROR_OUT_OF_MEMORY",
          "TF 2.5-2.8, jaxlib 0.1.7x-0.3", "cuda-oom", _f("tried:int", "status:text"), framework="JAX/XLA",
          verified=True, read_at="gpu_cudamallocasync_allocator.cc as stored (file id 117264191)"),
    Entry("xla-failed-to-allocate-request", "XLA",
          "xla/stream_executor/stream_executor_memory_allocator.cc StreamExecutorMemoryAllocator::Allocate: "
          "absl::ResourceExhaustedError(absl::StrFormat(\"Failed to allocate request for %s (%uB) on device "
          "ordinal %d\", tsl::strings::HumanReadableNumBytes(size), size, device_ordinal))",
          "Failed to allocate request for %s (%uB) on device ordinal %d", "jaxlib 0.4", "cuda-oom",
          _f("human:size", "tried:int", "device:int"), framework="JAX/XLA", verified=True,
          read_at="stream_executor_memory_allocator.cc as stored (file id 682210614)"),
    # -- TensorFlow's stream executor (CUDA and ROCm drivers) -------------------------------------------
    Entry("tf-driver-failed-to-allocate", "TensorFlow",
          "stream_executor/cuda/cuda_driver.cc GpuDriver::DeviceAllocate: LOG(ERROR) (LOG(INFO) from 2.x) << "
          "\"failed to allocate \" << HumanReadableNumBytes(bytes) << \" (\" << bytes << \" bytes) from "
          "device: \" << ToString(res), res being CUDA_ERROR_OUT_OF_MEMORY (\": out of memory\" follows "
          "from TF 1.13, where ToString adds the driver's string)",
          "failed to allocate {} ({} bytes) from device: CUDA_ERROR_OUT_OF_MEMORY", "TF 0.x-2.x, XLA",
          "cuda-oom", _f("human:text", "tried:int"), framework="TensorFlow", verified=True,
          read_at="tensorflow stream_executor cuda_driver.cc and rocm_driver.cc as stored (file ids "
                  "31512141, 15626699, 249921667)"),
    Entry("tf-rocm-driver-failed-to-allocate", "TensorFlow",
          "stream_executor/rocm/rocm_driver.cc GpuDriver::DeviceAllocate (hipMallocVanilla), the same "
          "stream with ToString(hipError_t)",
          "failed to allocate {} ({} bytes) from device: HIP_ERROR_OutOfMemory", "TF 2.x ROCm, XLA",
          "cuda-oom", _f("human:text", "tried:int"), framework="TensorFlow", verified=True,
          read_at="tensorflow stream_executor rocm_driver.cc as stored (file ids 15626699, 249921667)"),
    # -- TPU runtime (libtpu, closed source) ---------------------------------------------------------
    Entry("tpu-hbm-oom", "XLA (TPU)",
          "libtpu's device allocator, through PJRT: absl ResourceExhausted \"Error allocating device "
          "buffer: Attempting to allocate %s. That was not possible. There are %s free.\" then the "
          "memory space (\"; (0x0x0_HBM0)\"); a device-memory OOM like a GPU's",
          "Error allocating device buffer: Attempting to allocate {}. That was not possible. There are {} "
          "free.",
          "libtpu 2021-2025 (jaxlib 0.2-0.4)", "cuda-oom", _f("human:text", "free_human:text"),
          framework="JAX/XLA (TPU)"),  # libtpu is closed: the format is read from its printed messages
    # -- Python, NumPy, libstdc++ -------------------------------------------------------------------
    Entry("numpy-unable-to-allocate", "NumPy",
          "numpy/core/_exceptions.py (numpy/_core from 2.0) _ArrayMemoryError.__str__, the size by "
          "_size_to_string ('{:#.3g} {}': \"7.45 GiB\", \"100. MiB\")",
          "Unable to allocate {} for an array with shape {} and data type {}", "1.17-2.x",
          "python-exception", _f("size:size", "shape:text", "dtype:word"), framework="NumPy", verified=True,
          read_at="numpy _exceptions.py as stored (file id 1021840626)"),
    Entry("python-memory-error", "CPython",
          "Lib/traceback.py _format_final_exc_line: an exception whose str() is empty is printed as its "
          "type's name alone (\"%s\\n\" % etype); a MemoryError raised by the interpreter carries no message",
          "MemoryError", "3.x", "python-exception", whole=True, framework="Python", verified=True,
          read_at="cpython Lib/traceback.py _format_final_exc_line as stored (file ids 26854876713, "
                  "231710812)"),
    Entry("libstdcxx-bad-alloc", "libstdc++",
          "libsupc++/vterminate.cc __verbose_terminate_handler: fputs(\"terminate called after throwing an "
          "instance of '\") + the demangled type + \"'\\n\"",
          "terminate called after throwing an instance of 'std::bad_alloc'", "GCC 4-14", None,
          framework="libstdc++", verified=True,
          read_at="gcc libstdc++-v3/libsupc++/vterminate.cc as stored (file id 1090699589)"),
    # -- shells' job reports ------------------------------------------------------------------------
    Entry("bash-killed-line", "bash",
          "jobs.c notify_of_job_status (non-interactive shell): fprintf(stderr, _(\"%s: line %d: \"), ...) "
          "then pretty_print_job(job, JLIST_NONINTERACTIVE)",
          "%s: line %d: %5ld Killed %s", "bash 3-5", "sigkill-not-oom",
          _f("shell:word", "line_no:int", "pid:int", "command:rest"), framework="bash", verified=True,
          read_at="bash jobs.c as stored (file id 40372456155)"),
    Entry("bash-segfault-line", "bash",
          "jobs.c notify_of_job_status (non-interactive shell), SIGSEGV: strsignal's words, \"(core "
          "dumped)\" "
          "when it did",
          "%s: line %d: %5ld Segmentation fault %s", "bash 3-5", "segfault",
          _f("shell:word", "line_no:int", "pid:int", "command:rest"), framework="bash", verified=True,
          read_at="bash jobs.c as stored (file id 40372456155)"),
    Entry("zsh-killed", "zsh", "Src/jobs.c printjob (sigmsg(SIGKILL) = \"killed\")",
          "zsh: killed %s", "zsh 4-5", "sigkill-not-oom", _f("command:rest"), framework="zsh", verified=True,
          read_at=_ZSH_JOBS),
    Entry("shell-killed", "bash/dash",
          "bash jobs.c notify_of_job_status (a foreground job): fprintf(stderr, \"%s\", "
          "j_strsignal(termsig)); "
          "strsignal(SIGKILL) is \"Killed\"; dash prints the same",
          "Killed", "bash 3-5, dash 0.5", "sigkill-not-oom", whole=True, framework="shell", verified=True,
          read_at="bash jobs.c as stored (file id 40372456155)"),
    Entry("shell-segfault", "bash/dash",
          "bash jobs.c notify_of_job_status: j_strsignal(SIGSEGV), then _(\" (core dumped)\") when WIFCORED",
          "Segmentation fault (core dumped)", "bash 3-5, dash 0.5", "segfault", framework="shell",
          verified=True,
          read_at="bash jobs.c as stored (file id 40372456155)"),
    Entry("zsh-segfault", "zsh",
          "Src/jobs.c printjob (sigmsg(SIGSEGV) = \"segmentation fault\", Src/signames2.awk)",
          "zsh: segmentation fault %s", "zsh 4-5", "segfault", _f("command:rest"), framework="zsh",
          verified=True, read_at=_ZSH_JOBS),
    Entry("zsh-segfault-pid", "zsh",
          "Src/jobs.c printjob, long form (a job's pid before its status: jobs -l, LONG_LIST_JOBS)",
          "%d segmentation fault %s", "zsh 4-5", "segfault", _f("pid:int", "command:rest"), framework="zsh",
          verified=True, read_at=_ZSH_JOBS),
    *_LOCALIZED_SIGNAL_REPORTS,
    *_ZSH_NUMBERED_KILLS,
    # -- Slurm --------------------------------------------------------------------------------------
    Entry("slurm-oom-kill-event", "Slurm",
          "src/plugins/task/cgroup/task_cgroup_memory.c task_cgroup_memory_check_oom: error(\"Detected "
          "%\"PRIu64\" oom-kill event(s) in step %s cgroup.\", oom_kill_count, step_str), written by "
          "slurmstepd as \"slurmstepd: error: ...\"; later versions print the step as %ps "
          "(\"StepId=191.batch\") and add \" Some of your processes may have been killed by the cgroup "
          "out-of-memory handler.\"",
          "Detected %lu oom-kill event(s) in %s", "Slurm 17.11-24.x", "memcg-limit",
          _f("events:int", "step:rest"), framework="Slurm", verified=True,
          read_at="SchedMD/slurm src/plugins/task/cgroup/task_cgroup_memory.c as stored "
                  "(file id 23365283024)"),
    # -- the kubelet --------------------------------------------------------------------------------
    Entry("kubelet-eviction-node-low", "Kubernetes kubelet",
          "pkg/kubelet/eviction/helpers.go nodeLowMessageFmt",
          "The node was low on resource: %v. ", "1.7-1.33", "eviction", _f("resource:word"), kind="pod",
          framework="kubelet", verified=True, read_at=_HELPERS_GO),
    Entry("kubelet-eviction-threshold", "Kubernetes kubelet",
          "pkg/kubelet/eviction/helpers.go thresholdMetMessageFmt (after nodeLowMessageFmt in the message)",
          "Threshold quantity: %v, available: %v. ", "1.20-1.33", "eviction",
          _f("threshold:word", "available:word"), kind="pod", framework="kubelet", verified=True,
          read_at="helpers.go's fragments quoted verbatim by a port (file id 71019272430)"),
    Entry("kubelet-eviction-node-condition", "Kubernetes kubelet",
          "pkg/kubelet/eviction/helpers.go nodeConditionMessageFmt",
          "The node had condition: %v. ", "1.7-1.33", "eviction", _f("condition:word"), kind="pod",
          framework="kubelet", verified=True, read_at=_HELPERS_GO),
    Entry("kubelet-eviction-container", "Kubernetes kubelet",
          "pkg/kubelet/eviction/helpers.go containerMessageFmt",
          "Container %s was using %s, request is %s, has larger consumption of %v. ", "1.27-1.33", "eviction",
          _f("container:word", "usage:word", "request:word", "resource:word"), kind="pod",
          framework="kubelet", verified=True, read_at=_HELPERS_GO),
    Entry("kubelet-eviction-container-old", "Kubernetes kubelet",
          "pkg/kubelet/eviction/helpers.go containerMessageFmt",
          "Container %s was using %s, which exceeds its request of %s. ", "1.9-1.26", "eviction",
          _f("container:word", "usage:word", "request:word"), kind="pod", framework="kubelet", verified=True,
          read_at=_HELPERS_GO),
    Entry("kubelet-eviction-container-ephemeral", "Kubernetes kubelet",
          "pkg/kubelet/eviction/helpers.go containerEphemeralStorageMessageFmt",
          "Container %s exceeded its local ephemeral storage limit %q. ", "1.9-1.33",
          "ephemeral-storage-eviction", _f("container:word", "limit:word"), kind="pod", framework="kubelet",
          verified=True, read_at=_HELPERS_GO),
    Entry("kubelet-eviction-pod-ephemeral", "Kubernetes kubelet",
          "pkg/kubelet/eviction/helpers.go podEphemeralStorageMessageFmt",
          "Pod ephemeral local storage usage exceeds the total limit of containers %s. ", "1.9-1.33",
          "ephemeral-storage-eviction", _f("limit:word"), kind="pod", framework="kubelet", verified=True,
          read_at=_HELPERS_GO),
    Entry("kubelet-eviction-emptydir", "Kubernetes kubelet",
          "pkg/kubelet/eviction/helpers.go emptyDirMessageFmt",
          "Usage of EmptyDir volume %q exceeds the limit %q. ", "1.9-1.33", "ephemeral-storage-eviction",
          _f("volume:word", "limit:word"), kind="pod", framework="kubelet", verified=True,
          read_at="helpers.go from master as quoted (file id 60868225381)"),
    Entry("kubelet-node-shutdown", "Kubernetes kubelet",
          "pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go nodeShutdownMessage",
          "Pod was terminated in response to imminent node shutdown.", "1.21-1.33", "preempted", kind="pod",
          framework="kubelet", verified=True,
          read_at="kubernetes test/e2e_node's copy of the constant, citing "
                  "nodeshutdown_manager_linux.go#L43-L44 "
                  "(file id 36763662)"),
    Entry("volcano-evict-preempt", "Volcano scheduler",
          "pkg/scheduler/cache/cache.go defaultEvictor.Evict(pod, \"preempt\") (actions/preempt)",
          "Pod is evicted, because of preempt", "volcano 0.x-1.x", "preempted", kind="pod",
          framework="volcano-scheduler", verified=True, read_at=_VOLCANO_EVICT),
    Entry("volcano-evict-reclaim", "Volcano scheduler",
          "pkg/scheduler/cache/cache.go defaultEvictor.Evict(pod, \"reclaim\") (actions/reclaim)",
          "Pod is evicted, because of reclaim", "volcano 0.x-1.x", "preempted", kind="pod",
          framework="volcano-scheduler", verified=True, read_at=_VOLCANO_EVICT),
    Entry("scheduler-preempted", "Kubernetes scheduler",
          "pkg/scheduler/framework/preemption prepareCandidate: the victim's DisruptionTarget condition "
          "(reason PreemptionByScheduler; PreemptionByKubeScheduler in 1.26)",
          "%s: preempting to accommodate a higher priority pod", "1.26-1.33", "preempted",
          _f("plugin:word"), kind="pod", framework="kube-scheduler", verified=True,
          read_at="kubernetes pkg/scheduler/framework/preemption/preemption.go as stored (file ids "
                  "3706923214, "
                  "67187031131)"),
    Entry("scheduler-preempted-event", "Kubernetes scheduler",
          "pkg/scheduler/framework/preemption prepareCandidate: the victim's Event (reason Preempted), "
          "naming the preemptor by UID",
          "Preempted by pod %v on node %v", "1.27-1.33", "preempted", _f("preemptor:word", "node:word"),
          kind="pod", framework="kube-scheduler", verified=True,
          read_at="kubernetes preemption.go as stored (file ids 174355612, 36311665729)"),
    Entry("scheduler-preempted-event-name", "Kubernetes scheduler",
          "pkg/scheduler/framework/preemption (and core/generic_scheduler before 1.19): the victim's "
          "Event naming the preemptor as namespace/name",
          "Preempted by %v/%v on node %v", "1.15-1.26", "preempted",
          _f("namespace:word", "name:word", "node:word"), kind="pod", framework="kube-scheduler",
          verified=True,
          read_at="kubernetes preemption.go and generic_scheduler.go as stored (file ids 23937636730, "
                  "6893570380)"),
)

#: NumPy's exception type by its name alone, for a message in other words (a translation, a retyping) that
#: no entry above reads: looked for only where no catalogued message is in the line, since the type's
#: name comes before the message it would otherwise hide.
NUMPY_ARRAY_MEMORY_ERROR = Entry(
    "numpy-array-memory-error-type", "NumPy",
    "numpy/core/_exceptions.py (numpy/_core from 2.0) class _ArrayMemoryError(MemoryError), printed by "
    "traceback.format_exception_only as its qualified name, \": \" and the message",
    "_ArrayMemoryError: {}", "1.17-2.x", "python-exception", _f("message:rest"), framework="NumPy",
    verified=True, read_at="numpy _exceptions.py as stored (file id 1021840626)")

#: The entries by key.
BY_KEY: dict[str, Entry] = {e.key: e for e in ENTRIES}
KERNEL: tuple[Entry, ...] = tuple(e for e in ENTRIES if e.kind == "kernel")


@dataclass(frozen=True)
class Found:
    """A catalogued message found in a line: where it starts, and its fields as printed."""

    entry: Entry
    start: int
    end: int
    fields: dict[str, str]

    def number(self, name: str) -> int | None:
        """A field read as a number: ints as written, sizes in bytes."""
        value = self.fields.get(name)
        if value is None:
            return None
        kind = next((f.kind for f in self.entry.fields if f.name == name), "text")
        if kind == "size":
            return size_bytes(value)
        if kind == "hex":
            return int(value, 16)
        try:
            return int(value)
        except ValueError:
            return None


def size_bytes(text: str) -> int:
    """``"30.29 GiB"``, ``"6.88GiB"``, ``"8000000000 bytes"`` -> bytes (binary units, as printed)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([A-Za-z]+)\s*", text)
    if m is None:
        raise ValueError(f"not a size: {text!r}")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).upper()] + 0.5)


def find(line: str, entries: Iterable[Entry] = ENTRIES) -> Found | None:
    """The catalogued message that starts first in ``line``, or None; wherever it starts."""
    best: Found | None = None
    for entry in entries:
        at = line.find(entry.anchor)
        if at < 0:
            continue
        m = entry.pattern.search(line, max(0, at - entry.lead))
        if m is None or (best is not None and m.start() >= best.start):
            continue
        best = Found(entry, m.start(), m.end(), {k: v for k, v in m.groupdict().items() if v is not None})
    return best


def find_all(lines: Iterable[str], entries: Iterable[Entry] = ENTRIES) -> list[Found]:
    """Every line's first catalogued message, in order."""
    chosen = tuple(entries)
    return [f for line in lines if (f := find(line, chosen)) is not None]


def kernel_start(line: str) -> int:
    """Where the kernel's own text starts in ``line`` (after any prefix), or -1 when it holds none."""
    found = find(line, KERNEL)
    return found.start if found is not None else -1
