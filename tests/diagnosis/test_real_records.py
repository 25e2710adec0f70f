"""Each class of misreading from issue 14, shown right on a real record: verdict and wording.

The records are the corpus's (tests/fixtures/oom-records, sources in SOURCES.md); the CLI's
rendering is checked too, since that is the text a person reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from podmortem.agent import matching
from podmortem.cgroups import paths
from podmortem.cli import diagnose_kernel as cli
from podmortem.cli import main as cli_main
from podmortem.diagnosis import diagnose, limits, sequence
from podmortem.kernel import oom_parser
from podmortem.reports import FailureReport, OomKillRecord

RECORDS = Path(__file__).parent.parent / "fixtures" / "oom-records"


def _reports(stem: str) -> tuple[list[OomKillRecord], list[FailureReport]]:
    records = oom_parser.parse_text((RECORDS / f"{stem}.log").read_text())
    reports = []
    for r in records:
        group = r.oom_group_memcg  # as the CLI does, for records whose oom-kill line is cut
        pod = paths.pod_ref(task_memcg=r.task_memcg or group, oom_memcg=r.oom_memcg or group, cpuset=r.cpuset)
        reports.append(diagnose(r, pod=pod))
    return records, sequence.relate(records, reports)


def _finding(report: FailureReport, code: str) -> str:
    return next(f.message + " " + (f.action or "") for f in report.findings if f.code == code)


def test_quotes_of_the_kernel_by_other_tools_are_not_kills() -> None:
    # kubectl describe's bare Event text above the syslog, node-problem-detector after it.
    records, _ = _reports("62-aks-node-allocatable-burstable-describe-quote")
    assert [r.victim_pid for r in records] == [68061]
    records, _ = _reports("63-aks-node-allocatable-besteffort-oomgroup-npd")
    assert [r.victim_pid for r in records] == [7788]
    # A describe node Events row of another reason (PodOOMKilling) is no node-problem-detector Event.
    assert _reports("30-kubernikus-321-describe-node-event")[0] == []
    # node-problem-detector's OOMKilling Event alone: the only copy of the kernel's kill line there is.
    records, _ = _reports("29-npd-766-event-json-quotes-kernel")
    assert [(r.victim_pid, r.victim_comm) for r in records] == [(3504804, "kubectl")]


def test_node_allocatable_limit_is_not_called_the_pods_own() -> None:
    _, [report] = _reports("63-aks-node-allocatable-besteffort-oomgroup-npd")
    text = _finding(report, "memcg-limit")
    assert "the node's pods cgroup /kubepods.slice (limit 7.1 GiB) filled" in text
    assert "no pod hit a limit of its own" in text and "Raising this pod's limit does not help" in text
    assert "reached its own limit" not in text and "before raising resources.limits.memory" not in text
    assert "allocatable memory for all pods (not this pod's limit)" in cli.render([report])


def test_levels_named_from_the_paths_the_kubelet_uses() -> None:
    assert limits.level("/kubepods.slice") == limits.level("/kubepods") == "node"
    assert limits.level("/kubepods/burstable") == "qos"
    assert limits.level("/kubepods.slice/kubepods-besteffort.slice") == "qos"
    assert limits.level("/kubepods/pod0f5eb28f-6722-4cf5-ab0f-b62748c018d4") == "pod"
    assert limits.level("/podruntime.slice") == "system"


def test_memory_plus_swap_limit_is_named_with_the_swap_used() -> None:
    _, [report] = _reports("22-k8s-56891-v1-dmesgT-memsw-full-3.10")
    text = _finding(report, "memcg-limit")
    assert "The full counter was memory+swap (1.0 GiB of 1.0 GiB, failcnt 17), not memory alone" in text
    assert "512.2 MiB of its memory was in swap" in text
    assert "raising the memory limit alone changes nothing" in text
    # The report's cgroup and the finding's evidence give the counter that was hit, not memory's.
    [record], _ = _reports("22-k8s-56891-v1-dmesgT-memsw-full-3.10")
    memsw = record.counters["memory+swap"]
    assert report.cgroup is not None and report.cgroup.limit_counter == "memory+swap"
    assert report.cgroup.limit_bytes == memsw.limit_kb * 1024
    assert report.cgroup.usage_bytes == memsw.usage_kb * 1024
    evidence = next(f.evidence for f in report.findings if f.code == "memcg-limit")
    assert evidence["limit_hit"] == "memory+swap" and evidence["limit_bytes"] == memsw.limit_kb * 1024
    assert "memory+swap limit" in cli.render([report])
    _, [report] = _reports("24-istio-42734-v1-syslog-taskin-docker-scope")  # memory failed, memsw never did
    assert "memory+swap" not in _finding(report, "memcg-limit")
    assert report.cgroup is not None and report.cgroup.limit_counter == "memory"


def test_no_killable_process_is_not_a_kill() -> None:
    records, reports = _reports("46-lkml-longman-crio-no-killable-mailwrap")
    first = reports[0]
    assert first.kill is not None and first.kill.pid is None and first.kill.killed_pids == []
    assert "found no process it could kill" in _finding(first, "memcg-limit")
    assert "2 of the 3 listed processes have oom_score_adj -1000" in _finding(first, "no-killable-process")
    text = cli.render([first])
    assert "killed    nothing: the kernel found no process it could kill" in text and "pid ?" not in text
    assert records[1].trigger_comm == "node" and records[1].missing == ["kill"]


def test_a_header_cut_before_its_kill_line_says_the_victim_is_unknown() -> None:
    _, [report] = _reports("32-kata-972-azure-5.4-header-cut")
    assert report.kill is not None and report.kill.pid is None
    assert "which one is not known" in _finding(report, "memcg-limit")
    assert not any(f.code == "no-killable-process" for f in report.findings)
    text = cli.render([report])
    assert "killed    unknown" in text and "the kill line (who was killed)" in text


def test_sacrifice_child_victim_is_the_killed_child_not_the_choice() -> None:
    [record], _ = _reports("40-crio-1975-nr_pmds-runc-sacrifice-child")
    assert record.chosen is not None and record.chosen.pid == 387941
    assert (record.victim_pid, record.victim_comm) == (387951, "runc:[2:INIT]")
    records, reports = _reports("26-ltp-1080-rhel7-uid-form-sacrifice")
    assert records[-1].chosen is not None and records[-1].victim_pid is None  # its Killed line was cut
    # The choice is still told: a kill happened, of it or of a child.
    cut = reports[-1].kill
    assert cut is not None and cut.pid is None
    assert (cut.chosen_pid, cut.chosen_comm) == (records[-1].chosen.pid, records[-1].chosen.comm)
    assert f"(pid {cut.chosen_pid}) or a child of it" in cli.render([reports[-1]])


def test_task_in_lines_alone_are_one_oom_each() -> None:
    records, reports = _reports("47-zh-dmesgT-locale-grep-taskin-only")
    assert len(records) == 3 and {r.time_text for r in records} == {"四 3月 18 18:47:12 2021"}
    assert all(rep.kill is not None and rep.kill.container_id and rep.kill.pid is None for rep in reports)


def test_reaper_line_alone_names_the_victim() -> None:
    [record], _ = _reports("49-ebpf-agent-kmsg-reaper-only-guaranteed-pod")
    assert (record.victim_pid, record.victim_comm) == (2292670, "main") and not record.killed


def test_a_trigger_is_never_attached_across_a_grep_cut() -> None:
    records, _ = _reports("45-openshift-gpu-grepC-crio-el8")
    assert [r.trigger_pid for r in records] == [128187, 160296, None]
    assert records[2].victim_pid == 184260 and "header" in records[2].missing


def test_a_number_split_by_a_wrap_is_joined_not_cut() -> None:
    [record], _ = _reports("23-kubedirector-356-v1-hardwrap-memsw-dirty")
    assert record.cgroup_stats[0].stat["rss"] == 448 * 1024
    records, _ = _reports("46-lkml-longman-crio-no-killable-mailwrap")
    assert [(t.pid, t.rss_pages, t.pgtables_bytes) for t in records[0].tasks][-1] == (1703345, 0, 2125824)


def test_arm64_trace_and_mem_info_make_a_node_wide_oom() -> None:
    [record], [report] = _reports("51-rpi3-arm64-5.10-global-vmalloc")
    assert (record.trigger_comm, record.kernel_version) == ("insmod", "5.10.75-v8+")
    assert report.verdict == "global-oom" and "Mem-Info" in (record.constraint_note or "")


def test_kills_close_together_name_the_later_larger_victim() -> None:
    _, reports = _reports("27-k8s-50632-mailquote-syslog-node-kills")
    first = next(f for f in reports[0].findings if f.code == "victim-not-largest")
    assert first.evidence["later_pid"] == 799889 and first.evidence["seconds_later"] == 2
    _, reports = _reports("28-docker-1001-global-reaper-paren-comm")
    assert not any(f.code == "victim-not-largest" for r in reports for f in r.findings)


def test_the_oom_group_line_names_the_pod_when_the_oom_kill_line_is_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No posted record was found with exactly this cut, so a real one is cut here: the AKS record
    63 without its ``oom-kill:`` line, the only other line that names the victim's cgroup. The limit
    that filled is the node's (/kubepods.slice), which names no pod; "Tasks in … memory.oom.group"
    still names the BestEffort pod's container, and both the CLI and the node agent use it."""
    text = (RECORDS / "63-aks-node-allocatable-besteffort-oomgroup-npd.log").read_text()
    lines = text.splitlines()
    cut = [line for line in lines if "] oom-kill:constraint=" not in line]
    assert len(cut) == len(lines) - 1
    [record] = oom_parser.parse_lines(cut)
    assert record.oom_kill is None and record.task_memcg is None and record.oom_memcg == "/kubepods.slice"
    uid = "a5d8fdd1-1369-469e-8a7d-2c1047529435"
    qos = "/kubepods.slice/kubepods-besteffort.slice"
    pod_path = f"{qos}/kubepods-besteffort-pod{uid.replace('-', '_')}.slice"
    group = record.oom_group_memcg
    assert group is not None and group.startswith(pod_path + "/cri-containerd-")

    log = tmp_path / "cut.log"
    log.write_text("\n".join(cut) + "\n")
    assert cli_main.main(["diagnose", str(log)]) == 0
    out = capsys.readouterr().out
    assert f"pod       pod uid {uid}, container 9192cb33411f, QoS besteffort" in out
    assert "the node's allocatable memory for all pods (not this pod's limit)" in out

    other = f"{qos}/kubepods-besteffort-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice"
    assert matching.match_record(record, pod_paths={"other": other, uid: pod_path}) == uid
    # A pod killed before the agent found its cgroup: the kubelet-made path names its uid.
    assert matching.match_record(record, pod_paths={"other": other}, watched_uids={uid}) == uid


def test_a_shmem_dominant_cgroup_says_the_kill_frees_little() -> None:
    # Recorded on a real kernel (no public record of this class was found): 88 MiB of tmpfs in a 96 MiB
    # cgroup, the victim maps none of it.
    _, [report] = _reports("64-podmortem-v1-shmem-dominant-6.18")
    text = _finding(report, "kill-frees-little")
    assert "Killing dd (pid 29556) frees at most 9.3 MiB, while 88.0 MiB of the cgroup's 96.0 MiB" in text
    assert "killing processes does not free it" in text
    assert "shmem-dominant" in {f.code for f in report.findings}


def test_a_qos_class_limit_is_not_called_the_pods_own() -> None:
    # Recorded on a real kernel: the limit set on /kubepods/burstable only, as --qos-reserved does.
    _, [report] = _reports("65-podmortem-v1-qos-burstable-limit-6.18")
    text = _finding(report, "memcg-limit")
    assert "the Burstable QoS cgroup /kubepods/burstable (limit 96.0 MiB) filled" in text
    assert "no pod hit a limit of its own" in text and "Raising this pod's limit does not help" in text
    assert "reached its own limit" not in text
    assert "a QoS class cgroup shared by many pods (not this pod's limit)" in cli.render([report])


def test_every_finding_on_every_record_states_its_figures(fixtures_dir: Path) -> None:
    """A finding is not made without the figures it rests on: its evidence names at least one."""
    for path in sorted((fixtures_dir / "oom-records").glob("*.log")):
        for record in oom_parser.parse_text(path.read_text(errors="replace")):
            for finding in diagnose(record).findings:
                figures = [v for v in finding.evidence.values() if v not in (None, "", [], {})]
                assert figures, f"{path.name}: {finding.code} has no evidence"
