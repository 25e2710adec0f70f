"""TokenReview and SubjectAccessReview answers, as the operator's log API asks them before serving a log.

A real apiserver authenticates a token for the audiences the review names
(``spec.audiences``; none means the apiserver's own) and answers with the subset the
token is valid for. :class:`Reviews` does the same from a table of known tokens, and
allows a SubjectAccessReview unless its user is listed as denied. The answers have the real
server's shapes (kube-apiserver v1.36, tests/controlplane/test_log_auth_real.py): a rejected
token's status has no ``authenticated`` key and an empty ``user``, an accepted one carries the
``credential-id`` extra (which the operator passes on to its SubjectAccessReview), and RBAC's
"no" gives no reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
#: The audience of tokens the apiserver issues by default (its ``--api-audiences``).
APISERVER_AUDIENCE = "https://kubernetes.default.svc"


@dataclass(frozen=True)
class ReviewedToken:
    """A token the emulated apiserver knows: whose it is, and the audiences it was issued for."""

    username: str
    audiences: frozenset[str] = frozenset({APISERVER_AUDIENCE})


@dataclass
class Reviews:
    """Answers to reviews, and the reviews received (for tests to assert on)."""

    tokens: dict[str, ReviewedToken] = field(default_factory=dict)
    #: Usernames every SubjectAccessReview denies.
    denied: set[str] = field(default_factory=set)
    received: list[dict[str, Any]] = field(default_factory=list)

    def token_review(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.received.append(dict(body))
        spec = body.get("spec") or {}
        known = self.tokens.get(str(spec.get("token") or ""))
        asked = frozenset(spec.get("audiences") or [APISERVER_AUDIENCE])
        valid_for = asked & known.audiences if known is not None else frozenset()
        status: dict[str, Any]
        if known is not None and valid_for:
            status = {"authenticated": True, "audiences": sorted(valid_for), "user": {
                "username": known.username, "uid": f"uid-{known.username}",
                "groups": ["system:authenticated"],
                "extra": {"authentication.kubernetes.io/credential-id": [f"JTI=jti-{known.username}"]}}}
        elif known is not None:
            status = {"user": {}, "error": (
                f"[invalid bearer token, token audiences {json.dumps(sorted(known.audiences))} is invalid "
                f"for the target audiences {json.dumps(sorted(asked))}]")}
        else:
            status = {"user": {}, "error": "invalid bearer token"}
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec,
                "status": status}

    def access_review(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.received.append(dict(body))
        spec = body.get("spec") or {}
        allowed = str(spec.get("user") or "") not in self.denied
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec,
                "status": {"allowed": allowed}}
