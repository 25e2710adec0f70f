"""Label selectors read and matched as Kubernetes does (apimachinery pkg/labels)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podmortem.kube import label_selector as ls
from podmortem.kube.label_selector import SelectorError, parse

# --- tables of real selectors ------------------------------------------------------------------------

MATCHES = [
    # selector, labels, matches
    ("", {}, True),
    ("", {"app": "x"}, True),
    ("app=trainer", {"app": "trainer"}, True),
    ("app=trainer", {"app": "trainer2"}, False),
    ("app=trainer", {}, False),
    ("app==trainer", {"app": "trainer"}, True),
    ("app!=trainer", {"app": "web"}, True),
    ("app!=trainer", {}, True),  # != also matches a pod without the key
    ("app!=trainer", {"app": "trainer"}, False),
    ("app", {"app": ""}, True),
    ("app", {"other": "x"}, False),
    ("!app", {"other": "x"}, True),
    ("!app", {"app": ""}, False),
    ("tier in (gpu,tpu)", {"tier": "tpu"}, True),
    ("tier in (gpu,tpu)", {"tier": "cpu"}, False),
    ("tier in (gpu,tpu)", {}, False),
    ("tier notin (gpu,tpu)", {"tier": "cpu"}, True),
    ("tier notin (gpu,tpu)", {}, True),
    ("tier notin (gpu,tpu)", {"tier": "gpu"}, False),
    ("tier in ()", {"tier": ""}, True),  # () is the empty value
    ("tier in ()", {"tier": "x"}, False),
    ("tier in (a,)", {"tier": ""}, True),
    ("app=", {"app": ""}, True),
    ("app=", {"app": "x"}, False),
    ("app=trainer,tier in (gpu),!canary", {"app": "trainer", "tier": "gpu"}, True),
    ("app=trainer,tier in (gpu),!canary", {"app": "trainer", "tier": "gpu", "canary": "1"}, False),
    ("x in (foo,,baz),y,z notin ()", {"x": "", "y": "1"}, True),
    ("x in (foo,,baz),y,z notin ()", {"x": "foo", "y": "1", "z": ""}, False),
    ("in in (in, notin)", {"in": "notin"}, True),  # keywords are words where keys and values go
    ("notin=in", {"notin": "in"}, True),
    ("example.com/team in (ml), kubeflow.org/job-name",
     {"example.com/team": "ml", "kubeflow.org/job-name": "j"}, True),
    ("gpus>4", {"gpus": "8"}, True),
    ("gpus>4", {"gpus": "4"}, False),
    ("gpus>4", {"gpus": "eight"}, False),  # not a number: no match
    ("gpus>4", {}, False),
    ("gpus<4", {"gpus": "007"}, False),
    ("gpus<8", {"gpus": "007"}, True),
    ("  app = trainer ,\ttier\nin(gpu)  ", {"app": "trainer", "tier": "gpu"}, True),
]


@pytest.mark.parametrize(("selector", "labels", "expected"), MATCHES)
def test_real_selectors_match_as_in_kubernetes(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert parse(selector).matches(labels) is expected


REFUSED = [
    ("app=trainer,", "expected a key"),  # a comma needs a requirement after it
    (",app", "expected a key"),
    ("app trainer", "expected one of"),
    ("app=(x)", "expected a value"),
    ("app in x", "expected '('"),
    ("app in (x", "',' or ')'"),
    ("app in (x y)", "',' or ')'"),
    ("app in (x,,)", "',' or a value"),  # Kubernetes' comma pairing refuses this one
    ("app notin", "expected '('"),
    ("!app=x", "',' or the end"),
    ("!", "expected a key"),
    ("app!x", "expected one of"),
    ("app>=5", "expected a value"),
    ("gpus>", "whole number"),
    ("gpus>four", "whole number"),
    ("gpus>99999999999999999999", "whole number"),  # beyond 64 bits
    ("-app=x", "name"),
    ("App_=x", "name"),
    ("a/b/c", "at most one '/'"),
    ("/app", "prefix"),
    ("Example.com/app", "DNS-1123"),
    ("example.com/", "name is empty"),
    ("k" * 64, "longer than 63"),
    ("app=" + "v" * 64, "longer than 63"),
    ("app=-x", "value"),
    ("app=a b", "',' or the end"),
    ("app=x\x00,y", "control character"),
    ("é=x", "name"),
]


@pytest.mark.parametrize(("selector", "reason"), REFUSED)
def test_what_kubernetes_refuses_is_refused_with_the_reason(selector: str, reason: str) -> None:
    with pytest.raises(SelectorError) as raised:
        parse(selector)
    assert reason in str(raised.value)


def test_a_prefix_may_be_253_characters_and_no_more() -> None:
    prefix = ".".join(["a" * 63] * 3 + ["b" * 61])  # 253
    assert parse(f"{prefix}/app").matches({f"{prefix}/app": "x"})
    with pytest.raises(SelectorError, match="DNS-1123"):
        parse(f"{prefix}c/app")


def test_the_selector_is_bounded_in_size() -> None:
    many = ",".join(f"k{i}=v" for i in range(2000))[: ls.MAX_SELECTOR_CHARS]
    many = many[: many.rindex(",")]
    assert len(parse(many).requirements) > 300
    with pytest.raises(SelectorError, match="at most 4096 characters"):
        parse("a" * (ls.MAX_SELECTOR_CHARS + 1))


# --- properties --------------------------------------------------------------------------------------

KEYS = ["app", "tier", "example.com/team", "in", "notin", "a.b_c-D9"]
VALUES = ["", "x", "in", "notin", "gpu", "5", "12", "007", "A.b-c_9"]
NUMBERS = ["0", "4", "5", "12", "007"]


def requirement() -> st.SearchStrategy[ls.Requirement]:
    def of(key: str, op: str) -> st.SearchStrategy[ls.Requirement]:
        if op in ("exists", "!"):
            return st.just(ls.Requirement(key, op))  # type: ignore[arg-type]
        if op in ("in", "notin"):
            return st.lists(st.sampled_from(VALUES), min_size=1, max_size=4).map(
                lambda vs: ls.Requirement(key, op, tuple(dict.fromkeys(vs)))  # type: ignore[arg-type]
            )
        pool = NUMBERS if op in (">", "<") else VALUES
        return st.sampled_from(pool).map(lambda v: ls.Requirement(key, op, (v,)))  # type: ignore[arg-type]

    ops = ["exists", "!", "=", "==", "!=", "in", "notin", ">", "<"]
    return st.tuples(st.sampled_from(KEYS), st.sampled_from(ops)).flatmap(lambda ko: of(*ko))


def oracle(req: ls.Requirement, labels: dict[str, str]) -> bool:
    """What each operator means, written out apart from the module's own matcher."""
    op, has, value = req.operator, req.key in labels, labels.get(req.key, "")
    if op in ("exists", "!"):
        return has is (op == "exists")
    if op in ("=", "==", "in"):
        return has and value in req.values
    if op in ("!=", "notin"):
        return not has or value not in req.values
    if not (has and value.isdigit()):
        return False
    return int(value) > int(req.values[0]) if op == ">" else int(value) < int(req.values[0])


label_sets = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=len(KEYS))
selectors = st.lists(requirement(), max_size=5)


@given(reqs=selectors, labels=label_sets)
def test_a_rendered_selector_reads_back_to_the_same_meaning(reqs: list[ls.Requirement], labels: dict[str, str]
                                                            ) -> None:
    text = ",".join(str(r) for r in reqs)
    parsed = parse(text)
    assert parsed.matches(labels) is all(oracle(r, labels) for r in reqs)
    assert str(parse(str(parsed))) == str(parsed)


@given(a=selectors, b=selectors, labels=label_sets)
def test_a_comma_is_and(a: list[ls.Requirement], b: list[ls.Requirement], labels: dict[str, str]) -> None:
    left, right = ",".join(map(str, a)), ",".join(map(str, b))
    joined = ",".join(part for part in (left, right) if part)
    assert parse(joined).matches(labels) is (parse(left).matches(labels) and parse(right).matches(labels))


blanks = st.lists(st.sampled_from(["", " ", "\t", "\n", "  "]), min_size=8, max_size=8)


def spaced(req: ls.Requirement, ws: list[str]) -> str:
    """``req`` with blanks wherever Kubernetes allows them (between any two tokens)."""
    if req.operator == "exists":
        return f"{ws[0]}{req.key}{ws[1]}"
    if req.operator == "!":
        return f"{ws[0]}!{ws[1]}{req.key}{ws[2]}"
    if req.operator in ("in", "notin"):
        inner = f"{ws[4]},{ws[5]}".join(req.values)
        return f"{ws[0]}{req.key} {ws[1]}{req.operator} {ws[2]}({ws[3]}{inner}{ws[6]}){ws[7]}"
    return f"{ws[0]}{req.key}{ws[1]}{req.operator}{ws[2]}{req.values[0]}{ws[3]}"


@given(reqs=st.lists(st.tuples(requirement(), blanks), max_size=5), labels=label_sets)
def test_blanks_between_tokens_change_nothing(reqs: list[tuple[ls.Requirement, list[str]]],
                                              labels: dict[str, str]) -> None:
    plain = ",".join(str(r) for r, _ in reqs)
    text = ",".join(spaced(r, ws) for r, ws in reqs)
    assert parse(text).matches(labels) is parse(plain).matches(labels)
    assert str(parse(text)) == str(parse(plain))


@given(st.text(alphabet="ab=!(),<> \tin5x/.", max_size=40))
def test_any_text_is_read_or_refused_with_a_selector_error(text: str) -> None:
    try:
        parsed = parse(text)
    except SelectorError:
        return
    assert str(parse(str(parsed))) == str(parsed)  # what is read renders to text that reads the same


def test_a_pod_selector_needs_the_namespace_and_the_labels() -> None:
    picked = ls.PodSelector(selector=parse("app=trainer"), namespaces=("ml", "vision"))
    assert picked.selects("ml", {"app": "trainer"}) and picked.selects("vision", {"app": "trainer"})
    assert not picked.selects("web", {"app": "trainer"})
    assert not picked.selects("ml", {"app": "web"}) and not picked.selects("ml", None)
    anywhere = ls.PodSelector(selector=parse("app=trainer"))
    assert anywhere.selects("web", {"app": "trainer"})
    whole_namespace = ls.PodSelector(namespaces=("ml",))
    assert whole_namespace.selects("ml", None) and not whole_namespace.selects("web", None)
