"""memory.stat file text, v1 and v2, into one model with the kernel's keys."""

from __future__ import annotations

from podmortem.cgroups.memory_stat import parse_memory_stat

V2 = """anon 314535936
file 4096
kernel 9000000
kernel_stack 49152
pagetables 8785920
shmem 1024
file_mapped 135168
inactive_anon 522788864
pgfault 17409645
"""

V1 = """cache 8192
rss 133636096
shmem 4096
mapped_file 0
hierarchical_memory_limit 134217728
total_cache 8192
total_rss 133636096
total_shmem 4096
"""


def test_v2() -> None:
    stat = parse_memory_stat(V2, path="/pod")
    assert stat.version == 2 and stat.path == "/pod" and stat.stat["pgfault"] == 17409645
    b = stat.breakdown()
    assert (b.anon_bytes, b.file_bytes, b.shmem_bytes, b.kernel_bytes) == (314535936, 3072, 1024, 9000000)


def test_v2_without_kernel_key_sums_its_parts() -> None:
    stat = parse_memory_stat(V2.replace("kernel 9000000\n", "") + "slab 756472\n")
    assert stat.breakdown().kernel_bytes == 49152 + 8785920 + 756472


def test_v1_uses_hierarchical_totals_and_kmem() -> None:
    stat = parse_memory_stat(V1)
    assert stat.version == 1 and stat.hierarchical
    b = stat.breakdown(kmem_bytes=568 * 1024)
    assert (b.anon_bytes, b.file_bytes, b.shmem_bytes, b.kernel_bytes) == (133636096, 4096, 4096, 568 * 1024)


def test_garbage_lines_are_skipped() -> None:
    stat = parse_memory_stat("anon 12\nnot a line\nfile x\n\n  \nkernel -1\n")
    assert stat.stat == {"anon": 12, "kernel": -1}
