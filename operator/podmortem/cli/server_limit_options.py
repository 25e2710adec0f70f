"""The flags and ``PODMORTEM_*`` variables that set one HTTP server's deadlines and connection caps.

Every server of podmortem bounds its clients (:class:`podmortem.connection_limits.ServerLimits`);
the defaults suit most clusters, but a cluster behind a slow proxy needs longer header deadlines,
and one whose users sit behind a single NAT address a higher per-peer cap. The Helm chart's
``serverLimits`` values reach the processes through these variables, five per server, named by
one prefix (``--http-...`` / ``PODMORTEM_HTTP_...`` for the log API, ``--webhook-...``,
``--probe-...``), so each command declares its servers in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from podmortem.cli import options as o
from podmortem.connection_limits import ServerLimits

#: Longest deadline a flag accepts, seconds: a day (a longer one is no deadline at all).
MAX_TIMEOUT_S = 86_400.0
#: Most connections a cap accepts: beyond this the open-files limit, not the cap, decides.
MAX_CONNECTIONS = 1_000_000


@dataclass(frozen=True)
class ServerLimitOptions:
    """The five options of one server, and how they make its :class:`ServerLimits`."""

    header_timeout: o.Option[float]
    body_timeout: o.Option[float]
    idle_timeout: o.Option[float]
    max_connections: o.Option[int]
    max_connections_per_peer: o.Option[int]

    @property
    def all(self) -> tuple[o.Option[Any], ...]:
        return (self.header_timeout, self.body_timeout, self.idle_timeout, self.max_connections,
                self.max_connections_per_peer)

    def read(self, values: o.Values) -> ServerLimits:
        """The limits set on the command line or in the environment, each unset one its default.

        Raises :class:`~podmortem.cli.options.SettingError` naming the flags and variables, for a
        value out of range or a per-peer cap above the total.
        """
        total, per_peer = values.value(self.max_connections), values.value(self.max_connections_per_peer)
        if per_peer > total:
            raise values.conflict(f"the per-peer cap ({per_peer}) must not exceed the total ({total})",
                                  self.max_connections_per_peer, self.max_connections)
        return ServerLimits(
            header_timeout_s=values.value(self.header_timeout),
            body_timeout_s=values.value(self.body_timeout),
            idle_timeout_s=values.value(self.idle_timeout),
            max_connections=total,
            max_connections_per_peer=per_peer,
        )


def server_limit_options(flag: str, env: str, server: str, defaults: ServerLimits) -> ServerLimitOptions:
    """Options ``--{flag}-header-timeout`` ... read from ``PODMORTEM_{env}_HEADER_TIMEOUT_SECONDS`` ...

    ``server`` names the server in ``--help`` ("the log API"); ``defaults`` are its limits when
    nothing is set, shown in ``--help`` as they are.
    """
    seconds = o.seconds(above=0, high=MAX_TIMEOUT_S)
    count = o.whole("a whole number of connections", low=1, high=MAX_CONNECTIONS)

    def g(number: float) -> str:
        return f"{number:g}"

    return ServerLimitOptions(
        header_timeout=o.Option(
            (f"--{flag}-header-timeout",), f"PODMORTEM_{env}_HEADER_TIMEOUT_SECONDS", seconds,
            g(defaults.header_timeout_s),
            f"seconds {server} gives a client for a request's line and headers, and for a TLS handshake "
            "(a slower client is cut); above 0, at most 86400", "SECONDS",
        ),
        body_timeout=o.Option(
            (f"--{flag}-body-timeout",), f"PODMORTEM_{env}_BODY_TIMEOUT_SECONDS", seconds,
            g(defaults.body_timeout_s),
            f"seconds {server} gives a request's body after its headers; above 0, at most 86400", "SECONDS",
        ),
        idle_timeout=o.Option(
            (f"--{flag}-idle-timeout",), f"PODMORTEM_{env}_IDLE_TIMEOUT_SECONDS", seconds,
            g(defaults.idle_timeout_s),
            f"seconds {server} keeps a kept-alive connection that sends nothing; above 0, at most 86400",
            "SECONDS",
        ),
        max_connections=o.Option(
            (f"--{flag}-max-connections",), f"PODMORTEM_{env}_MAX_CONNECTIONS", count,
            str(defaults.max_connections),
            f"connections {server} holds at once, all clients together (more get 503 and are closed)", "N",
        ),
        max_connections_per_peer=o.Option(
            (f"--{flag}-max-connections-per-peer",), f"PODMORTEM_{env}_MAX_CONNECTIONS_PER_PEER", count,
            str(defaults.max_connections_per_peer),
            f"connections {server} holds at once from one client address; at most the total", "N",
        ),
    )

