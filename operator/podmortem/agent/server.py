"""The agent's HTTP face: evidence for the operator, health for the kubelet, metrics for Prometheus.

``GET /v1/pods/{uid}/evidence`` is for the operator only: it needs
``Authorization: Bearer <token>``, where the token is a file mounted from a
Secret and re-read when it changes (a rotated Secret needs no restart). The
comparison is constant-time. A configured token file that is missing or empty
refuses every request (fail closed: evidence names other tenants' processes);
only when no token file is configured at all is the endpoint open, as the
chart's contract says, and /healthz reports ``auth: off``.
``/healthz`` and ``/metrics`` carry nothing sensitive and need no token. A header that is no
well-formed bearer token (``podmortem.bearer``, non-ASCII bytes included) is a 401, and both ports
have the deadlines and connection caps of ``podmortem.serving_limits``.
"""

from __future__ import annotations

import hmac
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from podmortem import bearer, serving_limits
from podmortem.agent.node import NodeAgent
from podmortem.serving_limits import ServerLimits


class TokenFile:
    """A bearer token kept in a file, re-read when the file's mtime or size changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._token: bytes | None = None
        self.error: str | None = None

    def current(self) -> bytes | None:
        try:
            st = self.path.stat()
        except OSError as exc:
            self._stamp, self._token = None, None
            self.error = f"token file {self.path}: {exc.strerror or exc}"
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                token = self.path.read_bytes().strip()
            except OSError as exc:
                self.error = f"token file {self.path}: {exc.strerror or exc}"
                return None
            self._stamp = stamp
            self._token = token or None
            self.error = None if token else f"token file {self.path} is empty"
        return self._token

    def accepts(self, header: str | None) -> bool:
        expected = self.current()
        if expected is None:
            return False
        try:
            presented = bearer.token(header)  # ASCII only: it encodes, whatever bytes were sent
        except bearer.NotBearer:
            return False
        return hmac.compare_digest(presented.encode("ascii"), expected)


AGENT_KEY = web.AppKey("agent", NodeAgent)
TOKEN_KEY: web.AppKey[TokenFile | None] = web.AppKey("token")


def _json(data: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        text=json.dumps(data), status=status, content_type="application/json", headers=headers
    )


async def evidence(request: web.Request) -> web.Response:
    tokens = request.app[TOKEN_KEY]
    if tokens is not None:
        if tokens.current() is None:
            return _json({"error": "the agent's token file is unusable", "detail": tokens.error}, status=503)
        if not tokens.accepts(request.headers.get("Authorization")):
            return _json(
                {"error": "missing or wrong bearer token"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="podmortem-agent"'},
            )
    since_text = request.query.get("since")
    since: datetime | None = None
    if since_text:
        try:
            since = datetime.fromisoformat(since_text)
        except ValueError:
            return _json({"error": f"since={since_text!r} is not an ISO 8601 time"}, status=400)
        if since.tzinfo is None:
            return _json({"error": f"since={since_text!r} needs a timezone (e.g. Z or +00:00)"}, status=400)
    agent = request.app[AGENT_KEY]
    uid = request.match_info["uid"]
    found = agent.evidence(uid, since=since)
    if found is None:
        return _json(
            {"error": f"pod {uid} is not watched on node {agent.settings.node_name or '?'}"}, status=404
        )
    return web.Response(text=found.model_dump_json(by_alias=True), content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    """200 while the agent can sample; the details say what is degraded (e.g. /dev/kmsg unreadable)."""
    agent = request.app[AGENT_KEY]
    tokens = request.app[TOKEN_KEY]
    details = agent.health()
    if tokens is None:
        details["auth"] = {"mode": "off", "error": None}
    else:
        usable = tokens.current() is not None
        details["auth"] = {"mode": "bearer", "error": None if usable else tokens.error}
    return _json(details, status=200 if details["ok"] else 503)


async def readyz(request: web.Request) -> web.Response:
    """200 only while the agent works: it can sample and it has listed this node's pods."""
    ok, why = request.app[AGENT_KEY].ready()
    return web.Response(status=200 if ok else 503, text=("ready" if ok else f"not ready: {why}") + "\n")


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[AGENT_KEY].metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def make_app(
    agent: NodeAgent, *, token_path: Path | None, limits: ServerLimits | None = None
) -> web.Application:
    """Evidence, /healthz and (also) /metrics."""
    app = web.Application()
    serving_limits.install(app, limits or ServerLimits(), name="agent")
    app[AGENT_KEY] = agent
    app[TOKEN_KEY] = TokenFile(token_path) if token_path is not None else None
    app.router.add_get("/v1/pods/{uid}/evidence", evidence)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


def make_metrics_app(agent: NodeAgent, *, limits: ServerLimits | None = None) -> web.Application:
    """/metrics alone, for the separate metrics port."""
    app = web.Application()
    serving_limits.install(app, limits or ServerLimits(), name="agent metrics")
    app[AGENT_KEY] = agent
    app.router.add_get("/metrics", metrics)
    return app
