"""Where the API server is and how to authenticate: one loader for the operator, the agent and the CLI.

Where the configuration comes from, first found wins: an explicit path
(``--kubeconfig``), then ``$KUBECONFIG`` (a list, merged as kubectl merges it:
the first file to set a value wins), then the pod's service account (in a pod:
``KUBERNETES_SERVICE_HOST``/``_PORT`` and the token, CA and namespace files),
then ``~/.kube/config``. When none works, :class:`KubeconfigError` says what was
tried, in one line.

Read here: bearer tokens (inline or ``tokenFile``; a token file is re-read as it
rotates), client certificates, basic auth, the cluster CA,
``insecure-skip-tls-verify``, ``tls-server-name`` and ``proxy-url``. Users with an
``exec`` or ``auth-provider`` plugin get :attr:`ClusterAccess.plugin` set; the
callers in :mod:`podmortem.kube.clients` then run the plugin through
kubernetes_asyncio's loader. Everything here is synchronous, needs only PyYAML,
and runs before the event loop starts: ``podmortem logs`` must not pay for
kubernetes_asyncio's imports.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podmortem.errors import PodmortemError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: Only for tests that start the real entry points "in a pod" without root: where the service
#: account files are. A pod never sets it (the kubelet mounts them at :data:`SERVICE_ACCOUNT_DIR`).
SERVICE_ACCOUNT_DIR_ENV = "PODMORTEM_SERVICE_ACCOUNT_DIR"
#: Bound service-account tokens rotate (hourly by default): a token file is re-read when it changes,
#: and at least this often (seconds).
TOKEN_REREAD_S = 60.0


class KubeconfigError(PodmortemError):
    """No usable cluster configuration was found, or it is malformed: the message says which."""


@dataclass
class ClusterAccess:
    """The API server's address and the credentials to reach it.

    The TLS material is kept as PEM bytes (and, where it came from a file, that
    file's path) so that each client library can be configured from the same
    reading: our aiohttp sessions through :attr:`ssl_context`, kubernetes_asyncio
    and kopf through :mod:`podmortem.kube.clients`.
    """

    #: Base URL of the API server, without a trailing slash (it may carry a path prefix).
    server: str
    #: The kubeconfig context's namespace (or the service account's), if any.
    namespace: str | None = None
    #: TLS settings for https servers; None for plain http.
    ssl_context: ssl.SSLContext | None = None
    #: ``tls-server-name``: the name to verify the server certificate against.
    tls_server_name: str | None = None
    #: ``proxy-url`` of the cluster entry.
    proxy: str | None = None
    #: A fixed ``Authorization`` header value (``Bearer ...`` or ``Basic ...``).
    authorization: str | None = None
    #: A token file re-read at most every :data:`TOKEN_REREAD_S` seconds (rotating tokens).
    token_file: Path | None = None
    #: Where this came from, for error messages ("kubeconfig /path", "in-cluster service account /dir").
    source: str = ""
    #: The user needs an ``exec`` or ``auth-provider`` plugin: use kubernetes_asyncio's loader.
    plugin: bool = False
    #: The kubeconfig file(s) to hand to that loader when :attr:`plugin` is set.
    config_files: tuple[Path, ...] = ()
    #: ``insecure-skip-tls-verify``: the server's certificate is not checked.
    insecure: bool = False
    #: The cluster CA (PEM), and the file it was read from when it came from one.
    ca_pem: bytes | None = None
    ca_file: Path | None = None
    #: The client certificate and key (PEM), for certificate authentication.
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    _token: str | None = field(default=None, repr=False)
    _token_read_at: float = field(default=-1e18, repr=False)
    _token_stamp: tuple[int, int, int] | None = field(default=None, repr=False)

    def headers(self, *, reread: bool = False) -> dict[str, str]:
        """Headers for every request; re-reads a rotating token file when due (or when ``reread``)."""
        headers = {"Accept": "*/*"}
        value = self.authorization_header(reread=reread)
        if value is not None:
            headers["Authorization"] = value
        return headers

    def authorization_header(self, *, reread: bool = False) -> str | None:
        """The ``Authorization`` value, or None for certificate-only or anonymous access.

        A token file is read again as soon as it changes (the kubelet swaps a projected token in
        atomically: a new inode), and at least every :data:`TOKEN_REREAD_S` seconds.
        """
        if self.token_file is not None:
            now = time.monotonic()
            try:
                st = self.token_file.stat()
                stamp: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
            except OSError:
                stamp = None
            due = now - self._token_read_at >= TOKEN_REREAD_S or stamp != self._token_stamp
            if reread or self._token is None or due:
                try:
                    self._token = self.token_file.read_text().strip()
                    self._token_stamp = stamp
                except OSError as exc:
                    if self._token is None:
                        raise KubeconfigError(f"cannot read token file {self.token_file}: {exc}") from exc
                self._token_read_at = now
            return f"Bearer {self._token}"
        return self.authorization


#: What :func:`load` looked at, in order, for the one-line error when nothing was usable.
_NOTHING_FOUND = (
    "no Kubernetes credentials: tried --kubeconfig (not given), $KUBECONFIG (not set), "
    "the in-cluster service account (KUBERNETES_SERVICE_HOST not set) and {home} (not found)"
)


def load(path: str | os.PathLike[str] | None = None, *,
         environ: dict[str, str] | None = None, home: Path | None = None,
         account_dir: Path | None = None) -> ClusterAccess:
    """Find the configuration: ``path``, then ``$KUBECONFIG``, then in-cluster, then ``~/.kube/config``.

    An explicit ``path`` or ``$KUBECONFIG`` that is broken is an error, not a reason to fall
    through to the next source: the user asked for it.
    """
    env = dict(os.environ) if environ is None else environ
    if path and os.pathsep in os.fspath(path):
        env = {**env, "KUBECONFIG": os.fspath(path)}  # a $KUBECONFIG-style list handed on as a path
    elif path:
        file = Path(path).expanduser()
        if not file.is_file():
            raise KubeconfigError(f"--kubeconfig {file}: no such file")
        return from_kubeconfig([file])
    listed = env.get("KUBECONFIG", "")
    if listed:
        files = [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
        existing = [f for f in files if f.is_file()]
        if not existing:
            raise KubeconfigError(f"KUBECONFIG={listed}: no such file")
        return from_kubeconfig(existing)
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"):
        if account_dir is None:
            account_dir = Path(env.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR)
        return in_cluster(env, account_dir=account_dir)
    default = (home or Path.home()) / ".kube" / "config"
    if default.is_file():
        return from_kubeconfig([default])
    raise KubeconfigError(_NOTHING_FOUND.format(home=default))


def in_cluster(env: dict[str, str], *, account_dir: Path = SERVICE_ACCOUNT_DIR) -> ClusterAccess:
    """The pod's service account: the API's service address, its CA and a rotating token."""
    host, port = env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]
    if ":" in host:  # IPv6
        host = f"[{host}]"
    token = account_dir / "token"
    ca = account_dir / "ca.crt"
    source = f"in-cluster service account {account_dir}"
    missing = [f.name for f in (token, ca) if not f.is_file()]
    if missing:
        raise KubeconfigError(f"{source}: no {' or '.join(missing)} (is automountServiceAccountToken off?)")
    namespace_file = account_dir / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.is_file() else None
    try:
        ca_pem = ca.read_bytes()
        context = ssl.create_default_context(cadata=ca_pem.decode("ascii"))
    except (OSError, ssl.SSLError, UnicodeDecodeError) as exc:
        raise KubeconfigError(f"{source}: ca.crt is not a PEM certificate: {exc}") from exc
    context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    access = ClusterAccess(
        server=f"https://{host}:{port}", namespace=namespace or None, ssl_context=context,
        token_file=token, source=source, ca_pem=ca_pem, ca_file=ca,
    )
    access.headers()  # fail now, naming the file, rather than at the first request
    return access


def _yaml(file: Path) -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(file.read_text(), Loader=loader)
    except OSError as exc:
        raise KubeconfigError(f"cannot read kubeconfig {file}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise KubeconfigError(f"cannot read kubeconfig {file}: not valid YAML{where} ({problem})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise KubeconfigError(f"kubeconfig {file} is not a mapping (a YAML document of clusters, "
                              "users and contexts)")
    return data


def _merge(files: list[Path]) -> tuple[dict[str, Any], dict[str, dict[str, tuple[dict[str, Any], Path]]]]:
    """kubectl's merge: the first file to set ``current-context`` or a named entry wins."""
    top: dict[str, Any] = {}
    named: dict[str, dict[str, tuple[dict[str, Any], Path]]] = {"clusters": {}, "users": {}, "contexts": {}}
    for file in files:
        data = _yaml(file)
        if data.get("current-context") and "current-context" not in top:
            top["current-context"] = data["current-context"]
        for kind, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            entries = data.get(kind) or []
            if not isinstance(entries, list):
                raise KubeconfigError(f"kubeconfig {file}: {kind} is not a list")
            for entry in entries:
                if isinstance(entry, dict) and "name" in entry:
                    value = entry.get(key) or {}
                    if not isinstance(value, dict):
                        raise KubeconfigError(f"kubeconfig {file}: {kind} entry {entry['name']!r} has no "
                                              f"{key} mapping")
                    named[kind].setdefault(str(entry["name"]), (value, file))
    return top, named


def from_kubeconfig(files: list[Path]) -> ClusterAccess:
    """The current context of the merged kubeconfig files."""
    top, named = _merge(files)
    shown = os.pathsep.join(str(f) for f in files)
    context_name = top.get("current-context")
    if not context_name:
        raise KubeconfigError(f"kubeconfig {shown} has no current-context")
    if context_name not in named["contexts"]:
        raise KubeconfigError(f"kubeconfig {shown}: context {context_name!r} is not defined")
    context, _ = named["contexts"][context_name]
    cluster_name, user_name = context.get("cluster"), context.get("user")
    if cluster_name not in named["clusters"]:
        raise KubeconfigError(f"kubeconfig {shown}: cluster {cluster_name!r} is not defined")
    cluster, cluster_file = named["clusters"][cluster_name]
    user, user_file = named["users"].get(user_name, ({}, cluster_file)) if user_name else ({}, cluster_file)
    server = str(cluster.get("server") or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise KubeconfigError(f"kubeconfig {shown}: cluster {cluster_name!r} has no http(s) server")
    access = ClusterAccess(
        server=server, namespace=context.get("namespace") or None,
        tls_server_name=cluster.get("tls-server-name") or None, proxy=cluster.get("proxy-url") or None,
        source=f"kubeconfig {shown}", config_files=tuple(files),
        plugin=bool(user.get("exec") or user.get("auth-provider")),
    )
    if access.plugin:
        return access
    if server.startswith("https://"):
        _tls(access, cluster, user, cluster_dir=cluster_file.parent, user_dir=user_file.parent)
    if user.get("token"):
        access.authorization = f"Bearer {user['token']}"
    elif user.get("tokenFile"):
        access.token_file = _path(user["tokenFile"], user_file.parent)
        access.headers()  # fail now, with the file's name, rather than at the first request
    elif user.get("username") and user.get("password") is not None:
        basic = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
        access.authorization = f"Basic {basic}"
    return access


def _path(value: str, base: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _data(entry: dict[str, Any], key: str, base: Path) -> bytes | None:
    """``<key>-data`` (base64) or the file named by ``<key>``, as bytes."""
    if entry.get(f"{key}-data"):
        try:
            return base64.b64decode(entry[f"{key}-data"])
        except ValueError as exc:
            raise KubeconfigError(f"{key}-data is not valid base64") from exc
    if entry.get(key):
        path = _path(entry[key], base)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise KubeconfigError(f"cannot read {key} {path}: {exc}") from exc
    return None


def _tls(access: ClusterAccess, cluster: dict[str, Any], user: dict[str, Any], *,
         cluster_dir: Path, user_dir: Path) -> None:
    """Read the CA and client certificate into ``access`` and build its SSL context."""
    if cluster.get("insecure-skip-tls-verify"):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        access.insecure = True
    else:
        ca = _data(cluster, "certificate-authority", cluster_dir)
        try:
            context = ssl.create_default_context(cadata=ca.decode("ascii") if ca is not None else None)
        except (ssl.SSLError, UnicodeDecodeError) as exc:
            raise KubeconfigError(f"the cluster's certificate-authority is not PEM: {exc}") from exc
        # Cluster CAs often lack extensions that strict X.509 checking (Python 3.13's default) wants.
        context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
        access.ca_pem = ca
        if ca is not None and not cluster.get("certificate-authority-data"):
            access.ca_file = _path(cluster["certificate-authority"], cluster_dir)
    cert = _data(user, "client-certificate", user_dir)
    key = _data(user, "client-key", user_dir)
    if cert is not None:
        _load_client_cert(context, cert, key)
        access.client_cert_pem, access.client_key_pem = cert, key
    access.ssl_context = context


def _load_client_cert(context: ssl.SSLContext, cert: bytes, key: bytes | None) -> None:
    """``load_cert_chain`` only reads files: write the PEMs to a private temp dir, load, delete."""
    with tempfile.TemporaryDirectory(prefix="podmortem-tls-") as tmp:
        cert_file = Path(tmp) / "client.crt"
        cert_file.write_bytes(cert)
        key_file = None
        if key is not None:
            key_file = Path(tmp) / "client.key"
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(key)
        try:
            context.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
        except ssl.SSLError as exc:
            raise KubeconfigError(f"the user's client certificate or key is not usable: {exc}") from exc
