"""Where a user reads a followed pod's stored log: the operator's ``GET /logs/{namespace}/{pod}``.

One function, used by the report and by ``status.log.url``, so both always
point at the same place. Pure.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode


def log_url(base: str, *, namespace: str, pod: str, container: str | None = None) -> str:
    """``{base}/logs/{namespace}/{pod}[?container=...]``; with an empty base, the path alone.

    Kubernetes names need no escaping, but a base given by a user may end in ``/`` and a
    container name is quoted anyway, so a hand-made pod name cannot break the URL.
    """
    path = f"/logs/{quote(namespace, safe='')}/{quote(pod, safe='')}"
    if container:
        path += "?" + urlencode({"container": container})
    return base.rstrip("/") + path
