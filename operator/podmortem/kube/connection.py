"""Is the API server reachable with our credentials, and may we read what we watch? For login and /readyz.

A process that cannot log in must say so, and must not claim to be ready: the
operator's kopf watches, its report writes and the agent's pod listing all
need the API. :class:`Connection` logs in (verifying the credentials with a
request, not just reading them), keeps re-checking while the process runs, and
holds the one-line reason why it is not usable, which ``/readyz`` answers with.

Checks:

- authentication: ``GET /api`` must answer 200 (401 means a wrong or expired
  token, a client certificate the server does not accept, or none at all);
- authorization: each watched resource must be listable (``?limit=1``), so a
  ClusterRole that misses a resource shows up as "forbidden: ..." instead of a
  watch that quietly gets nothing. A kind the cluster does not have (404: its
  CRD is not installed, say Kubeflow's) is not a problem: there is nothing to watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from podmortem.background import Background
from podmortem.kube import clients
from podmortem.kube.config import ClusterAccess, KubeconfigError
from podmortem.kube.read_at_most import read_at_most

if TYPE_CHECKING:
    import aiohttp

    from podmortem.kube.session import ApiSession

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listable:
    """A resource that must be listable: ``path`` is its list URL (namespaced or cluster-wide)."""

    what: str
    path: str


def list_path(group: str, version: str, plural: str, namespace: str | None = None) -> str:
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    return f"{base}/{plural}"


#: Seconds between checks while all is well.
CHECK_INTERVAL_S = 15.0
#: Seconds before the first retry after a failed check; it doubles up to :data:`BACKOFF_MAX_S`.
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 30.0
#: Seconds for one check request.
CHECK_TIMEOUT_S = 10.0


class Connection:
    """Login and the standing health of the link to the API server."""

    def __init__(self, access: ClusterAccess, *, listables: Sequence[Listable] = (),
                 component: str = "podmortem") -> None:
        self.access = access
        self.listables = tuple(listables)
        self.component = component
        #: Why the API is not usable now; None when the last check passed.
        self.problem: str | None = "not logged in yet"
        #: Whether the last check got past authentication (the credentials work).
        self.authenticated = False
        self.checked_at: float | None = None
        self._last_logged: str | None = self.problem
        #: A plugin's last credentials and when (monotonic) they were made: checks every 15 s reuse them
        #: for :data:`clients.PLUGIN_CREDENTIALS_S`, as kubectl reuses an exec plugin's token.
        self._plugin_access: tuple[ClusterAccess, float] | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def describe(self) -> str:
        return "connected to the API server" if self.problem is None else self.problem

    async def credentials(self, *, fresh: bool = False) -> ClusterAccess:
        """Current credentials: the token file re-read; a plugin run again when its last credentials
        are older than :data:`clients.PLUGIN_CREDENTIALS_S`, were refused, or ``fresh`` is asked."""
        if not self.access.plugin:
            self.access.headers(reread=True)
            return self.access
        now = time.monotonic()
        cached = self._plugin_access
        if fresh or cached is None or now - cached[1] >= clients.PLUGIN_CREDENTIALS_S:
            self._plugin_access = cached = (await clients.resolve_plugin(self.access), now)
        return cached[0]

    async def check(self) -> str | None:
        """One round of checks with fresh credentials; updates :attr:`problem` and logs changes."""
        # Imported here: the session takes its credentials from a Connection.
        from podmortem.kube.session import ApiSession

        try:
            access = await self.credentials()  # the token file read again, a plugin run when due
            async with ApiSession(self) as api:
                problem = await self._check(api, access)
        except KubeconfigError as exc:
            self.authenticated = False
            problem = str(exc)
        except Exception as exc:  # a broken plugin or a TLS error while building the context
            self.authenticated = False
            problem = clients.describe_connection_error(exc, self.access)
        self._set(problem)
        return problem

    async def _check(self, api: ApiSession, access: ClusterAccess) -> str | None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=CHECK_TIMEOUT_S)
        try:
            status, message = await _get(api, "/api", timeout)
            if status in (401, 403):
                self.authenticated = False
                return (f"the API server refused our credentials from {access.source} "
                        f"({status}: {message}): wrong or expired token, or an unknown client certificate")
            if status != 200:
                self.authenticated = False
                return f"the API server at {access.server} answered {status} to GET /api: {message}"
            self.authenticated = True
            forbidden = []
            for item in self.listables:
                status, message = await _get(api, item.path, timeout, query={"limit": "1"})
                if status == 403:
                    forbidden.append(item.what)
                elif status == 404:
                    continue  # a kind whose CRD is not installed (no Kubeflow here): nothing to watch yet
                elif status != 200:
                    return f"cannot list {item.what}: {status}: {message}"
            if forbidden:
                return (f"forbidden: this service account may not list {', '.join(forbidden)} "
                        "(403); the chart's ClusterRole grants it: check the RBAC objects")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self.authenticated = False
            return clients.describe_connection_error(exc, access)
        return None

    def _set(self, problem: str | None) -> None:
        self.checked_at = time.monotonic()
        if not self.authenticated:
            self._plugin_access = None  # refused or unreachable: run the plugin again next time
        self.problem = problem
        if problem != self._last_logged:
            if problem is None:
                logger.info("%s: connected to the API server at %s (%s)",
                            self.component, self.access.server, self.access.source)
            else:
                logger.error("%s: API server not usable: %s", self.component, problem)
            self._last_logged = problem

    async def run(self) -> None:
        """Check forever: every ``interval_s`` while fine, with backoff while not."""
        delay = BACKOFF_MIN_S
        while True:
            problem = await self.check()
            if problem is None:
                delay = BACKOFF_MIN_S
                await asyncio.sleep(CHECK_INTERVAL_S)
            else:
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)

    @contextlib.asynccontextmanager
    async def checking(self) -> AsyncIterator[None]:
        """`run` for as long as the block runs: stopped with it, and its end logged as it happens.

        ``ok`` and ``describe`` answer from the last check: a checker that failed or returned
        unseen would have /readyz repeat that answer for ever.
        """
        tasks = Background("api-connection")
        tasks.start(self.run(), name="check", eternal=True)
        try:
            yield
        finally:
            await tasks.close()

    async def login(self) -> ClusterAccess:
        """Credentials that the API server has just accepted; waits (checking with backoff) until then."""
        delay = BACKOFF_MIN_S
        while True:
            await self.check()
            if self.authenticated:
                return await self.credentials()  # what the check just verified
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)


async def _get(api: ApiSession, path: str, client_timeout: aiohttp.ClientTimeout, *,
               query: dict[str, str] | None = None) -> tuple[int, str]:
    async with api.response("GET", path, query=query, headers={"Accept": "application/json"},
                            client_timeout=client_timeout) as response:
        if response.status == 200:
            return 200, ""  # only a refusal's body is read (a list's can be large where limit is ignored)
        body = await read_at_most(response.content, 64 * 1024)
        message = body[:300].decode("utf-8", "replace").strip()
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            message = str(json.loads(body).get("message") or message)
        return response.status, message.splitlines()[0] if message else response.reason or ""
