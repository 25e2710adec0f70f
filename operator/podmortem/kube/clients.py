"""aiohttp sessions built from one :class:`~podmortem.kube.config.ClusterAccess`, and its plugins run.

The operator talks to the API through two clients (kopf's watches, and
:class:`~podmortem.kube.session.ApiSession` for everything else); both are
configured here from the same reading of the kubeconfig or service account, so
they can never disagree about the server, the CA or the token.

Exec and auth-provider plugins are run by kubernetes_asyncio's loader, which
knows their protocols; :func:`resolve_plugin` turns its result into a plain
:class:`ClusterAccess` for the aiohttp sessions.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import shutil
import ssl
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podmortem.kube.config import ClusterAccess, KubeconfigError

if TYPE_CHECKING:
    import aiohttp
    from kubernetes_asyncio.client import Configuration

#: How long credentials from an exec or auth-provider plugin are used before the plugin runs again
#: (seconds). Plugins' tokens live for minutes to an hour; a 401 also triggers a new run.
PLUGIN_CREDENTIALS_S = 300.0


@functools.cache
def _private_dir() -> Path:
    """One private directory per process for PEM files that a library can only read from a file."""
    path = Path(tempfile.mkdtemp(prefix="podmortem-kube-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _pem_file(name: str, data: bytes) -> str:
    path = _private_dir() / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return str(path)


async def api_configuration(access: ClusterAccess) -> Configuration:
    """A kubernetes_asyncio ``Configuration`` for ``access``; token files are re-read as they rotate."""
    from kubernetes_asyncio import config as kube_config
    from kubernetes_asyncio.client import Configuration

    configuration = Configuration()
    if access.plugin:
        try:
            await kube_config.load_kube_config(
                config_file=os.pathsep.join(str(f) for f in access.config_files),
                client_configuration=configuration, persist_config=False,
            )
        except (kube_config.ConfigException, OSError, ValueError) as exc:
            raise KubeconfigError(f"{access.source}: the credential plugin failed: {exc}") from exc
        return configuration
    configuration.host = access.server
    configuration.verify_ssl = not access.insecure
    configuration.disable_strict_ssl_verification = True
    configuration.tls_server_name = access.tls_server_name
    configuration.proxy = proxy_for(access)
    if access.ca_pem is not None:
        configuration.ssl_ca_cert = (
            str(access.ca_file) if access.ca_file else _pem_file("ca.crt", access.ca_pem)
        )
    if access.client_cert_pem is not None:
        configuration.cert_file = _pem_file("client.crt", access.client_cert_pem)
        if access.client_key_pem is not None:
            configuration.key_file = _pem_file("client.key", access.client_key_pem)
    # The whole header value goes in as the "key" (no prefix): one path for Bearer and Basic.
    header = access.authorization_header()
    if header is not None:
        configuration.api_key = {"BearerToken": header}
    if access.token_file is not None:

        def refresh(config: Configuration) -> None:
            config.api_key = {"BearerToken": access.authorization_header() or ""}

        configuration.refresh_api_key_hook = refresh
    return configuration


async def resolve_plugin(access: ClusterAccess) -> ClusterAccess:
    """Run the user's exec or auth-provider plugin once: plain credentials for non-kubernetes_asyncio
    clients. Access without a plugin is returned as it is."""
    if not access.plugin:
        return access
    configuration = await api_configuration(access)
    header = await configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
    return _plain_access(access, configuration, header)


def _plain_access(access: ClusterAccess, configuration: Configuration, header: str | None) -> ClusterAccess:
    """What kubernetes_asyncio's loader made of a plugin user, as plain credentials (reads small files)."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    cert_pem = key_pem = None
    if configuration.cert_file:
        cert_pem = Path(configuration.cert_file).read_bytes()
        key_pem = Path(configuration.key_file).read_bytes() if configuration.key_file else None
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    ca_file = Path(configuration.ssl_ca_cert) if configuration.ssl_ca_cert else None
    return dataclasses.replace(
        access,
        server=str(configuration.host).rstrip("/"),
        plugin=False,
        authorization=header or None,
        ssl_context=context if str(configuration.host).startswith("https://") else None,
        insecure=not configuration.verify_ssl,
        tls_server_name=configuration.tls_server_name or access.tls_server_name,
        ca_file=ca_file,
        ca_pem=ca_file.read_bytes() if ca_file else None,
        client_cert_pem=cert_pem,
        client_key_pem=key_pem,
    )


def proxy_for(access: ClusterAccess) -> str | None:
    """The proxy that reaches the API server: the kubeconfig's ``proxy-url``, else the environment's
    (``HTTPS_PROXY``/``HTTP_PROXY``, ``NO_PROXY`` honoured, as client-go's ProxyFromEnvironment),
    read once rather than per request."""
    if access.proxy:
        return access.proxy
    import aiohttp.helpers
    import yarl

    try:
        proxy, auth = aiohttp.helpers.get_env_proxy_for_url(yarl.URL(access.server))
    except LookupError:
        return None
    if auth is not None:
        proxy = proxy.with_user(auth.login).with_password(auth.password)
    return str(proxy)


def aiohttp_session(access: ClusterAccess, *, headers: bool = True, force_close: bool = False,
                    max_connections: int = 0, **kwargs: Any) -> aiohttp.ClientSession:
    """An aiohttp session that reaches ``access.server``: its TLS, ``tls-server-name`` and proxy,
    and (with ``headers``) the credentials as of now. Must be called on a running event loop.

    ``force_close``: no idle connection is kept for reuse, so every socket open belongs to a
    request in flight (the log followers count theirs against the open-files limit).
    ``max_connections``: connections open at once, idle ones included (0: no cap)."""
    import aiohttp

    middlewares: tuple[Any, ...] = ()
    if access.tls_server_name:
        middlewares = (functools.partial(_name_the_server, server_hostname=access.tls_server_name),)
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=max_connections, ssl=access.ssl_context or False,
                                       force_close=force_close),
        headers=access.headers() if headers else None,
        proxy=proxy_for(access),
        middlewares=middlewares,
        **kwargs,
    )


async def _name_the_server(request: Any, handler: Any, *, server_hostname: str) -> Any:
    """Check the server's certificate against ``tls-server-name`` instead of the URL's host."""
    if request.server_hostname is None:
        request.server_hostname = server_hostname
    return await handler(request)


def describe_connection_error(exc: BaseException, access: ClusterAccess) -> str:
    """One line that says what failed when reaching the API server, and where the settings came from."""
    import aiohttp

    where = f"{access.server} (from {access.source})" if access.source else access.server
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        if "mismatch" in str(exc.certificate_error):
            return (f"TLS: the certificate of {where} does not name the host it was reached at "
                    f"({exc.certificate_error}); set tls-server-name to a name it has")
        return (f"TLS: the certificate of {where} is not trusted by the configured CA "
                f"({exc.certificate_error}); check certificate-authority / ca.crt")
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"TLS handshake with {where} failed: {exc}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {where}: {exc.os_error or exc}"
    if isinstance(exc, TimeoutError):
        return f"no answer from {where} in time"
    return f"{where}: {type(exc).__name__}: {exc}"
