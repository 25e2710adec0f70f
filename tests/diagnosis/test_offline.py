"""`podmortem.diagnosis.offline` on saved pod statuses as people paste them.

A pod status reaches ``podmortem diagnose`` as ``kubectl describe pod`` text (its fields as kubectl's
describe printer writes them: ``State:``/``Last State:``, ``Reason:``, ``Exit Code:``, ``Container
ID:``), as ``kubectl get pod -o yaml``/``-o json`` (the API's ``reason``, ``exitCode``,
``containerID`` ``<runtime>://<id>``), whole or in part (the ``containerStatuses``, one container's
``lastState``, a ``grep -A`` excerpt, lines elided with ``...``), or as the 2014 kubelet's container
status JSON. Whatever the paste did to the text (indentation changed or lost, lines joined, keys in
any order, unrelated fields, CRLF, a shell prompt and Markdown fences around it), the text is told
as what it is (`offline.sniff`), and the container's end read from it is the same: its exit code,
its reason, its container ID, and the verdict the operator gives on it.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podmortem.diagnosis import offline, termination, verdicts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "training-logs"
RECORDS = FIXTURES / "oom-records"

#: (the terminated state's reason as the API writes it, exit code, the reason read, the verdict).
ENDS = [
    ("OOMKilled", 137, "OOMKilled", "memcg-limit"),
    ("OOMKilled", 0, "OOMKilled", "memcg-limit"),  # a child OOM-killed, the main process exited 0
    ("OOM Killed", 137, "OOMKilled", "memcg-limit"),  # the kubelet's first spelling (kubernetes#3044)
    ("Error", 137, "Error", "sigkill-not-oom"),
    ("Error", 139, "Error", "segfault"),
]
RUNTIMES = [("containerd", "containerd"), ("cri-o", "cri-o"), ("docker", "docker")]

names = st.from_regex(r"[a-z][a-z0-9-]{0,12}[a-z0-9]", fullmatch=True)
ids = st.from_regex(r"[0-9a-f]{64}", fullmatch=True)
#: Fields the API or a later Kubernetes adds, which a reader must pass over.
extras = st.dictionaries(
    st.from_regex(r"x[A-Z][a-z]{1,8}", fullmatch=True),
    st.one_of(st.integers(-5, 10**6), st.booleans(), st.text("abcXYZ019 :-./", min_size=1, max_size=20)),
    max_size=4,
)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def read(text: str) -> list[termination.Termination]:
    """The terminations `offline` reads from a pasted text, of the kind it tells."""
    kind = offline.sniff(text)
    assert kind in ("pod", "describe"), (kind, text[:400])
    pods = offline.pods_from_document(text) if kind == "pod" else offline.pods_from_describe(text)
    return [t for pod in pods for t in termination.find(pod)]


def verdict(t: termination.Termination) -> str | None:
    report = verdicts.diagnose_termination(termination=t, evidence=None, last_line_ns=None, stale_after_s=600)
    return report.verdict


def shuffled(doc: Any, rnd: random.Random) -> Any:
    """The same object with every mapping's keys in another order."""
    if isinstance(doc, dict):
        items = list(doc.items())
        rnd.shuffle(items)
        return {k: shuffled(v, rnd) for k, v in items}
    if isinstance(doc, list):
        return [shuffled(v, rnd) for v in doc]
    return doc


def wrapped(text: str, how: str) -> str:
    """What a paste adds: CRLF line ends, the prompt with the command, Markdown fences."""
    if how == "crlf":
        return text.replace("\n", "\r\n")
    if how == "prompt":
        return "user@host:~$ kubectl get pod trainer-0 -o yaml\n" + text
    if how == "fence":
        return "```\n" + text.rstrip("\n") + "\n```\n"
    return text


# -- the API's pod object, whole or in part ----------------------------------------------------------


def pod_object(
    name: str, cid: str, reason: str, code: int, slot: str, extra: dict[str, Any]
) -> dict[str, Any]:
    term = {"containerID": cid, "exitCode": code, "reason": reason, "startedAt": "2024-05-01T09:00:05Z",
            "finishedAt": "2024-05-01T10:06:00Z", **extra}
    cs: dict[str, Any] = {"name": name, "containerID": cid, "image": "pytorch/pytorch:2.4.0", "ready": False,
                          "restartCount": 1, slot: {"terminated": term}, **extra}
    if slot == "lastState":
        cs["state"] = {"running": {"startedAt": "2024-05-01T10:06:01Z"}}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": "ml", "uid": "1f2e3d4c-5b6a-4978-8a9b-0c1d2e3f4a5b"},
        "spec": {"containers": [{"name": name, "image": "pytorch/pytorch:2.4.0"}], "nodeName": "node-7"},
        "status": {"phase": "Running", "containerStatuses": [cs], **extra},
    }


def excerpt(text: str, key: str, more: int) -> str:
    """``grep -A``: the line naming ``key``, its block, and ``more`` lines after, as they were."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf'\s*(?:- )?"?{key}"?:', line))
    depth = len(lines[start]) - len(lines[start].lstrip(" -"))

    def inside(line: str) -> bool:  # deeper, or an item of its list (YAML's ``- `` at the key's depth)
        indent = len(line) - len(line.lstrip(" "))
        return indent > depth or (indent == depth and line.lstrip().startswith("- "))

    end = start + 1
    while end < len(lines) and inside(lines[end]):
        end += 1
    return "\n".join(lines[start : end + more]) + "\n"


def elided(text: str, rnd: random.Random) -> str:
    """Lines that say nothing of the container's end replaced by ``...``, as a person elides them."""
    keep = re.compile(r"terminated|exitCode|reason|containerID|State|state|containerStatuses|status|^\S")
    out: list[str] = []
    for line in text.splitlines():
        if not keep.search(line) and rnd.random() < 0.5:
            if not out or out[-1].strip() != "...":
                out.append(" " * (len(line) - len(line.lstrip())) + "...")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


@SETTINGS
@given(name=names, cid=ids, end=st.sampled_from(ENDS), runtime=st.sampled_from(RUNTIMES),
       slot=st.sampled_from(["state", "lastState"]), extra=extras, seed=st.integers(0, 2**32),
       form=st.sampled_from(["yaml", "json", "status-yaml", "status-json", "yaml-excerpt",
                             "yaml-status-excerpt", "yaml-indented", "json-excerpt", "yaml-elided",
                             "json-elided"]),
       how=st.sampled_from(["", "crlf", "prompt", "fence"]), more=st.integers(0, 6))
def test_a_pod_object_whole_or_in_part_gives_the_containers_end(
    name: str, cid: str, end: tuple[str, int, str, str], runtime: tuple[str, str], slot: str,
    extra: dict[str, Any], seed: int, form: str, how: str, more: int,
) -> None:
    written, code, reason, want = end
    full_id = f"{runtime[0]}://{cid}"
    rnd = random.Random(seed)
    doc = shuffled(pod_object(name, full_id, written, code, slot, extra), rnd)
    as_yaml = yaml.safe_dump(doc, sort_keys=False)
    as_json = json.dumps(doc, indent=rnd.choice([1, 2, 4, 8]))
    text = {
        "yaml": as_yaml,
        "json": as_json,
        "status-yaml": yaml.safe_dump({"status": doc["status"]}, sort_keys=False),
        "status-json": json.dumps(doc["status"]),
        "yaml-excerpt": excerpt(as_yaml, slot, more),
        "yaml-status-excerpt": excerpt(as_yaml, "containerStatuses", more),
        "yaml-indented": "".join(f"      {line}\n" for line in excerpt(as_yaml, slot, more).splitlines()),
        "json-excerpt": excerpt(as_json, slot, more).rstrip("\n") + ",\n",
        "yaml-elided": elided(as_yaml, rnd),
        "json-elided": elided(as_json, rnd),
    }[form]
    [t] = read(wrapped(text, how))
    assert (t.exit_code, t.reason, t.container_id) == (code, reason, full_id)
    assert verdict(t) == want


@SETTINGS
@given(name=names, cid=ids, end=st.sampled_from(ENDS), extra=extras, indent=st.integers(0, 12),
       seed=st.integers(0, 2**32))
def test_the_2014_kubelets_container_status_json(
    name: str, cid: str, end: tuple[str, int, str, str], extra: dict[str, Any], indent: int, seed: int
) -> None:
    """``"<container>": {"state": {"termination": {...}}}``: by name, ``termination``, ``OOM Killed``."""
    written, code, reason, want = end
    term = {"exitCode": code, "reason": written, "startedAt": "2014-12-18T23:22:25Z", **extra}
    doc = shuffled({name: {"state": {"termination": term}, "restartCount": 0, "podIP": "10.0.0.3",
                           "containerID": f"docker://{cid}"}}, random.Random(seed))
    members = json.dumps(doc, indent=4)[1:-1].strip("\n")  # the map's members, without its braces
    text = "".join(" " * indent + line + "\n" for line in members.splitlines()).rstrip("\n") + ",\n"
    [t] = read(text)
    assert (t.container, t.exit_code, t.reason, t.container_id) == (name, code, reason, f"docker://{cid}")
    assert verdict(t) == want


def test_a_whole_2014_pod() -> None:
    """The v1beta1 pod: ``id``, ``currentState.host``, and ``currentState.info``: its containers by name."""
    killed = {"termination": {"exitCode": 137, "reason": "OOM Killed"}}
    info = {"net": {"state": {"running": {}}}, "oom-test": {"state": killed, "restartCount": 0}}
    doc = {"kind": "Pod", "id": "oom-test-pod", "apiVersion": "v1beta1", "namespace": "default",
           "currentState": {"status": "Terminated", "host": "kubernetes-minion-1", "info": info}}
    [t] = read(json.dumps(doc, indent=2))
    assert (t.pod, t.namespace, t.node) == ("oom-test-pod", "default", "kubernetes-minion-1")
    assert t.container == "oom-test"
    assert (t.exit_code, t.reason, verdict(t)) == (137, "OOMKilled", "memcg-limit")


def test_the_api_forms_of_the_corpus() -> None:
    """A grep'ed ``lastState``, a ``status:`` with elisions and a folded message, a 2014 status."""
    corpus = FIXTURES / "corpus-new"
    [t] = read((corpus / "104-microshift-oc-yaml-grep-laststate-oomkilled.yaml").read_text())
    assert (t.container, t.exit_code, t.reason) == ("demo-k8s-buggy", 137, "OOMKilled")
    assert t.container_id == "cri-o://b4c5ed733b2609695ebe06419afee12b38cf057ed49e6f171145eec442fda874"
    [t] = read((corpus / "160-flyteplugins-48-yaml-oomkilled-exit0-phase-succeeded-elided.yaml").read_text())
    assert (t.exit_code, t.reason, verdict(t)) == (0, "OOMKilled", "memcg-limit")
    [t] = read((corpus / "157-hush-house-8-yaml-status-node-low-ephemeral.yaml").read_text())
    assert t.pod_reason == "Evicted" and t.pod_message is not None
    assert "Container hush-house-worker was using 73712Ki" in t.pod_message  # the folded line joined
    assert verdict(t) == "ephemeral-storage-eviction"
    [t] = read((corpus / "162-k8s-3044-kubelet-status-json-oom-killed-2014.json.txt").read_text())
    assert (t.container, t.exit_code, t.reason, verdict(t)) == ("oom-test", 137, "OOMKilled", "memcg-limit")


def test_a_whole_document_that_does_not_parse_is_still_an_error() -> None:
    """Only a part of a pod object is read leniently; a whole one that is broken says so."""
    with pytest.raises(offline.BadInput, match="not valid JSON"):
        offline.pods_from_document('{"kind": "Pod", "status": {"containerStatuses": [')
    broken = (LOGS / "pod-preempted.yaml").read_text().replace("  name: trainer", "  name: [trainer")
    with pytest.raises(offline.BadInput, match="not valid YAML"):
        offline.pods_from_document(broken)


# -- kubectl describe pod ----------------------------------------------------------------------------


def describe(name: str, cid: str | None, reason: str, code: int, slot: str, step: int) -> str:
    """``kubectl describe pod`` as kubectl prints it, each level ``step`` spaces deeper (kubectl: 2)."""
    state = [("State", "Terminated"), ("  Reason", reason), ("  Exit Code", str(code)),
             ("  Started", "Wed, 01 May 2024 09:00:05 +0000"),
             ("  Finished", "Wed, 01 May 2024 10:06:00 +0000")]
    if slot == "Last State":
        state = [("State", "Running"), ("  Started", "Wed, 01 May 2024 10:06:01 +0000"),
                 ("Last State", "Terminated"), *state[1:]]
    container = [("Container ID", cid or ""), ("Image", "pytorch/pytorch:2.4.0"), ("Port", "<none>"),
                 ("Command", ""), ("  python", None), ("  train.py", None), *state, ("Ready", "False"),
                 ("Restart Count", "1"), ("Limits", ""), ("  memory", "32Gi"), ("Environment", ""),
                 ("  TZ", "Europe/Berlin"), ("Mounts", ""),
                 ("  /var/run/secrets/kubernetes.io/serviceaccount from kube-api-access-7xq2p (ro)", None)]
    rows = [(0, "Name", "trainer-0"), (0, "Namespace", "ml"), (0, "Priority", "0"),
            (0, "Node", "gpu-node-2/10.0.4.12"), (0, "Start Time", "Wed, 01 May 2024 09:00:02 +0000"),
            (0, "Labels", "app=llm"), (9, "batch.kubernetes.io/job-completion-index=0", None),
            (0, "Annotations", "<none>"), (0, "Status", "Running"), (0, "IP", "10.244.3.17"),
            (0, "IPs", ""), (1, "IP", "10.244.3.17"), (0, "Containers", ""), (1, name, "")]
    rows += [(2 + key.count("  "), key.strip(), value) for key, value in container]
    rows += [(0, "Conditions", ""), (1, "Type              Status", None),
             (1, "Ready             False ", None),
             (0, "Volumes", ""), (1, "kube-api-access-7xq2p", ""), (2, "Type", "Projected (a volume)"),
             (0, "QoS Class", "Burstable"), (0, "Events", "<none>")]
    out = []
    for level, key, value in rows:
        pad = " " * (level * step)
        if value is None:
            out.append(pad + key)
        else:
            out.append(f"{pad}{key}:" + (" " * max(1, 18 - len(pad) - len(key)) + value if value else ""))
    return "\n".join(out) + "\n"


def flattened(text: str, one_space: bool) -> str:
    """Indentation lost: every line at the margin, or one space in where it was indented."""
    pad = " " if one_space else ""
    return "".join((pad if line[:1] == " " else "") + line.strip() + "\n" for line in text.splitlines())


@SETTINGS
@given(name=names, cid=ids, end=st.sampled_from([e for e in ENDS if e[0] != "OOM Killed"]),
       runtime=st.sampled_from(RUNTIMES), slot=st.sampled_from(["State", "Last State"]),
       step=st.integers(1, 6),
       form=st.sampled_from(["whole", "flat", "flat-1", "joined", "containers", "state"]),
       how=st.sampled_from(["", "crlf", "prompt", "fence"]))
def test_describe_any_indentation_flattened_joined_or_in_part_gives_the_containers_end(
    name: str, cid: str, end: tuple[str, int, str, str], runtime: tuple[str, str], slot: str, step: int,
    form: str, how: str,
) -> None:
    written, code, reason, want = end
    full_id = f"{runtime[0]}://{cid}"
    text = describe(name, full_id, written, code, slot, step)
    lines = text.splitlines()
    if form == "flat":
        text = flattened(text, one_space=False)
    elif form == "flat-1":
        text = flattened(text, one_space=True)
    elif form == "joined":
        text = " ".join(line.strip() for line in lines) + "\n"
    elif form == "containers":  # the poster kept the Containers part
        a = lines.index("Containers:")
        b = lines.index("Conditions:")
        text = "\n".join(lines[a:b]) + "\n"
    elif form == "state":  # ... or the container's state lines alone
        a = next(i for i, line in enumerate(lines) if line.strip().startswith("State:"))
        b = next(i for i, line in enumerate(lines) if line.strip().startswith("Ready:"))
        text = "\n".join(lines[a : b + 2]) + "\n"
    [t] = read(wrapped(text, how))
    assert (t.exit_code, t.reason) == (code, reason)
    if form != "state":
        assert t.container_id == full_id
    if form not in ("state", "joined"):
        assert t.container == name
    assert verdict(t) == want
    if form in ("whole", "flat", "flat-1"):
        [pod] = offline.pods_from_describe(wrapped(text, how))
        assert pod["metadata"]["name"] == "trainer-0" and pod["spec"]["nodeName"] == "gpu-node-2"
        assert {"name": "TZ", "value": "Europe/Berlin"} in pod["spec"]["containers"][0]["env"]


def test_the_describe_forms_of_the_corpus() -> None:
    """State lines alone; the Containers part alone; the pod's status lines alone; describe that lost
    its indentation (the fields at the margin or one space in); after a shell prompt."""
    corpus = FIXTURES / "corpus-new"
    cases = {
        "110-appuio-ops-techlab-describe-state-oomkilled.txt": (137, "OOMKilled", None, "memcg-limit"),
        "151-aks-describe-containers-last-state-oomkilled.txt": (137, "OOMKilled", None, "memcg-limit"),
        "161-k8s-131530-describe-oomkilled-exit0-plus-phase-line.txt": (0, "OOMKilled", None, "memcg-limit"),
        "116-loongarch-describe-flattened-last-state-error-137.txt": (
            137, "Error", "containerd://2680dbb5a408d2c104f7a688f9e292f4a2856bb41a574c0bccb0ef064dcd7d56",
            "sigkill-not-oom"),
        "111-appuio-ops-techlab-describe-evicted-memory.txt": (None, None, None, "eviction"),
        "155-kubeplus-1389-describe-evicted-container-ephemeral-limit.txt": (
            None, None, None, "ephemeral-storage-eviction"),
        "156-neuvector-272-describe-autopilot-pod-ephemeral-total-limit.txt": (
            None, None, None, "ephemeral-storage-eviction"),
    }
    for name, (code, reason, cid, want) in cases.items():
        [t] = read((corpus / name).read_text())
        assert (t.exit_code, t.reason, t.container_id, verdict(t)) == (code, reason, cid, want), name
    flat = (corpus / "116-loongarch-describe-flattened-last-state-error-137.txt").read_text()
    [pod] = offline.pods_from_describe(flat)
    assert pod["metadata"] == {"name": "prometheus-696c87f98f-f44nm", "namespace": "monitor",
                               "labels": {"app": "prometheus", "pod-template-hash": "696c87f98f"},
                               "annotations": {"cni.projectcalico.org/podIP": "172.15.127.32/32",
                                               "cni.projectcalico.org/podIPs": "172.15.127.32/32"}}
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["prometheus-dir", "kube-api-access-sflmb"]
    assert [c["type"] for c in pod["status"]["conditions"]] == ["Initialized", "Ready", "ContainersReady",
                                                                "PodScheduled"]
    [cs] = pod["status"]["containerStatuses"]
    assert cs["state"] == {"running": {"startedAt": "2025-04-28T10:11:39+08:00"}}


def test_several_pods_in_flattened_describe_text() -> None:
    one = flattened(describe("trainer", "containerd://" + "a" * 64, "OOMKilled", 137, "State", 2), True)
    two = flattened(describe("loader", "containerd://" + "b" * 64, "Error", 139, "Last State", 2), True)
    terms = read(one + "\n" + two.replace("trainer-0", "trainer-1"))
    assert [(t.pod, t.container, verdict(t)) for t in terms] == [
        ("trainer-0", "trainer", "memcg-limit"), ("trainer-1", "loader", "segfault")]


def test_describe_forced_on_what_is_not_describe_is_an_error() -> None:
    with pytest.raises(offline.BadInput, match="not kubectl describe pod output"):
        offline.pods_from_describe((LOGS / "pod-oomkilled.yaml").read_text())
    with pytest.raises(offline.BadInput, match="not kubectl describe pod output"):
        offline.pods_from_describe((LOGS / "python-exception.log").read_text())


# -- what is not a pod status -------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted([*LOGS.glob("*.log"), *RECORDS.glob("*.log")]), ids=lambda p: p.name)
def test_training_logs_and_kernel_text_are_not_pod_statuses(path: Path) -> None:
    assert offline.sniff(path.read_text(errors="replace")[: 64 * 1024]) is None


log_lines = st.one_of(
    st.builds("epoch {} step {} loss {:.4f}".format, st.integers(0, 99), st.integers(0, 10**5),
              st.floats(0, 9)),
    st.builds('  File "/app/train.py", line {}, in {}'.format, st.integers(1, 999), names),
    st.builds("[rank{}]: {}".format, st.integers(0, 7), st.sampled_from(["Traceback (most recent call last):",
                                                                         "torch.OutOfMemoryError: CUDA"])),
    st.just("Traceback (most recent call last):"),
    st.just("RuntimeError: CUDA error: an illegal memory access was encountered"),
    st.just("NCCL INFO Channel 00/02 :    0   1"),
)
quoted_lines = st.sampled_from([
    "State:          Terminated", "Last State:     Terminated", "  Reason:       OOMKilled", "Exit Code: 137",
    "Status:  Failed", "Reason: Evicted", "reason: OOMKilled", "    exitCode: 137", "      terminated:",
    '"reason": "Evicted",', "lastState:", "  containerStatuses:",
])


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(log_lines, min_size=3, max_size=60), quotes=st.lists(quoted_lines, max_size=2),
       at=st.integers(0, 60))
def test_a_training_log_that_quotes_a_status_line_is_not_one(
    lines: list[str], quotes: list[str], at: int
) -> None:
    """A log that prints a pod's state among its own lines is still a log: the state's lines must
    begin the text and be more than half of it."""
    for quote in quotes:
        lines.insert(min(at, len(lines)), quote)
    assert offline.sniff("\n".join(lines) + "\n") is None


# -- parts pasted after prose or a command -------------------------------------------------------------


def test_describe_events_alone_with_the_kubelets_eviction_read_as_an_evicted_pod() -> None:
    text = ("$ kubectl describe pod grow-test\nEvents:\n  Type     Reason   Age    From     Message\n"
            "  ----     ------   ----   ----     -------\n"
            "  Warning  Evicted  4m51s  kubelet  The node was low on resource: memory.\n")
    assert offline.sniff(text) == "describe"
    [pod] = offline.pods_from_describe(text)
    status = pod["status"]
    assert (status["reason"], status["message"]) == ("Evicted", "The node was low on resource: memory.")


def test_a_disruption_condition_printed_by_jq_is_a_pod_being_stopped() -> None:
    text = ('# the condition\n$ kubectl get po p -o json | jq \'.status.conditions[]\'\n{\n'
            '  "reason": "PreemptionByKubeScheduler",\n  "status": "True",\n'
            '  "type": "DisruptionTarget"\n}\n')
    assert offline.sniff(text) == "pod"
    [pod] = offline.pods_from_document(text)
    assert termination.find(pod) == []
    pending = termination.being_disrupted(pod)
    assert pending is not None and pending.disruption == ("PreemptionByKubeScheduler", "")
    # a pod whose containers already ended is reported by them, as the operator does
    ended = {**pod, "status": {**pod["status"], "containerStatuses": [
        {"name": "c", "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}]}}
    assert termination.being_disrupted(ended) is None


def test_a_describe_state_block_after_the_posters_prose_is_a_describe() -> None:
    block = ("wk64c\n    State: Running\n      Started: Mon, 13 Nov 2023 03:50:57 +0100\n"
             "    Last State: Terminated\n      Reason: Error\n      Exit Code: 137\n    Restart Count: 1\n")
    assert offline.sniff("Our pods restarted once:\n\n" + block) == "describe"
