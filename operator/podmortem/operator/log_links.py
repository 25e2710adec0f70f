"""Where a user reads a followed pod's stored log and a job's report page, on the operator's log server.

``GET /logs/{namespace}/{pod}`` and ``GET /reports/{namespace}/{job}``: one function each,
used by the report, its Event and ``status.log.url``, so all point at the same place. Pure.
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


def report_url(base: str, *, namespace: str, job: str) -> str:
    """``{base}/reports/{namespace}/{job}``: the link a status, annotation or Event carries."""
    return base.rstrip("/") + f"/reports/{quote(namespace, safe='')}/{quote(job, safe='')}"
