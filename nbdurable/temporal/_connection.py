"""How a client reaches the Temporal frontend: TLS (mutual or not) and an API key.

A dev server takes none of it; a secured self-hosted cluster takes a server CA
(and often a client certificate and key); Temporal Cloud takes either a client
certificate and key or an API key (which implies TLS with the system's roots).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, NbdurableError

if TYPE_CHECKING:
    from temporalio.client import Client, Interceptor
    from temporalio.runtime import Runtime
    from temporalio.service import TLSConfig

__all__ = ["TemporalConnection", "TemporalConnectionError"]


class TemporalConnectionError(NbdurableError, ConnectionError):
    """The Temporal frontend could not be reached (or refused the TLS handshake)."""


def _read(flag: str, path: str | Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class TemporalConnection:
    """TLS and API key options of a Temporal client connection.

    Attributes:
        tls_ca: PEM file of the CA that signed the server's certificate (None: the
            system's roots when TLS is on).
        tls_cert: PEM file of this client's certificate (mutual TLS; with ``tls_key``).
        tls_key: PEM file of this client's private key (with ``tls_cert``).
        tls_server_name: The name the server's certificate is checked against,
            when it differs from the address's host.
        api_key: A Temporal Cloud API key, sent as a bearer token; implies TLS.
        tls: Use TLS with the system's roots although no file is given (True), or
            decide from the other fields (None).
    """

    tls_ca: str | Path | None = None
    tls_cert: str | Path | None = None
    tls_key: str | Path | None = None
    tls_server_name: str | None = None
    api_key: str | None = None
    tls: bool | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigurationError(
                "a client certificate needs its key: give both --tls-cert and --tls-key"
            )
        if self.tls is False and self.uses_files:
            raise ConfigurationError("tls=False contradicts the TLS files given")

    @property
    def uses_files(self) -> bool:
        """Whether any TLS setting beyond "on" is given (CA, certificate, server name)."""
        return any(
            value is not None
            for value in (self.tls_ca, self.tls_cert, self.tls_key, self.tls_server_name)
        )

    @property
    def secure(self) -> bool:
        """Whether the connection uses TLS."""
        return bool(self.tls) or self.uses_files or (self.tls is None and self.api_key is not None)

    def tls_config(self) -> TLSConfig | bool:
        """The SDK's ``tls`` argument: a :class:`temporalio.service.TLSConfig`, or a bool."""
        if not self.uses_files:
            return self.secure
        from temporalio.service import TLSConfig

        return TLSConfig(
            server_root_ca_cert=_read("--tls-ca", self.tls_ca),
            client_cert=_read("--tls-cert", self.tls_cert),
            client_private_key=_read("--tls-key", self.tls_key),
            domain=self.tls_server_name,
        )

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments of :meth:`temporalio.client.Client.connect` (TLS, API key)."""
        options: dict[str, Any] = {}
        if self.secure:
            options["tls"] = self.tls_config()
        if self.api_key is not None:
            options["api_key"] = self.api_key
        return options

    def describe(self) -> str:
        """How the connection is secured, in words (for errors and logs)."""
        parts = []
        if self.secure:
            parts.append(f"TLS with CA {self.tls_ca}" if self.tls_ca else "TLS (system roots)")
        if self.tls_cert is not None:
            parts.append(f"client certificate {self.tls_cert}")
        if self.tls_server_name is not None:
            parts.append(f"server name {self.tls_server_name}")
        if self.api_key is not None:
            parts.append("an API key")
        return ", ".join(parts) or "no TLS"

    async def connect(
        self,
        address: str,
        namespace: str = "default",
        interceptors: Sequence[Interceptor] = (),
        runtime: Runtime | None = None,
    ) -> Client:
        """A client connected to ``address`` with these options (on ``runtime``, if given).

        Raises:
            TemporalConnectionError: The frontend is unreachable, or the TLS handshake
                failed (a wrong CA, an expired or unknown client certificate).
            ConfigurationError: A file cannot be read, or a certificate lacks its key.
        """
        from temporalio.client import Client

        options = self.connect_options()
        if runtime is not None:  # the SDK's metrics go where that runtime sends them
            options["runtime"] = runtime
        try:
            return await Client.connect(
                address, namespace=namespace, interceptors=list(interceptors), **options
            )
        except RuntimeError as exc:
            text = " ".join(str(exc).split())
            raise TemporalConnectionError(
                f"cannot connect to Temporal at {address} (namespace {namespace}, "
                f"{self.describe()}): {text}"
            ) from exc
