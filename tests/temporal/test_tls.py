"""The Temporal connection over TLS: mutual TLS through a TLS-terminating proxy in front
of the dev server (which has no TLS option), the options the SDK is given, and the
errors of a wrong CA, a certificate without its key and an unreadable file."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.tls import Certificates, TlsProxy, make_certificates, openssl_available
from temporalio.service import TLSConfig

from nbdurable._errors import ConfigurationError
from nbdurable.cli import main
from nbdurable.temporal import TemporalConnection, TemporalConnectionError, TemporalEngine

from .conftest import Cluster


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    if not openssl_available():
        pytest.skip("the openssl command is missing")
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def proxy(temporal_server: str, certs: Certificates) -> Iterator[TlsProxy]:
    """Mutual TLS in front of the dev server."""
    tls = TlsProxy(temporal_server, certs, mutual=True)
    yield tls
    tls.close()


def _mutual(certs: Certificates) -> TemporalConnection:
    return TemporalConnection(
        tls_ca=certs.path("server-ca.pem"),
        tls_cert=certs.path("client.pem"),
        tls_key=certs.path("client.key"),
        tls_server_name=certs.server_name,
    )


async def test_a_run_over_mutual_tls_from_the_cli_worker_and_the_engine(
    cluster: Cluster, proxy: TlsProxy, certs: Certificates
) -> None:
    # the worker takes its TLS settings from the environment, its address from a flag
    cluster.worker(
        args=["--address", proxy.address],
        NBDURABLE_TLS_CA=str(certs.path("server-ca.pem")),
        NBDURABLE_TLS_CERT=str(certs.path("client.pem")),
        NBDURABLE_TLS_KEY=str(certs.path("client.key")),
        NBDURABLE_TLS_SERVER_NAME=certs.server_name,
    )
    engine = TemporalEngine(
        address=proxy.address, task_queue=cluster.queue, connection=_mutual(certs)
    )
    async with cluster.reader(engine=engine) as rt:
        run = await rt.submit("many", "Run once.")
        result = await asyncio.wait_for(run.result(), 60)
    assert result.text == "ok"
    # worker and client both came through the proxy, each with its client certificate
    assert proxy.clients.count("client") >= 2, proxy.clients


async def test_a_wrong_ca_fails_with_a_clear_error(proxy: TlsProxy, certs: Certificates) -> None:
    wrong = TemporalConnection(
        tls_ca=certs.path("wrong-ca.pem"),
        tls_cert=certs.path("client.pem"),
        tls_key=certs.path("client.key"),
        tls_server_name=certs.server_name,
    )
    engine = TemporalEngine(address=proxy.address, connection=wrong)
    with pytest.raises(TemporalConnectionError) as caught:
        await engine.client()
    message = str(caught.value)
    assert message.startswith(f"cannot connect to Temporal at {proxy.address} (namespace default")
    assert f"TLS with CA {certs.path('wrong-ca.pem')}" in message
    assert proxy.clients == []  # the handshake never completed


def test_the_worker_says_which_connection_failed(
    proxy: TlsProxy, certs: Certificates, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["worker", "--engine", "temporal", "--address", proxy.address]
    argv += ["--store", f"sqlite:///{tmp_path / 'runs.db'}"]
    argv += ["--agents", "support.temporal_agents:agents"]
    argv += ["--tls-ca", str(certs.path("server-ca.pem"))]  # no client certificate
    argv += ["--tls-server-name", certs.server_name]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nbdurable: cannot connect to Temporal at {proxy.address}"), err


def test_the_options_given_to_the_sdk(certs: Certificates) -> None:
    options = _mutual(certs).connect_options()
    assert set(options) == {"tls"}
    tls = options["tls"]
    assert isinstance(tls, TLSConfig)
    assert tls.server_root_ca_cert == certs.path("server-ca.pem").read_bytes()
    assert tls.client_cert == certs.path("client.pem").read_bytes()
    assert tls.client_private_key == certs.path("client.key").read_bytes()
    assert tls.domain == "temporal.test"
    # Temporal Cloud with an API key: TLS with the system's roots
    assert TemporalConnection(api_key="k-123").connect_options() == {
        "tls": True,
        "api_key": "k-123",
    }
    # a CA alone: server TLS only
    ca_only = TemporalConnection(tls_ca=certs.path("server-ca.pem")).connect_options()["tls"]
    assert ca_only.client_cert is None and ca_only.server_root_ca_cert is not None
    # nothing: a plain connection, as to a dev server
    assert TemporalConnection().connect_options() == {}


def test_a_certificate_needs_its_key_and_files_must_be_readable(
    certs: Certificates, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="give both --tls-cert and --tls-key"):
        TemporalConnection(tls_cert=certs.path("client.pem"))
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigurationError, match=f"cannot read --tls-ca {missing}"):
        TemporalConnection(tls_ca=missing).connect_options()
