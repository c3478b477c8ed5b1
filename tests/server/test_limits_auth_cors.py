"""Limits, bearer auth and CORS over real HTTP (raw sockets where httpx would be too polite)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import nbdurable as nd
from nbdurable.server import build_server, create_app

from .harness import TOKEN, Server


def _raw(server: Server, request: bytes) -> bytes:
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def test_body_over_the_limit_is_413_before_parsing(make_server: Any) -> None:
    server = make_server(max_body_bytes=1000)
    with server.client() as http:
        big = http.post("/runs", json={"agent": "helper", "prompt": "x" * 2000})
        assert big.status_code == 413
        assert big.json()["error"]["type"] == "LimitExceededError"
        assert "max_body_bytes" in big.json()["error"]["message"]
        # not JSON at all, but too big: refused before anyone parses it
        junk = http.post("/runs", content=b"{" * 5000, headers={"Content-Type": "application/json"})
        assert junk.status_code == 413

        def chunks() -> Iterator[bytes]:  # chunked transfer: no Content-Length to trust
            for _ in range(20):
                yield b"x" * 100

        chunked = http.post("/runs", content=chunks(), headers={"Content-Type": "application/json"})
        assert chunked.status_code == 413
        assert chunked.json()["error"]["type"] == "LimitExceededError"
        small = http.post("/runs", json={"agent": "helper", "prompt": "x" * 100})
        assert small.status_code == 201
    # a lying Content-Length is refused at once, before the body is even sent
    raw = _raw(
        server,
        b"POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 999999\r\n\r\n",
    )
    assert raw.startswith(b"HTTP/1.1 413") and b"LimitExceededError" in raw


def test_bearer_token_is_required_except_for_links(server: Server) -> None:
    with server.client(auth=False) as http:
        for method, path in (
            ("GET", "/runs"),
            ("POST", "/runs"),
            ("GET", "/runs/x"),
            ("POST", "/runs/x/cancel"),
            ("POST", "/runs/x/retry"),
            ("GET", "/runs/x/events"),
            ("GET", "/runs/x/approvals"),
            ("GET", "/approvals"),
            ("POST", "/runs/x/approvals/y"),
        ):
            for headers in (
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": f"Basic {TOKEN}"},
                {"Authorization": f"Bearer {TOKEN}x"},
                {"Authorization": "Bearer"},
            ):
                response = http.request(method, path, headers=headers, json={})
                assert response.status_code == 401, (method, path, headers, response.text)
                assert response.json()["error"]["type"] == "NotAuthenticatedError"
                assert response.headers["www-authenticate"] == "Bearer"
        # the approval link routes answer without it (and refuse a bad token with 403)
        assert http.get("/approve/x/y", params={"token": "bad"}).status_code == 403
        assert http.post("/approve/x/y", json={"approve": True, "token": "bad"}).status_code == 403
        # the schema and its docs are public
        assert http.get("/openapi.json").status_code == 200
        assert http.get("/docs").status_code == 200
    with server.client() as http:
        assert http.get("/runs").status_code == 200


def test_cors_is_off_by_default_and_opt_in(server: Server, make_server: Any) -> None:
    origin = {"Origin": "https://evil.example"}
    with server.client() as http:
        simple = http.get("/runs", headers=origin)
        assert "access-control-allow-origin" not in simple.headers
        preflight = http.options(
            "/runs", headers={**origin, "Access-Control-Request-Method": "POST"}
        )
        assert "access-control-allow-origin" not in preflight.headers
    allowed = make_server(cors_origins=["https://dash.example"])
    with allowed.client() as http:
        ok = http.options(
            "/runs",
            headers={
                "Origin": "https://dash.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert ok.headers["access-control-allow-origin"] == "https://dash.example"
        other = http.get("/runs", headers=origin)
        assert "access-control-allow-origin" not in other.headers


def test_without_a_token_only_loopback_is_served(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NBDURABLE_SERVER_TOKEN", raising=False)
    server = make_server(token=None)
    with server.client(auth=False) as http:  # we are 127.0.0.1
        assert http.get("/runs").status_code == 200
    runtime = nd.DurableRuntime(store=nd.open_store("memory://"))
    with pytest.raises(nd.ConfigurationError, match="without a token"):
        build_server(runtime, host="0.0.0.0", port=0, token=None)
    build_server(runtime, host="0.0.0.0", port=0, token="t")  # with a token it may
    monkeypatch.setenv("NBDURABLE_SERVER_TOKEN", "from-env")
    build_server(runtime, host="0.0.0.0", port=0)


def test_token_from_the_environment(make_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBDURABLE_SERVER_TOKEN", "env-token")
    server = make_server(token=None)
    with httpx.Client(base_url=server.url) as http:
        assert http.get("/runs").status_code == 401
        assert http.get("/runs", headers={"Authorization": "Bearer env-token"}).status_code == 200


def test_invalid_options_are_configuration_errors() -> None:
    runtime = nd.DurableRuntime(store=nd.open_store("memory://"))
    for options in (
        {"max_body_bytes": 0},
        {"max_body_bytes": True},
        {"approval_max_age_ms": 0},
        {"cors_origins": "https://one.example"},
        {"token": "  "},
    ):
        with pytest.raises(nd.ConfigurationError):
            create_app(runtime, **options)
