"""Options a flag or a ``PODMORTEM_*`` environment variable sets, all checked before anything runs.

An :class:`Option` is a flag, the variable the Helm chart sets for it, a parser
(text in, value out, ``ValueError`` with a short reason when the text cannot be
used), its default as text and its help. Options go to argparse as plain text
with no default, so building the parser reads no variable and ``--help`` always
works; ``--help`` shows each option's default and ``[env VARIABLE]``.

A command's ``run`` reads its options through :class:`Values` first thing: the
command line, else the variable (empty counts as unset: the chart renders unset
values as ``""``), else the default. A value that cannot be used raises
:class:`SettingError`, one line naming the flag and the variable, with the value
written where it came from::

    --agent-record-wait / PODMORTEM_AGENT_RECORD_WAIT_SECONDS='abc': expected a number of seconds (...)
    --memory-warning-ratio='7' / PODMORTEM_MEMORY_WARNING_RATIO: expected a ratio (...)

The command prints it after its own name and exits 2, before it loads a
kubeconfig or binds a port. :func:`check_directory` and :func:`check_listen`
do the checks that need the file system or the network, likewise up front.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar
from urllib.parse import urlsplit

from podmortem.errors import PodmortemError

if TYPE_CHECKING:
    from podmortem.kube.label_selector import LabelSelector

T = TypeVar("T")
Source = Literal["flag", "env", "default"]


class SettingError(PodmortemError, ValueError):
    """A value that cannot be used; ``str()`` is one line naming its flag and variable."""


@dataclass(frozen=True, eq=False)
class Option(Generic[T]):
    """One setting: its flags, its environment variable, how its text is read, its default and help."""

    #: ``("-n", "--namespace")``; empty for a variable with no flag.
    flags: tuple[str, ...]
    #: The environment variable; None for a flag with no variable.
    env: str | None
    #: Text to value; raises ValueError with the reason (``expected ...``) when the text is unusable.
    parse: Callable[[str], T]
    #: The default as text, read by ``parse`` like a given value; None: unset.
    default: str | None = None
    help: str = ""
    metavar: str | None = None
    #: What ``--help`` calls the default when it is not just ``default`` ("" says nothing).
    shown_default: str | None = None
    #: argparse's action when the flag takes no value or repeats ("append", "store_const", ...).
    action: str | type[argparse.Action] | None = None
    #: The text a ``store_const`` flag stands for (``--no-agent`` is ``PODMORTEM_AGENT_ENABLED=false``).
    const: str | None = None
    #: The argparse destination, when not derived from the long flag.
    dest_name: str | None = None

    @property
    def name(self) -> str:
        """The long flag, or the variable of a variable-only option."""
        return self.flags[-1] if self.flags else str(self.env)

    @property
    def dest(self) -> str:
        return self.dest_name or self.name.lstrip("-").replace("-", "_").lower()

    def help_text(self) -> str:
        default = self.default if self.shown_default is None else self.shown_default
        parts = [self.help]
        if default:
            parts.append(f"(default: {default})")
        if self.env:
            parts.append(f"[env {self.env}]")
        return " ".join(p for p in parts if p).replace("%", "%%")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Add the flag: plain text, no default (the environment is read later, by :class:`Values`)."""
        if not self.flags:
            return
        kwargs: dict[str, object] = {"dest": self.dest, "default": None, "help": self.help_text()}
        if self.action is not None:
            kwargs["action"] = self.action
        if self.action == "store_const":
            kwargs["const"] = self.const
        elif self.metavar is not None:
            kwargs["metavar"] = self.metavar
        parser.add_argument(*self.flags, **kwargs)  # type: ignore[arg-type]


def add_all(parser: argparse.ArgumentParser, options: Sequence[Option[Any]]) -> None:
    for option in options:
        option.add_to(parser)


class Values:
    """The options of one command line and environment: each value, and where it came from."""

    def __init__(self, args: argparse.Namespace | None, environ: Mapping[str, str] | None = None) -> None:
        self._args = args
        self._environ = os.environ if environ is None else environ

    def raw(self, option: Option[T]) -> tuple[str | None, Source]:
        """The text (command line, else the variable unless empty, else the default) and its source."""
        given = getattr(self._args, option.dest, None) if option.flags else None
        if isinstance(given, bool):  # --flag/--no-flag
            given = "true" if given else "false"
        elif isinstance(given, list):  # a repeated flag: the variable's form, comma-separated
            given = ",".join(given)
        if given is not None:
            return str(given), "flag"
        if option.env is not None:
            value = self._environ.get(option.env)
            if value is not None and value.strip():
                return value, "env"
        return option.default, "default"

    def optional(self, option: Option[T]) -> T | None:
        """The value, or None when the option is unset and has no default."""
        text, _ = self.raw(option)
        return None if text is None else self._parse(option, text)

    def value(self, option: Option[T]) -> T:
        """The value of an option that has a default."""
        text, _ = self.raw(option)
        if text is None:
            raise TypeError(f"{option.name} has no default; use Values.optional")
        return self._parse(option, text)

    def _parse(self, option: Option[T], text: str) -> T:
        try:
            return option.parse(text)
        except ValueError as exc:
            raise self.error(option, str(exc)) from None

    def env(self, option: Option[T]) -> T | None:
        """The variable's value alone (the command line and the default left out), or None if unset."""
        return Values(None, self._environ).optional(_without_default(option))

    def where(self, option: Option[T]) -> str:
        """``--flag / VARIABLE``, the value written after the one it came from."""
        text, source = self.raw(option)
        names = []
        if option.flags:
            names.append(f"{option.name}={text!r}" if source == "flag" else option.name)
        if option.env:
            names.append(f"{option.env}={text!r}" if source == "env" else option.env)
        label = " / ".join(names)
        return f"{label} (default {text})" if source == "default" and text is not None else label

    def error(self, option: Option[T], problem: str) -> SettingError:
        """The one-line error for ``option``."""
        return SettingError(f"{self.where(option)}: {_one_line(problem)}")

    def conflict(self, problem: str, *options: Option[Any]) -> SettingError:
        """The one-line error for values that are each fine but do not go together."""
        return SettingError(f"{' and '.join(self.where(o) for o in options)}: {_one_line(problem)}")


def _without_default(option: Option[T]) -> Option[T]:
    return Option(flags=(), env=option.env, parse=option.parse)


def _one_line(text: str) -> str:
    return " ".join(text.split())


# -- parsers: text to value, ValueError("expected ...") when the text cannot be used ----------------


def _fmt(number: float) -> str:
    return f"{number:g}"


def _bounds(above: float | None, low: float | None, high: float | None) -> str:
    if above is not None:
        lower = "positive" if above == 0 else f"above {_fmt(above)}"
        return f"{lower} and at most {_fmt(high)}" if high is not None else lower
    if low is not None and high is not None:
        return f"{_fmt(low)}..{_fmt(high)}"
    if low is not None:
        return f"{_fmt(low)} or more"
    return f"at most {_fmt(high)}" if high is not None else ""


def _ranged(
    read: Callable[[str], float],
    noun: str,
    above: float | None,
    low: float | None,
    high: float | None,
) -> Callable[[str], float]:
    bounds = _bounds(above, low, high)
    expected = f"expected {noun}" + (f" (must be {bounds})" if bounds else "")

    def parse(text: str) -> float:
        try:
            number = read(text.strip())
        except (ValueError, OverflowError):
            raise ValueError(expected) from None
        if (
            (above is not None and not number > above)
            or (low is not None and number < low)
            or (high is not None and number > high)
        ):
            raise ValueError(expected)
        return number

    return parse


def _float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(text)
    return number


def _int(text: str) -> int:
    """A whole number; ``16384.0`` and ``1e+06`` (how Helm may render a number) count as whole."""
    try:
        return int(text, 10)
    except ValueError:
        number = float(text)
        if not number.is_integer():
            raise
        return int(number)


def number(
    noun: str = "a number",
    *,
    above: float | None = None,
    low: float | None = None,
    high: float | None = None,
) -> Callable[[str], float]:
    """A finite number; ``above`` is an exclusive lower bound, ``low`` and ``high`` inclusive ones."""
    return _ranged(_float, noun, above, low, high)


def seconds(
    *, above: float | None = None, low: float | None = None, high: float | None = None
) -> Callable[[str], float]:
    """A duration in seconds: ``above=0`` for a positive one, ``low=0`` where 0 turns something off."""
    noun = "a positive number of seconds" if above == 0 else "a number of seconds"
    return number(noun, above=above, low=low, high=high)


def whole(
    noun: str = "a whole number", *, low: int | None = None, high: int | None = None
) -> Callable[[str], int]:
    """A whole number between ``low`` and ``high``, both included."""
    read = _ranged(_int, noun, None, low, high)

    def parse(text: str) -> int:
        return int(read(text))

    return parse


def regex(text: str) -> re.Pattern[str] | None:
    """A regular expression, compiled; None when empty."""
    if not text.strip():
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(f"expected a regular expression ({exc})") from None


def port(*, low: int = 0) -> Callable[[str], int]:
    """A TCP port, ``low``..65535 (0 where it means "pick a free one" or "none")."""
    return whole("a port number", low=low, high=65535)


TRUE = ("true", "1", "yes")
FALSE = ("false", "0", "no")


def boolean(text: str) -> bool:
    """true/false, 1/0, yes/no, in any case."""
    word = text.strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise ValueError("expected true or false (or 1/0, yes/no)")


def choice(*choices: str) -> Callable[[str], str]:
    """One of ``choices``, in any case; the value is the choice as written here."""
    by_word = {c.lower(): c for c in choices}

    def parse(text: str) -> str:
        found = by_word.get(text.strip().lower())
        if found is None:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return found

    return parse


def text(noun: str = "a value") -> Callable[[str], str]:
    """Any text that is not blank, stripped."""

    def parse(value: str) -> str:
        if not value.strip():
            raise ValueError(f"expected {noun}, not an empty string")
        return value.strip()

    return parse


def any_text(value: str) -> str:
    """Any text, empty included."""
    return value


def path(value: str) -> Path:
    """A path; empty is refused (``Path("")`` would quietly be the current directory)."""
    if not value.strip():
        raise ValueError("expected a path, not an empty string")
    return Path(value)


def optional_path(value: str) -> Path | None:
    """A path, or None for an empty string."""
    return Path(value) if value.strip() else None


_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_RULE = "lower-case letters, digits and '-', starting and ending with a letter or digit"


def _check_label(value: str, noun: str) -> str:
    if len(value) > 63 or not _LABEL.fullmatch(value):
        raise ValueError(f"{value!r} is not a {noun} ({LABEL_RULE}, at most 63 characters)")
    return value


def dns_label(noun: str = "Kubernetes name") -> Callable[[str], str]:
    """An RFC 1123 label, as namespaces and Service names are."""

    def parse(value: str) -> str:
        return _check_label(value.strip(), noun)

    return parse


def dns_labels(noun: str = "namespace name") -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list of RFC 1123 labels; empty items are skipped, an empty list is ()."""

    def parse(value: str) -> tuple[str, ...]:
        return tuple(_check_label(item.strip(), noun) for item in value.split(",") if item.strip())

    return parse


def dns_subdomain(noun: str = "Kubernetes name") -> Callable[[str], str]:
    """An RFC 1123 subdomain (dot-separated labels, at most 253 characters), as most object names are."""

    def parse(value: str) -> str:
        name = value.strip()
        if len(name) > 253 or not all(_LABEL.fullmatch(part) for part in name.split(".")):
            raise ValueError(
                f"{name!r} is not a {noun} ({LABEL_RULE}, dot-separated, at most 253 characters)"
            )
        return name

    return parse


def http_url(*, paths: bool = False) -> Callable[[str], str | None]:
    """An http:// or https:// URL (or, with ``paths``, an absolute path like /podmortem); empty: None."""
    expected = "expected an http:// or https:// URL" + (" or a path starting with /" if paths else "")

    def parse(value: str) -> str | None:
        url = value.strip()
        if not url:
            return None
        if paths and url.startswith("/") and not url.startswith("//"):
            return url
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 (raises on a bad port)
        except ValueError:
            raise ValueError(expected) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{expected}, e.g. http://prometheus.monitoring:9090")
        return url

    return parse


FOREIGN_KINDS_FORMS = (
    'a JSON list like [{"group":"batch","version":"v1","resource":"jobs"}] ("version": "" = the '
    "preferred one; [] = none) or a comma-separated list like jobs.batch,kubeflow.org/v1/pytorchjobs"
)


def label_selector(value: str) -> LabelSelector:
    """A Kubernetes label selector (`podmortem.kube.label_selector`), imported when one is given:
    the agent keeps its start-up lean."""
    from podmortem.kube.label_selector import parse

    return parse(value)


def foreign_kinds(parse: Callable[[str], T]) -> Callable[[str], T]:
    """Wraps a foreign-kinds reader so that its error names the forms accepted, then what was wrong."""

    def read(value: str) -> T:
        try:
            return parse(value)
        except (ValueError, TypeError, AttributeError) as exc:
            detail = _one_line(str(exc))
            raise ValueError(f"expected {FOREIGN_KINDS_FORMS}" + (f" ({detail})" if detail else "")) from None

    return read


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


# -- checks that need the file system or the network, done at start before any real work ------------


def check_directory(values: Values, option: Option[Path], directory: Path) -> None:
    """``directory`` exists (it is created if need be) and this process may write in it."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise values.error(option, f"{directory} exists and is not a directory") from None
    except OSError as exc:
        raise values.error(option, f"cannot create {directory}: {exc.strerror or exc}") from None
    if not directory.is_dir():
        raise values.error(option, f"{directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise values.error(option, f"cannot write in {directory}: permission denied")


def check_listen(
    values: Values,
    host: str,
    ports: Sequence[tuple[Option[int], int]],
    *,
    host_option: Option[str] | None = None,
) -> None:
    """Each non-zero port can be listened on at ``host`` now, and no two are the same.

    Binds and closes a socket per address, as the server will (SO_REUSEADDR, IPv6 only on
    IPv6 sockets), so a port in use fails here, in one line, before any real work.
    """
    seen: dict[int, Option[int]] = {}
    for option, number in ports:
        if number in seen:
            raise values.conflict(f"both are port {number}; each needs its own", seen[number], option)
        if number != 0:
            seen[number] = option
    # With every port 0 (free ones picked later), still check that the host can be listened on.
    targets: list[tuple[int, Option[Any] | None]] = [*seen.items()] or [(0, host_option)]
    for number, named in targets:
        try:
            infos = socket.getaddrinfo(
                host or None, number, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        except (socket.gaierror, UnicodeError) as exc:
            problem = f"cannot listen on {host!r}: {getattr(exc, 'strerror', None) or exc}"
            raise (values.error(host_option, problem) if host_option else SettingError(problem)) from None
        for family, kind, proto, _, address in infos:
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:
                continue  # an address family this host lacks: the server skips it too
            with sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind(address)
                except OSError as exc:
                    problem = f"cannot listen on {host or '*'}:{number}: {exc.strerror or exc}"
                    culprit = host_option if exc.errno == errno.EADDRNOTAVAIL and host_option else named
                    raise (values.error(culprit, problem) if culprit else SettingError(problem)) from None
