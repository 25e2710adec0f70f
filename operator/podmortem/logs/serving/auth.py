"""Who may read stored pod logs over HTTP: the cluster's own TokenReview and SubjectAccessReview.

The log server holds every followed pod's log, of every namespace, so it must
answer exactly as the apiserver would for ``kubectl logs``: a bearer token is
authenticated with a TokenReview, and the user it names must be allowed ``get``
on ``pods/log`` in the pod's namespace (a SubjectAccessReview). Nothing is
decided locally. Positive answers are cached for ``cache_ttl_s``; a token the
TokenReview rejected is remembered for ``rejected_ttl_s`` (a client retrying a bad
token costs one review, not one per request); a SubjectAccessReview's "no" is never
cached, so a fixed RoleBinding works at once. At most ``max_concurrent_reviews``
reviews are in flight. If the Kubernetes API cannot answer, the request fails with
503, never with access.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from podmortem import bearer
from podmortem.errors import PodmortemError
from podmortem.kube.api import KubeError
from podmortem.kube.session import ApiSession

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuthSettings:
    """Access checks of the log server. Both are on by default (and in the Helm chart)."""

    #: Check the bearer token with a TokenReview. Off: anyone who reaches the port reads
    #: every stored log; only for local use (``podmortem`` on a laptop, port-forwards).
    authenticate: bool = True
    #: Check ``get pods/log`` in the namespace with a SubjectAccessReview. Needs ``authenticate``.
    authorize: bool = True
    #: Seconds a positive answer for a (token, namespace) is reused. Default 30 s: a burst
    #: of requests (a UI polling, ``follow`` reconnects) costs two API calls, not hundreds,
    #: and a revoked RoleBinding or token stops working within half a minute.
    cache_ttl_s: float = 30.0
    #: Most cached answers kept (each ~200 bytes); the oldest go first.
    cache_max_entries: int = 10_000
    #: Audiences the token must be valid for (TokenReview ``spec.audiences``); empty: the
    #: apiserver's own, as ``kubectl`` tokens have.
    audiences: tuple[str, ...] = field(default_factory=tuple)
    #: Seconds to wait for each review call. Default 10 s: reviews are fast when the API is up.
    request_timeout_s: float = 10.0
    #: Seconds a token the apiserver rejected is rejected again without asking. Default 10 s:
    #: a client hammering with a bad token costs 6 reviews a minute; a token that was not
    #: valid yet (just created) works 10 s later.
    rejected_ttl_s: float = 10.0
    #: Reviews in flight at once; more wait. Default 16: a burst of readers cannot flood the API.
    max_concurrent_reviews: int = 16

    def __post_init__(self) -> None:
        if self.authorize and not self.authenticate:
            raise ValueError("authorize needs authenticate: there is no user to authorize without a token")
        if self.cache_ttl_s < 0 or self.rejected_ttl_s < 0:
            raise ValueError("cache_ttl_s and rejected_ttl_s must be >= 0")
        if self.max_concurrent_reviews < 1:
            raise ValueError("max_concurrent_reviews must be at least 1")


class AccessError(PodmortemError):
    """A request is not let through; ``status`` is the HTTP status to answer with."""

    status = 500


class Unauthenticated(AccessError):
    """No bearer token, or the apiserver does not accept it."""

    status = 401


class Forbidden(AccessError):
    """The token's user may not ``get pods/log`` in this namespace."""

    status = 403


class ReviewUnavailable(AccessError):
    """The Kubernetes API could not answer a review: access is neither granted nor denied."""

    status = 503


@dataclass(frozen=True, slots=True)
class User:
    name: str
    uid: str | None = None
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


#: The user of requests when authentication is off.
ANONYMOUS = User("system:anonymous", groups=("system:unauthenticated",))


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header (`podmortem.bearer`): anything else,
    a token of non-ASCII bytes included, is ``Unauthenticated`` (401), never an error of the server."""
    try:
        return bearer.token(authorization)
    except bearer.NotBearer as exc:
        raise Unauthenticated(str(exc)) from None


class Reviewer:
    """Asks the apiserver whether a bearer token may read pod logs in a namespace."""

    def __init__(self, *, api: ApiSession | None, settings: AuthSettings | None = None) -> None:
        self.settings = settings or AuthSettings()
        if self.settings.authenticate and api is None:
            raise ValueError("an ApiSession is needed when authentication is on")
        self._api = api
        self._cache: dict[tuple[str, str], tuple[float, User]] = {}
        #: Token hash -> (expiry, why) of tokens the TokenReview rejected.
        self._rejected: dict[str, tuple[float, str]] = {}
        #: Token hash -> expiry of tokens the TokenReview accepted, in any namespace: the login
        #: limits serve these even from an address whose failure budget a sprayer spent.
        self._good: dict[str, float] = {}
        self._in_flight = asyncio.Semaphore(self.settings.max_concurrent_reviews)
        #: Reviews actually sent to the API (for tests and metrics).
        self.reviews_sent = 0

    async def check(self, *, authorization: str | None, namespace: str) -> User:
        """The user behind the request, if allowed; raises an ``AccessError`` otherwise."""
        if not self.settings.authenticate:
            return ANONYMOUS
        token = bearer_token(authorization)
        digest = hashlib.sha256(token.encode()).hexdigest()
        key = (digest, namespace)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        rejected = self._rejected.get(digest)
        if rejected is not None and rejected[0] > now:
            raise Unauthenticated(rejected[1])
        async with self._in_flight:
            try:
                user = await self._authenticate(token)
            except Unauthenticated as exc:
                self._remember_rejected(digest, str(exc), now)
                raise
            self._remember_good(digest, now)
            if self.settings.authorize:
                await self._authorize(user, namespace)
        if self.settings.cache_ttl_s > 0:
            if len(self._cache) >= self.settings.cache_max_entries:
                self._evict(now)
            self._cache[key] = (now + self.settings.cache_ttl_s, user)
        return user

    def known_good(self, token_digest: str) -> bool:
        """Whether a TokenReview accepted this token (SHA-256 hex) within ``cache_ttl_s``."""
        expiry = self._good.get(token_digest)
        return expiry is not None and expiry > time.monotonic()

    def _remember_good(self, digest: str, now: float) -> None:
        if self.settings.cache_ttl_s <= 0:
            return
        self._good.pop(digest, None)
        if len(self._good) >= self.settings.cache_max_entries:
            for k in [k for k, exp in self._good.items() if exp <= now]:
                del self._good[k]
            while len(self._good) >= self.settings.cache_max_entries:
                del self._good[next(iter(self._good))]
        self._good[digest] = now + self.settings.cache_ttl_s

    def _remember_rejected(self, digest: str, why: str, now: float) -> None:
        if self.settings.rejected_ttl_s <= 0:
            return
        if len(self._rejected) >= self.settings.cache_max_entries:
            for k in [k for k, (exp, _) in self._rejected.items() if exp <= now]:
                del self._rejected[k]
            while len(self._rejected) >= self.settings.cache_max_entries:
                del self._rejected[next(iter(self._rejected))]
        self._rejected[digest] = (now + self.settings.rejected_ttl_s, why)

    def _evict(self, now: float) -> None:
        for k in [k for k, (exp, _) in self._cache.items() if exp <= now]:
            del self._cache[k]
        while len(self._cache) >= self.settings.cache_max_entries:
            del self._cache[next(iter(self._cache))]

    async def _call(self, what: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Send one review; its JSON answer, read as plain JSON (no client-side model validation)."""
        assert self._api is not None  # the settings checked it: authentication needs the API
        self.reviews_sent += 1
        try:
            return await self._api.request("POST", path, body=body, timeout_s=self.settings.request_timeout_s)
        except KubeError as exc:
            logger.warning("%s failed: %s %s", what, exc.status, exc.body[:200])
            raise ReviewUnavailable(
                f"cannot check access: the Kubernetes API answered {what} with {exc.status}"
            ) from exc
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            logger.warning("%s failed: %r", what, exc)
            msg = f"cannot check access: the Kubernetes API is unreachable ({what})"
            raise ReviewUnavailable(msg) from exc

    async def _authenticate(self, token: str) -> User:
        spec: dict[str, Any] = {"token": token}
        if self.settings.audiences:
            spec["audiences"] = list(self.settings.audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        review = await self._call("TokenReview", "/apis/authentication.k8s.io/v1/tokenreviews", body)
        status = review.get("status") or {}
        info = status.get("user") or {}
        if not status.get("authenticated") or not info.get("username"):
            raise Unauthenticated(f"authentication failed: {status.get('error') or 'the token is not valid'}")
        return User(
            name=str(info["username"]),
            uid=info.get("uid"),
            groups=tuple(info.get("groups") or ()),
            extra={str(k): list(v) for k, v in (info.get("extra") or {}).items()},
        )

    async def _authorize(self, user: User, namespace: str) -> None:
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "resourceAttributes": {
                "namespace": namespace, "verb": "get", "group": "", "resource": "pods", "subresource": "log",
            },
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        review = await self._call("SubjectAccessReview", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                                  body)
        status = review.get("status") or {}
        if status.get("allowed") is not True or status.get("denied"):
            why = str(status.get("reason") or status.get("evaluationError") or "").strip()
            raise Forbidden(
                f'user "{user.name}" cannot get resource "pods/log" in namespace "{namespace}"'
                + (f": {why}" if why else "")
            )
