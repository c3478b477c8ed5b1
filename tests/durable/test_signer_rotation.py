"""Approval key rotation: named keys, the current one signs, old tokens keep verifying.

A token carries the id of the key that signed it (``kid``) inside the signed
payload; a token from before the rotation (no ``kid``) verifies with the
unnamed or oldest key; a retired key (absent from the set) verifies nothing;
the environment variable and the 0600 key file accept a JSON key set.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest
from support.gated_janitor import gated as _gated

import nbdurable as nd
from nbdurable.durable._signer import SECRET_ENV_VAR
from nbdurable.runtime import DurableRuntime

OLD = "the secret from before the rotation"
NEW = "the new secret after rotation"


def _request() -> nd.ToolApprovalRequest:
    return nd.ToolApprovalRequest(
        approval_id="approval_1", tool_call_id="toolu_1", tool_name="drop_table"
    )


def _payload(token: str) -> dict[str, Any]:
    segment = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _forge(payload: dict[str, Any], key: str) -> str:
    segment = _b64(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
    mac = hmac.new(key.encode(), segment.encode("ascii"), hashlib.sha256).digest()
    return f"v1.{segment}.{_b64(mac)}"


def test_old_tokens_without_a_key_id_verify_after_rotation(clock: Any) -> None:
    before = nd.ApprovalSigner(OLD, clock=clock).sign(_request(), run_id="r1")
    assert "kid" not in _payload(before)  # the one-secret form writes what it always wrote
    rotated = nd.ApprovalSigner(keys={"k2": NEW, "k1": OLD}, current="k2", clock=clock)
    assert rotated.verify(before) is not None
    # only the oldest key stands in for the unnamed one
    other = nd.ApprovalSigner(keys={"k2": OLD, "k1": NEW}, current="k2", clock=clock)
    assert other.verify(before) is None


def test_new_tokens_carry_the_current_key_id_and_verify_while_it_is_not_retired(
    clock: Any,
) -> None:
    during = nd.ApprovalSigner(keys={"k2": NEW, "k1": OLD}, current="k1", clock=clock)
    after = nd.ApprovalSigner(keys={"k2": NEW, "k1": OLD}, current="k2", clock=clock)
    retired = nd.ApprovalSigner(keys={"k2": NEW}, clock=clock)
    by_k1, by_k2 = during.sign(_request()), after.sign(_request())
    assert _payload(by_k1)["kid"] == "k1" and _payload(by_k2)["kid"] == "k2"
    for signer in (during, after):
        assert signer.verify(by_k1) is not None and signer.verify(by_k2) is not None
    assert retired.verify(by_k2) is not None
    assert retired.verify(by_k1) is None  # k1 is retired: its tokens are refused
    # a signer that never heard of named keys refuses them too
    assert nd.ApprovalSigner(OLD, clock=clock).verify(by_k1) is None
    # sign_payload (standing approvals use it) carries the key id as well
    grant = after.sign_payload({"kind": "grant", "tool": "drop_table"})
    assert (after.verify(grant) or {}).get("kid") == "k2"
    assert after.verify(grant, max_age_ms=1) is not None
    clock.advance(5)
    assert after.verify(grant, max_age_ms=1) is None


def test_a_forged_key_id_is_refused(clock: Any) -> None:
    signer = nd.ApprovalSigner(keys={"k2": NEW, "k1": OLD}, clock=clock)
    genuine = _payload(signer.sign(_request()))
    # signed with k1 but claiming k2 (or an unknown key, or a non-string one)
    for kid in ("k2", "k9", 2, None):
        assert signer.verify(_forge({**genuine, "kid": kid}, OLD)) is None
    assert signer.verify(_forge({**genuine, "kid": "k1"}, OLD)) is not None
    # a kid-less token signed with the newer key is not an old token
    legacy = {k: v for k, v in genuine.items() if k != "kid"}
    assert signer.verify(_forge(legacy, NEW)) is None
    assert signer.verify(_forge(legacy, OLD)) is not None
    assert signer.verify(_forge({**genuine, "kid": "k2"}, "some other secret")) is None


def test_repr_names_the_keys_never_the_secrets(clock: Any) -> None:
    signer = nd.ApprovalSigner(keys={"k2": NEW, "k1": OLD}, current="k1", clock=clock)
    text = repr(signer)
    assert "k2" in text and "k1" in text and NEW not in text and OLD not in text
    assert signer.key_ids == ("k2", "k1") and signer.current_key_id == "k1"
    assert repr(nd.ApprovalSigner(OLD)) == "ApprovalSigner(secret=<hidden>)"
    assert nd.ApprovalSigner(OLD).key_ids == (None,)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keys": {}}, "at least one key"),
        ({"keys": {"k1": ""}}, "must not be empty"),
        ({"keys": {"k 1": OLD}}, "is not valid"),
        ({"keys": {"k1": OLD}, "current": "k2"}, "not in the key set"),
        ({"keys": {"k1": OLD}, "secret": OLD}, "not both"),
        ({"current": "k1", "secret": OLD}, "needs keys"),
        ({"keys": {"k1": 5}}, "must be a string"),
    ],
)
def test_bad_key_sets_are_configuration_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(nd.ConfigurationError, match=message):
        nd.ApprovalSigner(**kwargs)


KEY_SET = json.dumps({"current": "k2", "keys": {"k2": NEW, "k1": OLD}})


def test_the_environment_variable_accepts_a_key_set(
    clock: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    before = nd.ApprovalSigner(OLD, clock=clock).sign(_request())
    monkeypatch.setenv(SECRET_ENV_VAR, KEY_SET)
    for signer in (
        nd.ApprovalSigner(clock=clock),
        nd.ApprovalSigner.from_file(tmp_path / "unused.key", clock=clock),
    ):
        assert signer.current_key_id == "k2"
        assert signer.verify(before) is not None
        assert _payload(signer.sign(_request()))["kid"] == "k2"
    assert not (tmp_path / "unused.key").exists()
    # without "current" the first key signs
    monkeypatch.setenv(SECRET_ENV_VAR, json.dumps({"keys": {"k3": "x", "k2": NEW}}))
    assert nd.ApprovalSigner().current_key_id == "k3"


def test_the_key_file_accepts_a_key_set_and_a_single_secret_file_keeps_working(
    clock: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(SECRET_ENV_VAR, raising=False)
    path = tmp_path / "approval.key"
    first = nd.ApprovalSigner.from_file(path, clock=clock)  # creates one secret
    before = first.sign(_request())
    secret = path.read_text().strip()
    assert first.current_key_id is None
    path.write_text(json.dumps({"current": "k1", "keys": {"k2": NEW, "k1": secret}}, indent=2))
    during = nd.ApprovalSigner.from_file(path, clock=clock)
    assert during.verify(before) is not None
    assert _payload(during.sign(_request()))["kid"] == "k1"
    path.write_text(json.dumps({"keys": {"k2": NEW}}) + "\n")
    assert nd.ApprovalSigner.from_file(path, clock=clock).verify(before) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"current": "k2", "keys": {"k2": "a"', "must be a JSON object"),
        ('{"keys": {"k1": "a", "k1": "b"}}', "ambiguous"),
        ('{"keys": {"k1": "a"}, "keys": {"k2": "b"}}', "ambiguous"),
        ('{"current": "k1"}', "'keys' \\(required\\)"),
        ('{"keys": {"k1": "a"}, "retired": ["k0"]}', "nothing else"),
        ('{"keys": ["a", "b"]}', "must be an object"),
        ('{"keys": {"k1": "a"}, "current": 1}', "must be a key id"),
        ('{"keys": {"k1": "a"}, "current": "k2"}', "not in the key set"),
        ('{"keys": {"k1": {"secret": "a"}}}', "must be a string"),
        ("   ", "must not be empty"),
    ],
)
def test_garbled_key_set_text_is_a_configuration_error(
    text: str, message: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(SECRET_ENV_VAR, text if text.strip() else "x")
    if text.strip():
        with pytest.raises(nd.ConfigurationError, match=message) as raised:
            nd.ApprovalSigner()
        assert SECRET_ENV_VAR in str(raised.value)
    monkeypatch.delenv(SECRET_ENV_VAR)
    path = tmp_path / "approval.key"
    path.write_text(text)
    with pytest.raises(nd.ConfigurationError, match=message) as raised:
        nd.ApprovalSigner.from_file(path)
    assert "approval key file" in str(raised.value)
    # the message never repeats a secret
    assert '"a"' not in str(raised.value) and "'a'" not in str(raised.value)


async def test_a_run_suspended_with_an_old_token_resumes_after_rotation(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    ran: list[str] = []
    store = nd.open_store(url)
    try:
        old = nd.ApprovalSigner(OLD)
        async with await DurableRuntime.open(
            store=store, agents=[_gated(ran)], approval_signer=old
        ) as rt:
            run = await rt.submit("janitor", "Clean up.")
            await run.wait("waiting_approval")
            [request] = await run.pending_approvals()
            run_id = run.run_id
        assert request.token is not None and "kid" not in _payload(request.token)
    finally:
        store.close()
    store = nd.open_store(url)
    try:
        rotated = nd.ApprovalSigner(keys={"k2": NEW, "k1": OLD}, current="k2")
        async with await DurableRuntime.open(
            store=store, agents=[_gated(ran)], approval_signer=rotated
        ) as rt:
            run = await rt.get_run(run_id)
            await run.approve(request.approval_id, token=request.token)
            assert (await run.result()).text == "done"
    finally:
        store.close()
    assert ran == ["stg"]


async def test_a_token_of_a_retired_key_is_a_denial(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    ran: list[str] = []
    store = nd.open_store(url)
    try:
        during = nd.ApprovalSigner(keys={"k2": NEW, "k1": OLD}, current="k1")
        async with await DurableRuntime.open(
            store=store, agents=[_gated(ran)], approval_signer=during
        ) as rt:
            run = await rt.submit("janitor", "Clean up.")
            await run.wait("waiting_approval")
            [request] = await run.pending_approvals()
        retired = nd.ApprovalSigner(keys={"k2": NEW})
        async with await DurableRuntime.open(
            store=store, agents=[_gated(ran)], approval_signer=retired
        ) as rt:
            run = await rt.get_run(run.run_id)
            with pytest.raises(nd.ConfigurationError, match="retired"):
                await run.approve(request.approval_id, token=request.token)
            assert run.record().decided == {}  # nothing recorded: it can only be denied
            await run.deny(request.approval_id, reason="k1 was retired")
            await run.result()
    finally:
        store.close()
    assert ran == []  # the tool never ran


def test_a_single_secret_in_the_environment_is_taken_as_it_is(
    clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a secret with surrounding spaces (or '=' padding) was the key before key sets existed
    for secret in (" padded secret ", "c2VjcmV0==", "k1=abc,k2=def"):
        monkeypatch.setenv(SECRET_ENV_VAR, secret)
        token = nd.ApprovalSigner(secret, clock=clock).sign(_request())
        assert nd.ApprovalSigner(clock=clock).verify(token) is not None
        assert nd.ApprovalSigner.from_file("/nonexistent/approval.key").verify(token) is not None
