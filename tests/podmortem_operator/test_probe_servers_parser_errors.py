"""The operator's probe, metrics and log ports answer what aiohttp cannot parse with the safe headers.

Served with ``probe_servers``, as the operator serves them.
"""

from __future__ import annotations

from aiohttp import web
from tests.malformed_requests import assert_parser_errors_say_no_store_and_nosniff

from podmortem import serving_limits
from podmortem.operator.settings import OperatorSettings
from podmortem.operator.watching.run import probe_servers
from podmortem.serving_limits import ServerLimits


async def test_what_aiohttp_cannot_parse_is_400_with_safe_headers_on_every_operator_port() -> None:
    settings = OperatorSettings(listen_host="127.0.0.1", metrics_port=0, health_port=0, log_http_port=0)
    log_app = web.Application()
    serving_limits.install(log_app, ServerLimits(), name="log server")
    async with probe_servers(settings, is_ready=lambda: (True, "ready"), is_alive=lambda: (True, "alive"),
                             log_app=log_app) as servers:
        urls = (servers.metrics_url, servers.health_url, servers.log_url)
        assert all(url.startswith("http://127.0.0.1:") for url in urls), urls
        for url in urls:
            await assert_parser_errors_say_no_store_and_nosniff(int(url.rsplit(":", 1)[1]))
