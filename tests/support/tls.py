"""Test certificates (made by the ``openssl`` command) and a TLS-terminating TCP proxy.

The Temporal dev server has no TLS option: the proxy listens with TLS (mutual
when asked) and forwards the bytes in the clear to the server, so a client
reaches a real server only through a real handshake.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Certificates", "TlsProxy", "make_certificates", "openssl_available"]


def openssl_available() -> bool:
    """Whether the ``openssl`` command is on the PATH."""
    return shutil.which("openssl") is not None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(folder: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )  # fmt: skip


def _leaf(folder: Path, name: str, ca: str, extensions: str) -> None:
    (folder / f"{name}.ext").write_text(extensions, encoding="utf-8")
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
        cwd=folder,
    )  # fmt: skip


@dataclass(frozen=True)
class Certificates:
    """PEM files: a server CA and its server certificate, a client CA and its client's."""

    folder: Path
    server_name: str = "temporal.test"

    def path(self, name: str) -> Path:
        """``folder/name``."""
        return self.folder / name


def make_certificates(folder: Path) -> Certificates:
    """A server CA, a server certificate for ``temporal.test`` (and 127.0.0.1), a client
    CA and client certificate, and an unrelated ``wrong-ca``."""
    folder.mkdir(parents=True, exist_ok=True)
    for ca in ("server-ca", "client-ca", "wrong-ca"):
        _ca(folder, ca)
    _leaf(
        folder,
        "server",
        "server-ca",
        "subjectAltName=DNS:temporal.test,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    _leaf(
        folder,
        "client",
        "client-ca",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=clientAuth\n",
    )
    return Certificates(folder)


class TlsProxy:
    """Accept TLS on 127.0.0.1 and forward each connection's bytes to ``upstream``.

    Attributes:
        address: ``127.0.0.1:PORT`` to connect to.
        clients: The subject common names of the client certificates of the
            connections accepted (mutual TLS).
    """

    def __init__(self, upstream: str, certs: Certificates, *, mutual: bool) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certs.path("server.pem"), certs.path("server.key"))
        context.set_alpn_protocols(["h2"])
        if mutual:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(certs.path("client-ca.pem"))
        self._context = context
        self.clients: list[str] = []
        self._connections: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=context), self._loop
        ).result(10)
        port_ = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port_}"

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        peer: Any = writer.get_extra_info("peercert")
        if peer:
            subject = dict(item[0] for item in peer["subject"])
            self.clients.append(subject.get("commonName", ""))
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._connections.discard(task)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop listening and stop the proxy's thread."""

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
