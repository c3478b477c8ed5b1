"""Numbers read from a request's headers and query: any value is a 4xx, never a 5xx.

``Last-Event-ID`` once went through ``str.isdigit()`` then ``int()``: a
superscript digit (``\\xb2``, which ``isdigit()`` accepts) or more than 4,300
digits (``int()``'s limit) made the handler raise, a 500.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .harness import Server

# What an HTTP/1.1 field value may hold (RFC 9110: visible ASCII, obs-text,
# spaces and tabs inside): every byte a client can put in a header.
_FIELD_BYTES = [b for b in range(256) if b in (0x09, 0x20) or 0x21 <= b <= 0x7E or b >= 0x80]
FIELD_VALUES = st.lists(st.sampled_from(_FIELD_BYTES), min_size=1, max_size=40).map(bytes)
NUMBERISH = st.one_of(
    FIELD_VALUES,
    st.integers(min_value=-(2**70), max_value=2**70).map(lambda n: str(n).encode()),
    st.integers(min_value=4_000, max_value=6_000).map(lambda n: b"9" * n),
    st.text(st.characters(categories=["Nd", "No"]), min_size=1, max_size=8).map(
        lambda s: s.encode("utf-8")
    ),
)
_QUICK = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _status(http: httpx.Client, path: str, **options: object) -> httpx.Response:
    response = http.get(path, **options)  # type: ignore[arg-type]
    assert response.status_code < 500, (path, options, response.status_code, response.text)
    return response


def _raw(server: Server, head: bytes, body: bytes = b"") -> tuple[int | None, bytes]:
    """Send one request's bytes as given (no client checks them); its status and body.

    The status is None when the server closed the connection without an answer
    (h11 refusing a request it cannot frame answers 400 or closes).
    """
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    auth = b"Authorization: Bearer " + (server.token or "").encode() + b"\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head + b"Host: x\r\n" + auth + b"Connection: close\r\n\r\n" + body)
        answer = b""
        with contextlib.suppress(ConnectionResetError):  # closed with bytes unread: reset
            while chunk := sock.recv(65536):
                answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    if not status_line:
        return None, b""
    status = int(status_line.split()[1])
    assert status < 500, (head[:200], answer[:2000])
    return status, rest.partition(b"\r\n\r\n")[2]


def _last_event_id(server: Server, value: bytes) -> tuple[int | None, bytes]:
    return _raw(server, b"GET /runs/run-none/events HTTP/1.1\r\nLast-Event-ID: " + value + b"\r\n")


@pytest.mark.parametrize(
    "value",
    [b"\xb2", "²".encode(), b"9" * 4_301, b"1" * 5_000, "١٢".encode(), b"-1", b"1_0", b"0x1"],
)
def test_a_last_event_id_that_is_no_offset_is_a_422(server: Server, value: bytes) -> None:
    status, body = _last_event_id(server, value)
    assert status == 422, body
    error = json.loads(body)["error"]
    assert error["type"] == "ConfigurationError"
    assert len(error["message"]) < 200  # a 5,000-digit value is not echoed back in full


def test_a_last_event_id_with_leading_zeros_or_spaces_is_an_offset(server: Server) -> None:
    for value in (b"7 ", b"0007", b"0" * 50 + b"3", str(2**62).encode()):
        status, body = _last_event_id(server, value)
        assert status == 404, (value, body)  # read as an offset: then the run is unknown
    assert _last_event_id(server, str(2**62 + 1).encode())[0] == 422


@_QUICK
@given(value=NUMBERISH)
@example(value=b"\xb2")
@example(value=b"9" * 4_400)
def test_any_last_event_id_is_answered_below_500(server: Server, value: bytes) -> None:
    _last_event_id(server, value)


@_QUICK
@given(value=NUMBERISH)
@example(value="²".encode())
@example(value=b"9" * 4_400)
@pytest.mark.slow
def test_any_numeric_query_parameter_is_answered_below_500(server: Server, value: bytes) -> None:
    text = value.decode("latin-1")
    with server.client() as http:
        _status(http, "/runs/run-none/events", params={"after": text})
        _status(http, "/runs", params={"limit": text})


@_QUICK
@given(value=NUMBERISH)
@example(value=b"9" * 4_400)
@example(value="²".encode())
def test_any_content_length_is_answered_below_500(server: Server, value: bytes) -> None:
    head = b"POST /runs HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: "
    declared = re.fullmatch(rb"[ \t]*([0-9]{1,7})[ \t]*", value)
    size = int(declared.group(1)) if declared else 2
    # As many body bytes as a parsable length declares, so the server has no body
    # left to wait for; none over the limit (refused before it is read).
    body = (b"{" + b" " * (size - 2) + b"}")[:size] if size <= 1_048_576 else b""
    _raw(server, head + value + b"\r\n", body)
