"""Property tests (hypothesis): the checkpoint codec and the approval tokens.

- ``serialize_checkpoint``/``deserialize_checkpoint`` round-trip any
  checkpoint exactly: text, image bytes and URLs, tool calls with any JSON
  arguments, tool results with ``is_error``, approval requests with tokens.
- ``ApprovalSigner.verify`` gives back exactly what was signed,
  and None (never an exception) for mutated, truncated, other-key or expired
  tokens and for arbitrary text, bytes and objects.
- At loop level, no mutated, truncated, re-signed-with-another-key,
  expired, cross-run or arbitrary token ever approves: ``resume_from_checkpoint``
  denies the call with the exact reason, and a genuine token does approve.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nbdurable as nd
from nbdurable.durable._signer import TOKEN_DENIAL_REASON
from nbdurable.messages import ApprovalRequestPart

B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
LOOP_SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@dataclass
class Clock:
    """A settable clock in epoch milliseconds."""

    t: int = 1_700_000_000_000

    def now(self) -> int:
        return self.t


# --- strategies -----------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
ids = st.text(max_size=12)
media_types = st.none() | st.sampled_from(["image/png", "image/jpeg", "image/webp"])

text_parts = st.builds(nd.TextPart, text=st.text())
image_parts = st.builds(nd.ImagePart, data=st.binary(max_size=64), media_type=media_types) | (
    st.builds(nd.ImagePart, url=st.text(), media_type=media_types)
)
tool_call_parts = st.builds(nd.ToolCallPart, tool_call_id=ids, tool_name=ids, args=json_objects)
tool_result_parts = st.builds(
    nd.ToolResultPart,
    tool_call_id=ids,
    tool_name=ids,
    result=json_values,
    is_error=st.booleans(),
)
approval_requests = st.builds(
    nd.ToolApprovalRequest,
    approval_id=ids,
    tool_call_id=ids,
    tool_name=ids,
    input=json_objects,
    agent_path=st.lists(ids, max_size=3).map(tuple),
    token=st.none() | st.text(alphabet=B64URL + ".", max_size=40),
)
approval_responses = st.builds(
    nd.ToolApprovalResponse,
    approval_id=ids,
    approved=st.booleans(),
    reason=st.none() | st.text(),
    token=st.none() | st.text(max_size=20),
)
approval_parts = st.builds(
    ApprovalRequestPart, request=approval_requests, verdict=st.none() | approval_responses
)
parts = text_parts | image_parts | tool_call_parts | tool_result_parts | approval_parts
messages = st.builds(
    nd.Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=st.lists(parts, max_size=4).map(tuple),
    metadata=st.none() | json_objects,
)
usages = st.builds(
    nd.Usage,
    input_tokens=st.integers(0, 10**9),
    output_tokens=st.integers(0, 10**9),
    total_tokens=st.integers(0, 2 * 10**9),
    cached_input_tokens=st.none() | st.integers(0, 10**9),
    cost=st.none() | st.floats(min_value=0, allow_nan=False, allow_infinity=False),
)
checkpoints = st.builds(
    nd.AgentCheckpoint,
    run_id=st.text(max_size=20),
    step_index=st.integers(0, 10**6),
    status=st.sampled_from(["running", "suspended", "completed"]),
    messages=st.lists(messages, max_size=4).map(tuple),
    usage=usages,
    pending_approvals=st.lists(approval_requests, max_size=3).map(tuple),
    agent_path=st.lists(ids, max_size=3).map(tuple),
    created_at=st.integers(0, 2**53),
    finish_reason=st.none() | st.text(max_size=12),
)


# --- the codec ------------------------------------------------------------------------


def _image_data(checkpoint: nd.AgentCheckpoint) -> list[Any]:
    return [
        part.data
        for message in checkpoint.messages
        for part in message.content
        if isinstance(part, nd.ImagePart) and part.data is not None
    ]


@pytest.mark.spec("S000-11")
@settings(max_examples=60, deadline=None)
@given(checkpoint=checkpoints)
@pytest.mark.slow
def test_codec_round_trips_any_checkpoint_exactly(
    checkpoint: nd.AgentCheckpoint,
) -> None:
    """deserialize(serialize(c)) == c for any checkpoint; bytes come back as bytes."""
    text = nd.serialize_checkpoint(checkpoint)
    assert isinstance(text, str)
    json.loads(text)  # plain JSON text

    back = nd.deserialize_checkpoint(text)
    assert back == checkpoint
    assert back.step_id == f"{checkpoint.run_id}#{checkpoint.step_index}"
    original, restored = _image_data(checkpoint), _image_data(back)
    assert restored == original
    assert all(type(data) is bytes for data in restored)
    # the encoding is stable: a second trip writes the very same text
    assert nd.serialize_checkpoint(back) == text
    assert nd.deserialize_checkpoint(text.encode("utf-8")) == checkpoint


@pytest.mark.spec("S000-11")
@settings(max_examples=50, deadline=None)
@given(args=json_objects, result=json_values, is_error=st.booleans(), data=st.binary())
def test_codec_keeps_tool_args_results_and_image_bytes(
    args: dict[str, Any], result: Any, is_error: bool, data: bytes
) -> None:
    """tool-call args, tool results (with is_error) and image bytes survive exactly."""
    history = (
        nd.user(["Look at this.", data]),
        nd.assistant([nd.ToolCallPart(tool_call_id="c1", tool_name="t", args=args)]),
        nd.tool_message(
            [nd.ToolResultPart(tool_call_id="c1", tool_name="t", result=result, is_error=is_error)]
        ),
    )
    checkpoint = nd.AgentCheckpoint(
        run_id="run", step_index=0, status="running", messages=history, created_at=1
    )
    back = nd.deserialize_checkpoint(nd.serialize_checkpoint(checkpoint))
    image = back.messages[0].content[1]
    assert isinstance(image, nd.ImagePart) and image.data == data and type(image.data) is bytes
    assert back.messages[1].tool_calls[0].args == args
    restored = back.messages[2].tool_results[0]
    assert restored.result == result
    assert restored.is_error is is_error
    assert back == checkpoint


# --- the signer on its own ------------------------------------------------------------

secrets_ = st.text(min_size=1, max_size=16) | st.binary(min_size=1, max_size=16)
run_ids = st.none() | st.text(max_size=16)


def _key(secret: str | bytes) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else secret


@pytest.mark.spec("S000-47")
@settings(max_examples=100, deadline=None)
@given(request=approval_requests, run_id=run_ids, secret=secrets_, issued=st.integers(0, 2**50))
def test_verify_returns_exactly_what_was_signed(
    request: nd.ToolApprovalRequest, run_id: str | None, secret: str | bytes, issued: int
) -> None:
    """The payload is the request (without its token), run_id and issued_at."""
    signer = nd.ApprovalSigner(secret, clock=Clock(issued))
    payload = signer.verify(signer.sign(request, run_id=run_id))
    expected = request.model_dump(mode="json", exclude={"token"})
    if run_id is not None:
        expected["run_id"] = run_id
    expected["issued_at"] = issued
    assert payload == expected


@pytest.mark.spec("S000-48")
@settings(max_examples=100, deadline=None)
@given(
    request=approval_requests,
    run_id=run_ids,
    secret=secrets_,
    data=st.data(),
)
def test_mutated_or_truncated_tokens_never_verify(
    request: nd.ToolApprovalRequest, run_id: str | None, secret: str | bytes, data: st.DataObject
) -> None:
    """Changing any one character of a token, or cutting it short, gives None."""
    signer = nd.ApprovalSigner(secret, clock=Clock())
    token = signer.sign(request, run_id=run_id)

    index = data.draw(st.integers(0, len(token) - 1), label="index")
    replacement = data.draw(
        st.sampled_from(B64URL + ".=") | st.characters(), label="replacement"
    ).replace(token[index], "")
    if replacement:
        mutated = token[:index] + replacement + token[index + 1 :]
        assert signer.verify(mutated) is None
    cut = data.draw(st.integers(0, len(token) - 1), label="cut")
    assert signer.verify(token[:cut]) is None
    assert signer.verify(token[cut:] if cut else token + "x") is None


@pytest.mark.spec("S000-48")
@settings(max_examples=100, deadline=None)
@given(request=approval_requests, run_id=run_ids, secret=secrets_, other=secrets_)
def test_tokens_signed_with_another_key_never_verify(
    request: nd.ToolApprovalRequest, run_id: str | None, secret: str | bytes, other: str | bytes
) -> None:
    """A token from a signer with a different key gives None."""
    if _key(secret) == _key(other):
        return
    token = nd.ApprovalSigner(other, clock=Clock()).sign(request, run_id=run_id)
    assert nd.ApprovalSigner(secret, clock=Clock()).verify(token) is None


@pytest.mark.spec("S000-49")
@settings(max_examples=100, deadline=None)
@given(
    request=approval_requests,
    max_age=st.integers(1, 10**12),
    age=st.integers(0, 10**12),
)
def test_expiry_is_age_at_least_max_age(
    request: nd.ToolApprovalRequest, max_age: int, age: int
) -> None:
    """Verify gives None exactly when age >= max_age_ms; no max age, no expiry."""
    clock = Clock()
    signer = nd.ApprovalSigner("k", clock=clock)
    token = signer.sign(request)
    clock.t += age
    payload = signer.verify(token, max_age_ms=max_age)
    assert (payload is None) == (age >= max_age)
    assert signer.verify(token) is not None


anything = st.one_of(
    st.text(),
    st.binary(),
    st.from_regex(r"\Av1\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\Z"),
    st.from_regex(r"\A[A-Za-z0-9_=.-]*\Z"),
    st.integers(),
    st.floats(),
    st.none(),
    st.booleans(),
    st.lists(st.text(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    st.builds(object),
)


@pytest.mark.spec("S000-48")
@settings(max_examples=100, deadline=None)
@given(token=anything, max_age=st.none() | st.integers(-5, 10**9))
def test_verify_never_raises_on_arbitrary_input(token: Any, max_age: int | None) -> None:
    """Arbitrary text, bytes and objects verify to None, never an exception."""
    assert nd.ApprovalSigner("k", clock=Clock()).verify(token, max_age_ms=max_age) is None


@pytest.mark.spec("S000-48")
@settings(max_examples=100, deadline=None)
@given(payload=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_maced_arbitrary_payloads_never_raise(payload: bytes) -> None:
    """Even a correctly MACed segment with any content never makes verify raise;
    it gives None or a dict whose issued_at is an int."""
    import base64
    import hashlib
    import hmac

    segment = base64.urlsafe_b64encode(payload).rstrip(b"=").decode()
    mac = hmac.new(b"k", segment.encode(), hashlib.sha256).digest()
    token = f"v1.{segment}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    result = nd.ApprovalSigner("k", clock=Clock()).verify(token, max_age_ms=10)
    assert result is None or (
        isinstance(result, dict)
        and isinstance(result["issued_at"], int)
        and not isinstance(result["issued_at"], bool)
    )


# --- at loop level no bad token approves ----------------------------------------------

SECRET = "loop-secret"


def _scenario_tools() -> tuple[nd.Tool, list[str]]:
    ran: list[str] = []

    @nd.tool(needs_approval=True)
    def drop_table(name: str) -> str:
        """Drop a warehouse table."""
        ran.append(name)
        return f"dropped {name}"

    return drop_table, ran


def _scenario_model(table: str) -> nd.ScriptedModel:
    return nd.ScriptedModel([nd.Turn.call("drop_table", name=table), "done"])


async def _suspend(
    run_id: str, table: str, clock: Clock
) -> tuple[nd.InMemorySessionStore, nd.ToolApprovalRequest, nd.Deps]:
    counter = itertools.count(1)
    deps = nd.Deps(clock=clock, generate_id=lambda: f"id{next(counter)}")
    store = nd.InMemorySessionStore()
    tool, ran = _scenario_tools()
    first = await nd.generate_text(
        model=_scenario_model(table),
        messages="Clean up.",
        tools=[tool],
        session=nd.DurableSession(store, run_id=run_id),
        approval_signer=nd.ApprovalSigner(SECRET, clock=clock),
        deps=deps,
    )
    assert first.status == "suspended" and ran == []
    return store, first.pending_approvals[0], deps


async def _resume(
    store: nd.InMemorySessionStore,
    run_id: str,
    table: str,
    clock: Clock,
    deps: nd.Deps,
    response: nd.ToolApprovalResponse,
    max_age_ms: int | None,
) -> tuple[nd.GenerateTextResult, list[str]]:
    tool, ran = _scenario_tools()
    result = await nd.resume_from_checkpoint(
        store,
        run_id,
        model=_scenario_model(table),
        tools=[tool],
        approval_signer=nd.ApprovalSigner(SECRET, clock=clock),
        approval_max_age_ms=max_age_ms,
        approval_responses=[response],
        deps=deps,
    )
    return result, ran


def _bad_token(
    kind: str, request: nd.ToolApprovalRequest, run_id: str, data: st.DataObject
) -> str | None:
    token = request.token
    assert token is not None
    unsigned = request.model_copy(update={"token": None})
    if kind == "mutated":
        index = data.draw(st.integers(0, len(token) - 1), label="index")
        char = data.draw(st.sampled_from(B64URL + ".").filter(lambda c: c != token[index]))
        return token[:index] + char + token[index + 1 :]
    if kind == "truncated":
        return token[: data.draw(st.integers(0, len(token) - 1), label="cut")]
    if kind == "other_key":
        other = data.draw(st.text(min_size=1, max_size=12).filter(lambda s: s != SECRET))
        return nd.ApprovalSigner(other, clock=Clock(request_issued_at(token))).sign(
            unsigned, run_id=run_id
        )
    if kind == "cross_run":
        other_run = data.draw(st.text(max_size=12).filter(lambda r: r != run_id), label="run")
        signer = nd.ApprovalSigner(SECRET, clock=Clock(request_issued_at(token)))
        return signer.sign(unsigned, run_id=other_run)
    if kind == "garbage":
        return data.draw(st.none() | st.text(max_size=80), label="garbage")
    raise AssertionError(kind)


def request_issued_at(token: str) -> int:
    import base64

    segment = token.split(".")[1]
    return int(
        json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))["issued_at"]
    )


@pytest.mark.spec("S000-55", "S000-56", "S000-57", "S000-58", "S000-59")
@LOOP_SETTINGS
@given(
    kind=st.sampled_from(["mutated", "truncated", "other_key", "cross_run", "expired", "garbage"]),
    run_id=st.text(min_size=1, max_size=12),
    table=st.text(max_size=12),
    data=st.data(),
)
def test_no_bad_token_ever_approves_on_resume(
    kind: str, run_id: str, table: str, data: st.DataObject
) -> None:
    """A mutated, truncated, other-key, cross-run, expired or arbitrary
    token never approves: the call is denied with the exact reason and the loop completes."""

    async def scenario() -> None:
        clock = Clock()
        store, request, deps = await _suspend(run_id, table, clock)
        max_age_ms: int | None = None
        if kind == "expired":
            max_age_ms = data.draw(st.integers(1, 10**10), label="max_age")
            clock.t += max_age_ms + data.draw(st.integers(0, 10**6), label="extra")
            token = request.token
        else:
            if data.draw(st.booleans(), label="with_max_age"):
                max_age_ms = 10**12  # a generous limit must not rescue a bad token
            token = _bad_token(kind, request, run_id, data)
        response = nd.ToolApprovalResponse(
            approval_id=request.approval_id, approved=True, token=token
        )
        result, ran = await _resume(store, run_id, table, clock, deps, response, max_age_ms)

        assert ran == []
        assert result.status == "completed"
        [denied] = [r for m in result.messages if m.role == "tool" for r in m.tool_results]
        assert denied.is_error is True
        assert denied.result == "Approval token missing, invalid, expired, or bound to another run."
        assert denied.result == TOKEN_DENIAL_REASON

    asyncio.run(scenario())


@pytest.mark.spec("S000-55", "S000-56", "S000-57", "S000-58")
@settings(max_examples=25, deadline=None)
@given(
    run_id=st.text(min_size=1, max_size=12),
    table=st.text(max_size=12),
    max_age=st.none() | st.integers(2, 10**10),
    data=st.data(),
)
def test_genuine_token_within_age_always_approves(
    run_id: str, table: str, max_age: int | None, data: st.DataObject
) -> None:
    """The control: the genuine, unexpired token approves, so denials above are real."""

    async def scenario() -> None:
        clock = Clock()
        store, request, deps = await _suspend(run_id, table, clock)
        if max_age is not None:
            clock.t += data.draw(st.integers(0, max_age - 1), label="age")
        response = nd.ToolApprovalResponse(
            approval_id=request.approval_id, approved=True, token=request.token
        )
        result, ran = await _resume(store, run_id, table, clock, deps, response, max_age)
        assert ran == [table]
        assert result.text == "done"

    asyncio.run(scenario())
