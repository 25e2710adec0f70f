"""The TrainingJob printed the way `kubectl describe` prints a custom resource."""

from __future__ import annotations

from datetime import UTC, datetime

from podmortem_demo import describe


def test_words_split_camel_case_like_kubectl() -> None:
    assert describe.words("failureReport") == "Failure Report"
    assert describe.words("podUID") == "Pod UID"
    assert describe.words("lastLogLineAt") == "Last Log Line At"
    assert describe.words("anon_rss_kb") == "Anon_rss_kb"


def test_describe_shows_sections_report_and_events() -> None:
    obj = {
        "apiVersion": "podmortem.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": "pg",
            "namespace": "ml",
            "labels": {"app": "x"},
            "uid": "u-1",
            "managedFields": [{"manager": "kopf"}],
        },
        "spec": {"template": {"spec": {"containers": [{"name": "trainer", "args": ["--a", "1"]}]}}},
        "status": {
            "phase": "Failed",
            "failureReport": {
                "verdict": "memcg-limit",
                "findings": [{"code": "fork-copies", "evidence": {"fork_pids": [1, 2]}}],
                "cgroup": {"stat": {f"key{i}": i for i in range(40)}},
            },
        },
    }
    now = datetime(2024, 5, 1, 10, 0, 30, tzinfo=UTC)
    events = [
        {
            "type": "Warning",
            "reason": "MemcgLimit",
            "message": "killed",
            "lastTimestamp": "2024-05-01T10:00:00Z",
            "source": {"component": "podmortem-operator"},
        }
    ]
    text = describe.describe(obj, events=events, now=now)
    lines = text.splitlines()
    assert lines[0] == "Name:         pg"
    assert "Namespace:    ml" in lines and "Labels:       app=x" in lines
    assert "Managed Fields" not in text
    assert "  Failure Report:" in lines and "    Verdict:  memcg-limit" in lines
    assert "      - Code:  fork-copies" in lines
    assert "          Fork_pids: 1, 2" in lines
    assert "        - Name:  trainer" in lines
    # A long map deep in the report is cut, with a count; the report's own keys are not.
    assert "        … 29 more (kubectl get -o yaml shows all)" in lines
    assert "        Key10:  10" in lines and "        Key11:  11" not in lines
    assert lines[-1].split() == ["Warning", "MemcgLimit", "30s", "podmortem-operator", "killed"]


def test_describe_without_events_or_limit() -> None:
    obj = {"kind": "TrainingJob", "metadata": {"name": "a"}, "status": {"x": {"y": list(range(30))}}}
    text = describe.describe(obj, max_items=None)
    assert text.endswith("Events:       <none>")
    assert "Y: 0, 1, 2" in text and "29" in text


def test_byte_counts_carry_their_binary_unit_reading() -> None:
    obj = {
        "kind": "TrainingJob",
        "metadata": {"name": "a"},
        "status": {
            "memory": {"podPeakBytes": 237596836, "peakOfLimit": "227Mi/256Mi (89%)", "workersPssBytes": 0},
            "failureReport": {
                "evidence": {"workingSet": {"peakBytes": 147001344}},
                "kill": {"anon_rss_kb": 172948, "pid": 4471},
                "cgroup": {"limit_bytes": 268435456},
            },
        },
    }
    lines = describe.describe(obj).splitlines()
    # The same units as peakOfLimit, the MemoryPressure message and the summary.
    assert "    Pod Peak Bytes:  237596836 (227Mi)" in lines
    assert "    Peak Of Limit:  227Mi/256Mi (89%)" in lines
    assert "    Workers Pss Bytes:  0" in lines
    assert "        Peak Bytes:  147001344 (140Mi)" in lines
    assert "      Anon_rss_kb:  172948 (169Mi)" in lines and "      Pid:  4471" in lines
    assert "      Limit_bytes:  268435456 (256Mi)" in lines


def test_labels_mark_fields_condition_messages_and_events() -> None:
    obj = {
        "kind": "TrainingJob",
        "metadata": {"name": "a"},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "True", "message": "epoch 2: ..."},
                {"type": "Failed", "status": "True", "message": "The kernel killed python3 (pid 6054)"},
            ],
            "failureReport": {"verdict": "memcg-limit", "kill": {"pid": 6054}, "pod": {"name": "p"}},
        },
    }
    labels = describe.Labels(
        fields={("status", "failureReport", "verdict"): "[R]", ("status", "failureReport", "kill"): "[R]"},
        conditions={"Failed": "[R]"},
        events={"KernelRecordAttached": "[R]"},
    )
    events = [
        {"type": "Warning", "reason": "MemcgLimit", "message": "first"},
        {"type": "Warning", "reason": "KernelRecordAttached", "message": "attached"},
    ]
    lines = describe.describe(obj, events=events, labels=labels).splitlines()
    assert "    Verdict:  memcg-limit  [R]" in lines
    assert "    Kill:  [R]" in lines and "    Pod:" in lines
    assert "      Message:  [R] The kernel killed python3 (pid 6054)" in lines
    assert "      Message:  epoch 2: ..." in lines
    assert lines[-2].endswith(" first") and lines[-1].endswith(" [R] attached")
    # Without labels, nothing is marked.
    assert "[R]" not in describe.describe(obj, events=events)


def test_hidden_parts_are_one_line_each_and_keep_their_labels() -> None:
    obj = {
        "kind": "TrainingJob",
        "metadata": {"name": "a"},
        "spec": {"followLogs": True, "template": {"spec": {"containers": [{"name": "trainer"}]}}},
        "status": {
            "failureReport": {
                "verdict": "memcg-limit",
                "tasks": [{"pid": 1}, {"pid": 2}],
                "findings": [{"code": "fork-copies", "message": "forked", "evidence": {"fork_pids": [1, 2]}}],
                "kill": {"pid": 6054, "comm": "python3"},
                "cgroup": {},
            },
        },
    }
    labels = describe.Labels(fields={("status", "failureReport", "kill", "pid"): "[R]"})
    full = describe.describe(obj, labels=labels).splitlines()
    brief = describe.describe(obj, labels=labels, hide=describe.BRIEF_HIDDEN).splitlines()
    assert len(brief) < len(full)
    assert "  Template:  … (podmortem demo -v shows it)" in brief and "  Follow Logs:  true" in brief
    assert "    Tasks:  … (podmortem demo -v shows it)" in brief
    assert "        Evidence:  … (podmortem demo -v shows it)" in brief
    assert "        Message:  forked" in brief and "    Verdict:  memcg-limit" in brief
    # A label under a hidden part is said on its line: nothing recorded goes unmarked.
    assert "    Kill:  … (podmortem demo -v shows it)  [R]" in brief
    assert "      Pid:  6054  [R]" in full
    # An empty part has nothing to hide.
    assert "    Cgroup:  … (podmortem demo -v shows it)" not in brief
