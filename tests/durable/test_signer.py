"""The standalone ``ApprovalSigner``: HMAC-SHA256 tokens, their format, verification and expiry.

The token encoding is the checklist's decision where the seed is silent: compact
sorted JSON, unpadded base64url, HMAC over the payload segment, ``issued_at`` in
epoch ms from the injected clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import stat
import time
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.durable._signer import SECRET_ENV_VAR

SECRET = "s3cret-server-side-only"


def _b64decode(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _request(**overrides: Any) -> nd.ToolApprovalRequest:
    fields: dict[str, Any] = {
        "approval_id": "approval_1",
        "tool_call_id": "toolu_1",
        "tool_name": "drop_table",
        "input": {"name": "stg_2023", "cascade": True, "n": [1, 2.5, None]},
        "agent_path": ("coder",),
    }
    fields.update(overrides)
    return nd.ToolApprovalRequest(**fields)


# --- HMAC-SHA256, injectable clock, the secret ----------------------------------------


@pytest.mark.spec("S000-45")
def test_mac_is_hmac_sha256_over_the_payload_segment(clock: Any) -> None:
    """The MAC is HMAC-SHA256(secret, payload segment), unpadded base64url."""
    token = nd.ApprovalSigner(SECRET, clock=clock).sign(_request())
    _prefix, segment, mac = token.split(".")
    expected = hmac.new(SECRET.encode(), segment.encode("ascii"), hashlib.sha256).digest()
    assert mac == _b64encode(expected)
    assert len(_b64decode(mac)) == 32
    assert "=" not in token


@pytest.mark.spec("S000-45")
def test_str_and_bytes_secrets_are_the_same_key(clock: Any) -> None:
    """A str secret is its UTF-8 bytes; another secret gives another MAC."""
    by_str = nd.ApprovalSigner("clé", clock=clock).sign(_request())
    by_bytes = nd.ApprovalSigner("clé".encode(), clock=clock).sign(_request())
    other = nd.ApprovalSigner("cle", clock=clock).sign(_request())
    assert by_str == by_bytes
    assert other.split(".")[1] == by_str.split(".")[1]
    assert other.split(".")[2] != by_str.split(".")[2]


@pytest.mark.spec("S000-45")
def test_injected_clock_sets_issued_at(clock: Any) -> None:
    """issued_at comes from the injected clock (epoch ms)."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    first = signer.verify(signer.sign(_request()))
    clock.advance(1234)
    second = signer.verify(signer.sign(_request()))
    assert first is not None and second is not None
    assert first["issued_at"] == 1_700_000_000_000
    assert second["issued_at"] == 1_700_000_001_234


@pytest.mark.spec("S000-45")
def test_clock_defaults_to_wall_time_in_ms() -> None:
    """Without a clock, issued_at is the wall clock in epoch milliseconds."""
    signer = nd.ApprovalSigner(SECRET)
    before = time.time_ns() // 1_000_000
    payload = signer.verify(signer.sign(_request()))
    after = time.time_ns() // 1_000_000
    assert payload is not None
    assert before <= payload["issued_at"] <= after


@pytest.mark.spec("S000-45")
def test_secret_from_environment(monkeypatch: pytest.MonkeyPatch, clock: Any) -> None:
    """With no secret passed, NBDURABLE_APPROVAL_SECRET is the key."""
    monkeypatch.setenv(SECRET_ENV_VAR, "from-env")
    token = nd.ApprovalSigner(clock=clock).sign(_request())
    assert nd.ApprovalSigner("from-env", clock=clock).verify(token) is not None
    assert nd.ApprovalSigner("other", clock=clock).verify(token) is None


@pytest.mark.spec("S000-45")
def test_no_secret_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """No secret anywhere, or an empty one, is refused at construction."""
    monkeypatch.delenv(SECRET_ENV_VAR, raising=False)
    with pytest.raises(nd.ConfigurationError):
        nd.ApprovalSigner()
    with pytest.raises(nd.ConfigurationError):
        nd.ApprovalSigner("")
    with pytest.raises(nd.ConfigurationError):
        nd.ApprovalSigner(b"")


@pytest.mark.spec("S000-45")
def test_secret_file_is_created_once_with_mode_0600(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clock: Any
) -> None:
    """The generated secret lives in a 0600 file and is reused."""
    monkeypatch.delenv(SECRET_ENV_VAR, raising=False)
    path = tmp_path / "store" / "approval.key"
    first = nd.ApprovalSigner.from_file(path, clock=clock)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = first.sign(_request())
    second = nd.ApprovalSigner.from_file(path, clock=clock)  # e.g. after a kernel restart
    assert second.verify(token) is not None
    assert path.read_text().strip() not in repr(second)


# --- token format ---------------------------------------------------------------------


@pytest.mark.spec("S000-46")
def test_token_is_v1_payload_mac_and_payload_is_readable_json(clock: Any) -> None:
    """A token is "v1.<payload>.<mac>"; the payload is base64url JSON anyone can decode."""
    request = _request(token="an-old-token-is-not-signed")
    token = nd.ApprovalSigner(SECRET, clock=clock).sign(request, run_id="run-42")
    prefix, segment, mac = token.split(".")
    assert prefix == "v1"
    raw = _b64decode(segment)  # no secret needed: encoded, not encrypted
    payload = json.loads(raw)
    assert payload == {
        "approval_id": "approval_1",
        "tool_call_id": "toolu_1",
        "tool_name": "drop_table",
        "input": {"name": "stg_2023", "cascade": True, "n": [1, 2.5, None]},
        "agent_path": ["coder"],
        "run_id": "run-42",
        "issued_at": clock.now(),
    }
    # checklist decision: compact JSON with sorted keys, unpadded base64url
    assert raw == json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    assert set(segment + mac) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    )


@pytest.mark.spec("S000-46")
def test_without_run_id_the_payload_has_no_run_binding(clock: Any) -> None:
    """run_id is optional; an unbound token has no run_id key."""
    token = nd.ApprovalSigner(SECRET, clock=clock).sign(_request())
    payload = json.loads(_b64decode(token.split(".")[1]))
    assert "run_id" not in payload
    assert payload["issued_at"] == clock.now()


# --- verify returns exactly what was signed -------------------------------------------


@pytest.mark.spec("S000-47")
def test_verify_returns_exactly_the_signed_payload(clock: Any) -> None:
    """A valid token verifies to the payload: approval_id, tool_name, input, ..."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    request = _request(input={"name": "stg_ü", "nested": {"k": [1, {"x": None}]}})
    token = signer.sign(request, run_id="run-9")
    clock.advance(10)
    payload = signer.verify(token)
    assert payload == json.loads(_b64decode(token.split(".")[1]))
    assert payload is not None
    assert payload["approval_id"] == request.approval_id
    assert payload["tool_name"] == request.tool_name
    assert payload["tool_call_id"] == request.tool_call_id
    assert payload["input"] == request.input
    assert payload["issued_at"] == 1_700_000_000_000
    assert payload["run_id"] == "run-9"
    assert (
        nd.ToolApprovalRequest.model_validate(
            {k: v for k, v in payload.items() if k not in ("issued_at", "run_id")}
        )
        == request
    )


# --- None for garbled, forged, expired; never raises ----------------------------------


def _garbled(token: str) -> list[object]:
    _prefix, segment, mac = token.split(".")
    return [
        "",
        "v1",
        "v1..",
        "v1.x.y",
        token + ".",
        token[:-1],
        token[1:],
        f"v2.{segment}.{mac}",
        f"{segment}.{mac}",
        f"v1.{segment}",
        f"v1.{segment}.{mac}.{mac}",
        f"v1.{segment}=.{mac}",
        f"v1.{segment}.{mac}=",
        f"v1.{segment}.{mac.upper()}",
        f"v1.{segment}.ü{mac[1:]}",
        f"v1.ü{segment[1:]}.{mac}",
        "v1.\x00.\x00",
        token.replace(".", "\n"),
        None,
        123,
        12.5,
        b"v1.abc.def",
        token.encode(),
        [token],
        {"token": token},
        object(),
    ]


@pytest.mark.spec("S000-48")
def test_garbled_tokens_verify_to_none(clock: Any) -> None:
    """Garbled tokens and non-strings give None, never an exception."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    token = signer.sign(_request())
    assert signer.verify(token) is not None
    for bad in _garbled(token):
        assert signer.verify(bad) is None, bad
        assert signer.verify(bad, max_age_ms=1000) is None, bad


@pytest.mark.spec("S000-48")
def test_forged_tokens_verify_to_none(clock: Any) -> None:
    """Wrong secret, altered payload or altered MAC all give None."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    token = signer.sign(_request(), run_id="run-42")
    _prefix, segment, mac = token.split(".")

    assert signer.verify(nd.ApprovalSigner("guess", clock=clock).sign(_request())) is None

    payload = json.loads(_b64decode(segment))
    payload["input"] = {"name": "orders"}  # the forger wants a different table
    altered = _b64encode(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
    assert signer.verify(f"v1.{altered}.{mac}") is None
    payload["run_id"] = "run-other"
    rebound = _b64encode(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
    assert signer.verify(f"v1.{rebound}.{mac}") is None

    flipped = mac[:-2] + ("A" if mac[-2] != "A" else "B") + mac[-1]
    assert signer.verify(f"v1.{segment}.{flipped}") is None


@pytest.mark.spec("S000-48")
def test_expired_token_verifies_to_none(clock: Any) -> None:
    """An expired token gives None (and verifies again without a max age)."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    token = signer.sign(_request())
    clock.advance(60_000)
    assert signer.verify(token, max_age_ms=30_000) is None
    assert signer.verify(token) is not None


@pytest.mark.spec("S000-48")
@pytest.mark.parametrize(
    "payload",
    [
        b"\xff\xfe not utf-8",
        b"not json",
        b"[1, 2, 3]",
        b'"a string"',
        b"{}",
        b'{"issued_at": "1700000000000"}',
        b'{"issued_at": 1.5}',
        b'{"issued_at": true}',
        b'{"issued_at": null}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    ],
    ids=[
        "not-utf8",
        "not-json",
        "list",
        "string",
        "no-issued-at",
        "str-issued-at",
        "float-issued-at",
        "bool-issued-at",
        "null-issued-at",
        "deep-list",
        "deep-object",
    ],
)
def test_correctly_maced_but_malformed_payloads_never_raise(payload: bytes, clock: Any) -> None:
    """Even with a valid MAC, a payload that is no token gives None, never raises."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    segment = _b64encode(payload)
    mac = _b64encode(hmac.new(SECRET.encode(), segment.encode(), hashlib.sha256).digest())
    assert signer.verify(f"v1.{segment}.{mac}") is None
    assert signer.verify(f"v1.{segment}.{mac}", max_age_ms=10) is None


# --- age >= max_age is expired; no max_age, no expiry ---------------------------------


@pytest.mark.spec("S000-49")
def test_age_equal_to_limit_is_expired(clock: Any) -> None:
    """A token whose age equals max_age_ms is expired; one ms younger is not."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    token = signer.sign(_request())
    clock.advance(59_999)
    assert signer.verify(token, max_age_ms=60_000) is not None
    clock.advance(1)
    assert signer.verify(token, max_age_ms=60_000) is None
    assert signer.verify(token, max_age_ms=60_001) is not None


@pytest.mark.spec("S000-49")
def test_without_max_age_tokens_never_expire(clock: Any) -> None:
    """Omit max_age_ms and a token signed years ago still verifies."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    token = signer.sign(_request())
    clock.advance(50 * 365 * 24 * 3600 * 1000)
    assert signer.verify(token) is not None
    assert signer.verify(token, max_age_ms=None) is not None
