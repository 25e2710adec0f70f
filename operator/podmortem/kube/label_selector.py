"""Kubernetes label selectors in their string form (``app=trainer,tier in (gpu,tpu),!canary``): parse, match.

The grammar, the validation and the matching are Kubernetes' own (k8s.io/apimachinery
pkg/labels/selector.go), so a selector a user tried with ``kubectl get pods -l`` means the same here:

* requirements joined by ``,`` (AND); whitespace (space, tab, CR, LF) between tokens is ignored;
* ``key`` (exists), ``!key`` (does not exist), ``key=v`` / ``key==v`` / ``key!=v`` (``v`` may be
  empty: ``key=``), ``key in (a,b)`` / ``key notin (a,b)`` (empty items are the empty value:
  ``key in ()`` is ``key in ("")``), ``key>5`` / ``key<5`` (whole numbers);
* ``!=`` and ``notin`` also match a pod without the key; ``>``/``<`` never do, nor a value that is not
  a whole number;
* keys are qualified names (``[prefix/]name``: prefix a DNS-1123 subdomain of at most 253 characters,
  name at most 63 characters of ``[A-Za-z0-9._-]`` starting and ending alphanumeric), values valid
  label values (the same character rule, at most 63 characters, or empty);
* ``in`` and ``notin`` are keywords only where an operator goes: ``in in (in)`` is a key ``in``.

One difference: Go's lexer stops at a NUL byte as at the end; here any control character is an
error, since a selector from configuration with one in it is a mistake, not a shorter selector.

Pure: no I/O. Parsing is one pass over the text, bounded by `MAX_SELECTOR_CHARS`, and every regular
expression runs on a piece whose length was checked first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

#: Characters of a selector. It comes from configuration, not from users of the cluster, but a bound
#: keeps a pasted mistake from being parsed at length; 4 KiB holds dozens of requirements.
MAX_SELECTOR_CHARS = 4096
#: Longest label value and key name part; longest key prefix (Kubernetes' limits).
MAX_NAME = 63
MAX_PREFIX = 253

Operator = Literal["exists", "!", "=", "==", "!=", "in", "notin", ">", "<"]

_WHITESPACE = frozenset(" \t\r\n")
_SPECIAL = frozenset("=!(),><")
_TWO_CHAR = frozenset({"==", "!="})
_KEYWORDS = frozenset({"in", "notin"})
_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = (-(2**63), 2**63 - 1)


class SelectorError(ValueError):
    """A selector that Kubernetes would refuse; the message says where and why."""


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a label key (a qualified name), or None when it is one."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if "/" in prefix:
            return "a key has at most one '/' (prefix/name)"
        if not prefix:
            return "the key's prefix before '/' is empty"
        if len(prefix) > MAX_PREFIX or not all(_DNS_LABEL.fullmatch(p) for p in prefix.split(".")):
            return (f"the key's prefix {prefix!r} is not a DNS-1123 subdomain (lower-case alphanumerics, '-' "
                    f"and '.', each part starting and ending alphanumeric, at most {MAX_PREFIX} characters)")
    if not name:
        return "the key's name is empty"
    if len(name) > MAX_NAME:
        return f"the key's name is longer than {MAX_NAME} characters"
    if not _NAME.fullmatch(name):
        return (f"the key's name {name!r} must be alphanumerics, '-', '_' or '.', starting and ending "
                f"alphanumeric")
    return None


def value_problem(value: str) -> str | None:
    """Why ``value`` is not a label value, or None when it is one (the empty value is)."""
    if len(value) > MAX_NAME:
        return f"a value is longer than {MAX_NAME} characters"
    if value and not _NAME.fullmatch(value):
        return (f"the value {value!r} must be empty or alphanumerics, '-', '_' or '.', starting and ending "
                f"alphanumeric")
    return None


def _whole(text: str) -> int | None:
    """``text`` as a 64-bit whole number, as Go's ``strconv.ParseInt(text, 10, 64)`` reads it."""
    if not _INT.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64[0] <= number <= _INT64[1] else None


@dataclass(frozen=True)
class Requirement:
    """One requirement: a key, an operator and its values (one for ``=``/``!=``/``>``/``<``, none for
    ``exists``/``!``)."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        if op in ("=", "==", "in"):
            return self.key in labels and labels[self.key] in self.values
        if op in ("!=", "notin"):
            return self.key not in labels or labels[self.key] not in self.values
        if self.key not in labels:
            return False
        have, bound = _whole(labels[self.key]), _whole(self.values[0])
        if have is None or bound is None:
            return False
        return have > bound if op == ">" else have < bound

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!":
            return "!" + self.key
        if self.operator in ("in", "notin"):
            return f"{self.key} {self.operator} ({','.join(sorted(set(self.values)))})"
        return f"{self.key}{self.operator}{self.values[0]}"


@dataclass(frozen=True)
class LabelSelector:
    """Requirements that must all hold; none matches every label set (as the empty selector does)."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        present = labels or {}
        return all(r.matches(present) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


@dataclass(frozen=True)
class PodSelector:
    """Pods by namespace and labels, as a pod list in each of ``namespaces`` with a ``labelSelector``
    would give them (the operator's and the agent's follow selector)."""

    #: The empty selector matches every pod.
    selector: LabelSelector = field(default_factory=LabelSelector)
    #: Empty: every namespace.
    namespaces: tuple[str, ...] = ()

    def selects(self, namespace: str, labels: Mapping[str, str] | None) -> bool:
        return (not self.namespaces or namespace in self.namespaces) and self.selector.matches(labels)


# --- lexer --------------------------------------------------------------------------------------------

_Kind = Literal["id", "in", "notin", "=", "==", "!=", "!", ">", "<", "(", ")", ",", "end"]


@dataclass(frozen=True)
class _Token:
    kind: _Kind
    text: str
    at: int  # 0-based character offset, for messages


def _tokens(text: str) -> list[_Token]:
    """The tokens of ``text``: an operator symbol (``==`` and ``!=`` taken whole), or an identifier (a run of
    anything else up to whitespace or a symbol, ``in``/``notin`` marked as keywords); one pass."""
    out: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _WHITESPACE:
            i += 1
        elif ch in _SPECIAL:
            pair = text[i:i + 2]
            symbol = pair if pair in _TWO_CHAR else ch
            out.append(_Token(symbol, symbol, i))  # type: ignore[arg-type]
            i += len(symbol)
        else:
            start = i
            while i < n and text[i] not in _WHITESPACE and text[i] not in _SPECIAL:
                i += 1
            word = text[start:i]
            out.append(_Token(word if word in _KEYWORDS else "id", word, start))  # type: ignore[arg-type]
    out.append(_Token("end", "", n))
    return out


# --- parser ---------------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self, *, values: bool = True) -> _Token:
        return self._as(self.tokens[self.at], values)

    def take(self, *, values: bool = True) -> _Token:
        token = self.tokens[self.at]
        if token.kind != "end":
            self.at += 1
        return self._as(token, values)

    @staticmethod
    def _as(token: _Token, values: bool) -> _Token:
        # Where a key or a value goes, the keywords are plain words.
        if values and token.kind in ("in", "notin"):
            return _Token("id", token.text, token.at)
        return token

    def fail(self, token: _Token, expected: str) -> SelectorError:
        found = "the end" if token.kind == "end" else repr(token.text)
        return SelectorError(f"at character {token.at + 1}: found {found}, expected {expected}")

    def selector(self) -> LabelSelector:
        requirements: list[Requirement] = []
        if self.peek().kind == "end":
            return LabelSelector()
        while True:
            token = self.peek()
            if token.kind not in ("id", "!"):
                raise self.fail(token, "a key or '!key'")
            requirements.append(self.requirement())
            after = self.take()
            if after.kind == "end":
                return LabelSelector(tuple(requirements))
            if after.kind != ",":
                raise self.fail(after, "',' or the end")

    def requirement(self) -> Requirement:
        negated = self.peek().kind == "!"
        if negated:
            self.take()
        key_token = self.take()
        if key_token.kind != "id":
            raise self.fail(key_token, "a key")
        key = key_token.text
        if (problem := key_problem(key)) is not None:
            raise SelectorError(f"at character {key_token.at + 1}: {problem}")
        if negated:
            return Requirement(key, "!")
        if self.peek().kind in ("end", ","):
            return Requirement(key, "exists")
        op_token = self.take(values=False)
        if op_token.kind in ("in", "notin"):
            values = self.value_set()
        elif op_token.kind in ("=", "==", "!=", ">", "<"):
            values = (self.exact_value(),)
        else:
            raise self.fail(op_token, "one of =, ==, !=, in, notin, >, <")
        for value in values:
            if (problem := value_problem(value)) is not None:
                raise SelectorError(f"in the requirement on {key!r}: {problem}")
        if op_token.kind in (">", "<") and _whole(values[0]) is None:
            raise SelectorError(f"in the requirement on {key!r}: '{op_token.kind}' needs a whole number, "
                                f"got {values[0]!r}")
        return Requirement(key, op_token.kind, values)

    def exact_value(self) -> str:
        if self.peek().kind in ("end", ","):
            return ""
        token = self.take()
        if token.kind != "id":
            raise self.fail(token, "a value")
        return token.text

    def value_set(self) -> tuple[str, ...]:
        """``( ... )``, read as Kubernetes reads it: an empty item is the empty value (``(a,)``, ``(,a)``,
        ``()``), and a comma that follows two commas must be followed by a value or a comma (``(a,,)`` is
        refused, ``(a,,,)`` is not), as its parser's pairing of commas has it."""
        opening = self.take()
        if opening.kind != "(":
            raise self.fail(opening, "'('")
        first = self.peek()
        if first.kind == ")":
            self.take()
            return ("",)
        if first.kind not in ("id", ","):
            raise self.fail(first, "a value, ',' or ')'")
        values: list[str] = []
        while True:
            token = self.take()
            if token.kind == "id":
                values.append(token.text)
                following = self.peek()
                if following.kind == ")":
                    break
                if following.kind != ",":
                    raise self.fail(following, "',' or ')'")
            elif token.kind == ",":
                if not values:
                    values.append("")
                following = self.peek()
                if following.kind == ")":
                    values.append("")
                    break
                if following.kind == ",":
                    self.take()
                    values.append("")
            else:
                raise self.fail(token, "',' or a value")
        self.take()  # the ')' seen above
        return tuple(dict.fromkeys(values))


def parse(text: str) -> LabelSelector:
    """The selector ``text`` means; raises :class:`SelectorError` where Kubernetes would refuse it.

    The empty (or blank) text is the selector that matches everything, as in Kubernetes.
    """
    if len(text) > MAX_SELECTOR_CHARS:
        raise SelectorError(
            f"a selector is at most {MAX_SELECTOR_CHARS} characters, this one has {len(text)}"
        )
    for i, ch in enumerate(text):
        if ch not in _WHITESPACE and (ord(ch) < 32 or ord(ch) == 127):
            raise SelectorError(f"at character {i + 1}: control character {ch!r}")
    return _Parser(_tokens(text)).selector()
