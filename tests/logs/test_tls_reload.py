"""A renewed log API certificate is served without a restart; a broken one leaves the old in place."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from tests.logs.test_http import write

from podmortem.logs.cursor import LogCursor
from podmortem.logs.serving import auth, http
from podmortem.logs.settings import HttpSettings
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.logs.tls import ServerCertificate
from podmortem_demo.emulated.tls import Pki, make_pki

pytest.importorskip("cryptography")

OPEN = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))


def install(pki: Pki, directory: Path) -> None:
    """As the kubelet updates a Secret volume: new files, swapped in by rename (a new inode)."""
    for name, data in (("tls.crt", pki.server_pem), ("tls.key", pki.server_key)):
        tmp = directory / f".{name}.new"
        tmp.write_bytes(data)
        os.replace(tmp, directory / name)


async def fetch(url: str, pki: Pki) -> int:
    trusted = ssl.create_default_context(cadata=pki.ca_pem.decode())
    async with aiohttp.ClientSession() as s, s.get(url, ssl=trusted) as r:
        return r.status


async def test_a_renewed_certificate_is_used_for_new_connections(tmp_path: Path) -> None:
    old, new = make_pki(server_names=("127.0.0.1",)), make_pki(server_names=("127.0.0.1",))
    install(old, tmp_path)
    settings = HttpSettings(host="127.0.0.1", port=0, tls_cert_file=tmp_path / "tls.crt",
                            tls_key_file=tmp_path / "tls.key")
    async with LogStore(tmp_path / "store", settings=StoreSettings(fsync_interval_s=None)) as st:
        await write(st.sink(namespace="ns", pod="p"), "main", [b"x"], LogCursor(container_id="c"))
        certificate = settings.certificate()
        assert certificate is not None
        app = http.make_app(log_store=st, reviewer=OPEN, settings=settings)
        runner = http.runner(app, settings)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certificate.context)
            await site.start()
            url = f"https://127.0.0.1:{runner.addresses[0][1]}/logs/ns/p"
            assert await fetch(url, old) == 200
            assert not certificate.reload_if_changed()  # nothing changed
            install(new, tmp_path)
            assert certificate.reload_if_changed()
            assert await fetch(url, new) == 200
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await fetch(url, old)
        finally:
            await runner.cleanup()


def test_a_broken_replacement_keeps_the_previous_pair(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, other = make_pki(server_names=("127.0.0.1",)), make_pki(server_names=("127.0.0.1",))
    install(first, tmp_path)
    certificate = ServerCertificate(tmp_path / "tls.crt", tmp_path / "tls.key")
    # A half-done renewal: the new certificate with the old key.
    tmp = tmp_path / ".crt"
    tmp.write_bytes(other.server_pem)
    os.replace(tmp, tmp_path / "tls.crt")
    assert not certificate.reload_if_changed()
    assert "keeping the previous one" in caplog.text
    assert certificate.reloads == 0
