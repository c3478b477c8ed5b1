"""Signed approvals inside the loops: requests carry tokens, verdicts are checked.

Every client-mode request carries a token when the call has a signer, and an
approval counts only when its token verifies, names the call, is young enough and
is bound to the run. Checklist decisions that win over the seed are tested too:
the token pins tool_name and input, and a token settles its call once. The
documented non-goal: the token is a bearer credential that names no user.
"""

from __future__ import annotations

import base64
import inspect
import itertools
import json
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.durable._signer import TOKEN_DENIAL_REASON

SECRET = "s3cret-server-side-only"


# --- helpers ----------------------------------------------------------------------


def _b64decode(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _fresh_deps(clock: Any) -> nd.Deps:
    counter = itertools.count(1)
    return nd.Deps(clock=clock, generate_id=lambda: f"id{next(counter)}")


class Warehouse:
    """A gated tool that records every table it really dropped, and a scripted model."""

    def __init__(self) -> None:
        self.dropped: list[str] = []

        @nd.tool(needs_approval=True)
        def drop_table(name: str) -> str:
            """Drop a warehouse table."""
            self.dropped.append(name)
            return f"dropped {name}"

        self.tool = drop_table

    def model(self, *tables: str, keep_requests: int | None = 0) -> nd.ScriptedModel:
        """One step calling drop_table once per table (in parallel), then a report."""
        calls = [("drop_table", {"name": t}) for t in tables or ("stg_2023",)]
        return nd.ScriptedModel([nd.Turn(tool_calls=calls), _report], keep_requests=keep_requests)


def _report(request: nd.ModelRequest) -> str:
    """Final turn: report every tool result of the last tool message."""
    message = next(m for m in reversed(request.messages) if m.role == "tool")
    return " | ".join(f"{'ERROR' if r.is_error else 'OK'} {r.result}" for r in message.tool_results)


def _results(result: nd.GenerateTextResult) -> list[nd.ToolResultPart]:
    """Tool results the run recorded, in order."""
    return [r for m in result.messages if m.role == "tool" for r in m.tool_results]


def _approve(
    request: nd.ToolApprovalRequest, token: str | None = "echo"
) -> nd.ToolApprovalResponse:
    return nd.ToolApprovalResponse(
        approval_id=request.approval_id,
        approved=True,
        token=request.token if token == "echo" else token,
    )


# Entry points that settle verdicts. "Durable" ones continue run-42 from
# the store; "plain" ones pass the suspended history back without a session.
SETTLERS = [
    "resume_from_checkpoint",
    "resume_stream_from_checkpoint",
    "generate_text+session",
    "stream_chat+session",
    "generate_text",
    "stream_chat",
]


async def _first_leg(
    kind: str,
    warehouse: Warehouse,
    store: nd.InMemorySessionStore,
    deps: nd.Deps,
    signer: nd.ApprovalSigner | None,
    *,
    run_id: str = "run-42",
    tables: tuple[str, ...] = ("stg_2023",),
) -> nd.GenerateTextResult:
    durable = kind in SETTLERS[:4]
    result = await nd.generate_text(
        model=warehouse.model(*tables),
        messages="Clean up stale staging tables.",
        tools=[warehouse.tool],
        session=nd.DurableSession(store, run_id=run_id) if durable else None,
        approval_signer=signer,
        deps=deps,
    )
    assert result.status == "suspended"
    assert warehouse.dropped == []
    return result


async def _settle(
    kind: str,
    first: nd.GenerateTextResult,
    warehouse: Warehouse,
    store: nd.InMemorySessionStore,
    deps: nd.Deps,
    signer: nd.ApprovalSigner | None,
    responses: list[nd.ToolApprovalResponse],
    *,
    run_id: str = "run-42",
    max_age_ms: int | None = None,
    tables: tuple[str, ...] = ("stg_2023",),
) -> nd.GenerateTextResult:
    options: dict[str, Any] = {
        "model": warehouse.model(*tables),
        "tools": [warehouse.tool],
        "approval_signer": signer,
        "approval_responses": responses,
        "deps": deps,
    }
    if max_age_ms is not None:
        options["approval_max_age_ms"] = max_age_ms
    if kind == "resume_from_checkpoint":
        return await nd.resume_from_checkpoint(store, run_id, **options)
    if kind == "resume_stream_from_checkpoint":
        return await nd.resume_stream_from_checkpoint(store, run_id, **options).result()
    session = nd.DurableSession(store, run_id=run_id) if kind.endswith("+session") else None
    if kind.startswith("generate_text"):
        return await nd.generate_text(messages=first.messages, session=session, **options)
    return await nd.stream_chat(messages=first.messages, session=session, **options).result()


# --- call options; approval_max_age_ms defaults to None -------------------------------


@pytest.mark.spec("S000-50")
@pytest.mark.parametrize("kind", SETTLERS)
async def test_options_on_every_entry_point_and_no_default_age_limit(
    kind: str, store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """Every loop entry point takes approval_signer; no max age unless asked.

    A token approved ten years after it was signed still counts when
    approval_max_age_ms is left at its default; with a limit it is refused.
    """
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    first = await _first_leg(kind, warehouse, store, deps, signer)
    request = first.pending_approvals[0]
    clock.advance(10 * 365 * 24 * 3600 * 1000)

    done = await _settle(kind, first, warehouse, store, deps, signer, [_approve(request)])
    assert warehouse.dropped == ["stg_2023"]
    assert done.text == "OK dropped stg_2023"


@pytest.mark.spec("S000-50")
@pytest.mark.parametrize("kind", ["stream_chat+session", "stream_chat"])
async def test_stream_chat_takes_approval_signer_and_signs(
    kind: str, store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """stream_chat takes approval_signer (and signs on the suspend side)."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    stream = nd.stream_chat(
        model=warehouse.model(),
        messages="go",
        tools=[warehouse.tool],
        session=nd.DurableSession(store, run_id="run-42") if "+session" in kind else None,
        approval_signer=signer,
        approval_max_age_ms=1000,
        deps=deps,
    )
    result = await stream.result()
    assert result.status == "suspended"
    assert signer.verify(result.pending_approvals[0].token) is not None


@pytest.mark.spec("S000-50")
def test_option_defaults_are_none() -> None:
    """approval_signer and approval_max_age_ms default to None on all four calls."""
    for func in (
        nd.generate_text,
        nd.stream_chat,
        nd.resume_from_checkpoint,
        nd.resume_stream_from_checkpoint,
    ):
        params = inspect.signature(func).parameters
        assert params["approval_signer"].default is None, func.__name__
        assert params["approval_max_age_ms"].default is None, func.__name__


# --- every request carries a token; durable tokens bind run_id ------------------------


@pytest.mark.spec("S000-51")
async def test_token_on_stream_part_result_and_checkpoint(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """The token is on the stream part, in pending_approvals and in the checkpoint."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    stream = nd.stream_chat(
        model=warehouse.model("stg_2023", "stg_2024"),
        messages="go",
        tools=[warehouse.tool],
        session=nd.DurableSession(store, run_id="run-42"),
        approval_signer=signer,
        deps=deps,
    )
    parts = [p async for p in stream.full_stream]
    result = await stream.result()

    streamed = [p.request for p in parts if p.type == "tool-approval-request"]
    checkpoint = store.load("run-42")
    assert checkpoint is not None
    assert len(result.pending_approvals) == 2
    assert streamed == list(result.pending_approvals)
    assert checkpoint.pending_approvals == result.pending_approvals
    for request in result.pending_approvals:
        assert request.token is not None
        payload = signer.verify(request.token)
        assert payload is not None
        assert payload["approval_id"] == request.approval_id
        assert payload["tool_call_id"] == request.tool_call_id
        assert payload["input"] == request.input
    # the token survives the codec with the request it signs (a process restart)
    back = nd.deserialize_checkpoint(nd.serialize_checkpoint(checkpoint))
    assert [r.token for r in back.pending_approvals] == [r.token for r in result.pending_approvals]


@pytest.mark.spec("S000-51")
async def test_without_signer_requests_carry_no_token(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """Tokens come from the signer: without one, requests are unsigned."""
    warehouse = Warehouse()
    first = await _first_leg("resume_from_checkpoint", warehouse, store, deps, None)
    assert first.pending_approvals[0].token is None
    checkpoint = store.load("run-42")
    assert checkpoint is not None and checkpoint.pending_approvals[0].token is None


@pytest.mark.spec("S000-52")
async def test_durable_token_binds_run_id_plain_token_does_not(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """A durable call's token carries the session run_id; without session, none."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    durable = await _first_leg("resume_from_checkpoint", Warehouse(), store, deps, signer)
    plain = await _first_leg("generate_text", Warehouse(), store, deps, signer)

    bound = signer.verify(durable.pending_approvals[0].token)
    unbound = signer.verify(plain.pending_approvals[0].token)
    assert bound is not None and bound["run_id"] == "run-42"
    assert unbound is not None and "run_id" not in unbound


@pytest.mark.spec("S000-52")
async def test_generated_run_id_is_bound(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """A generated run_id (no run_id on the session) is the one bound."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    result = await nd.generate_text(
        model=warehouse.model(),
        messages="go",
        tools=[warehouse.tool],
        session=nd.DurableSession(store),
        approval_signer=signer,
        deps=deps,
    )
    payload = signer.verify(result.pending_approvals[0].token)
    assert result.run_id is not None
    assert payload is not None and payload["run_id"] == result.run_id


# --- a raising signer is logged; requests go out unsigned -----------------------------


class BrokenSigner(nd.ApprovalSigner):
    """A signer whose signing backend is down (verification still works)."""

    def sign(self, request: nd.ToolApprovalRequest, run_id: str | None = None) -> str:
        raise RuntimeError("hsm offline")


@pytest.mark.spec("S000-53")
async def test_raising_signer_is_logged_and_requests_go_out_unsigned(
    store: nd.InMemorySessionStore, deps: nd.Deps, logger: Any, clock: Any
) -> None:
    """The error is logged, requests carry no token, the run still suspends."""
    warehouse = Warehouse()
    stream = nd.stream_chat(
        model=warehouse.model(),
        messages="go",
        tools=[warehouse.tool],
        session=nd.DurableSession(store, run_id="run-42"),
        approval_signer=BrokenSigner(SECRET, clock=clock),
        deps=deps,
    )
    parts = [p async for p in stream.full_stream]
    result = await stream.result()

    assert result.status == "suspended"
    [request] = result.pending_approvals
    assert request.token is None
    assert [p.request.token for p in parts if p.type == "tool-approval-request"] == [None]
    checkpoint = store.load("run-42")
    assert checkpoint is not None and checkpoint.pending_approvals[0].token is None
    assert len(logger.errors) == 1
    assert "hsm offline" in logger.errors[0]
    assert request.approval_id in logger.errors[0]


@pytest.mark.spec("S000-53")
@pytest.mark.parametrize("settle_with", ["working", "broken"])
async def test_approving_an_unsigned_request_is_denied(
    settle_with: str, store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """Approving a request that went out unsigned is denied by verification."""
    warehouse = Warehouse()
    first = await _first_leg(
        "resume_from_checkpoint", warehouse, store, deps, BrokenSigner(SECRET, clock=clock)
    )
    signer = (
        nd.ApprovalSigner(SECRET, clock=clock)
        if settle_with == "working"
        else BrokenSigner(SECRET, clock=clock)
    )
    done = await _settle(
        "resume_from_checkpoint",
        first,
        warehouse,
        store,
        deps,
        signer,
        [_approve(first.pending_approvals[0])],  # echoes token=None
    )
    assert warehouse.dropped == []
    assert done.status == "completed"
    assert done.text == f"ERROR {TOKEN_DENIAL_REASON}"


# --- the response carries the echoed token (the UI wire) ------------------------------


@pytest.mark.spec("S000-54")
async def test_client_echoes_the_token_over_json_wire(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """The client sends the request's token back unchanged on the response."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    stream = nd.stream_chat(
        model=warehouse.model(),
        messages="go",
        tools=[warehouse.tool],
        session=nd.DurableSession(store, run_id="run-42"),
        approval_signer=signer,
        deps=deps,
    )
    # server -> browser: the tool-approval-request part, as JSON
    wire_out = [p.model_dump_json() for p in [p async for p in stream.full_stream]]
    await stream.result()
    browser_sees = [json.loads(w) for w in wire_out]
    card = next(p for p in browser_sees if p["type"] == "tool-approval-request")["request"]
    assert card["token"].startswith("v1.")
    assert SECRET not in "".join(wire_out)  # the secret never leaves the server

    # browser -> server: {approval_id, approved, token}, echoing the token
    wire_in = json.dumps(
        {"approval_id": card["approval_id"], "approved": True, "token": card["token"]}
    )
    response = nd.ToolApprovalResponse.model_validate_json(wire_in)
    assert response.token == card["token"]

    done = await nd.resume_from_checkpoint(
        store,
        "run-42",
        model=warehouse.model(),
        tools=[warehouse.tool],
        approval_signer=signer,
        approval_responses=[response],
        deps=deps,
    )
    assert warehouse.dropped == ["stg_2023"]
    assert done.text == "OK dropped stg_2023"


# --- the four checks, and the denial they produce -------------------------------------


@pytest.mark.spec("S000-55", "S000-59")
@pytest.mark.parametrize("kind", SETTLERS)
async def test_forged_token_is_denied(
    kind: str, store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """A token MACed with another secret does not approve; denial, no raise."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    first = await _first_leg(kind, warehouse, store, deps, signer)
    request = first.pending_approvals[0]
    forged = nd.ApprovalSigner("attacker-guess", clock=clock).sign(
        request, run_id="run-42" if "resume" in kind or "+session" in kind else None
    )

    done = await _settle(kind, first, warehouse, store, deps, signer, [_approve(request, forged)])
    assert warehouse.dropped == []
    assert done.status == "completed"
    [result] = _results(done)
    assert result.is_error is True
    assert result.result == TOKEN_DENIAL_REASON
    assert done.text == f"ERROR {TOKEN_DENIAL_REASON}"


@pytest.mark.spec("S000-55")
async def test_garbled_and_tampered_tokens_are_denied(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """A garbled token, or one whose payload was edited, never approves."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    for index, bad in enumerate(["garbage", "v1.e30.e30", None, ""]):
        warehouse = Warehouse()
        run_id = f"run-{index}"
        first = await _first_leg(
            "resume_from_checkpoint", warehouse, store, deps, signer, run_id=run_id
        )
        done = await _settle(
            "resume_from_checkpoint",
            first,
            warehouse,
            store,
            deps,
            signer,
            [_approve(first.pending_approvals[0], bad)],
            run_id=run_id,
        )
        assert warehouse.dropped == [], bad
        assert done.text == f"ERROR {TOKEN_DENIAL_REASON}", bad

    # tampering: the same MAC over a payload naming another table
    warehouse = Warehouse()
    first = await _first_leg(
        "resume_from_checkpoint", warehouse, store, deps, signer, run_id="run-t"
    )
    request = first.pending_approvals[0]
    assert request.token is not None
    _prefix, segment, mac = request.token.split(".")
    payload = json.loads(_b64decode(segment))
    payload["input"] = {"name": "orders"}
    tampered = f"v1.{_b64encode(json.dumps(payload).encode())}.{mac}"
    done = await _settle(
        "resume_from_checkpoint",
        first,
        warehouse,
        store,
        deps,
        signer,
        [_approve(request, tampered)],
        run_id="run-t",
    )
    assert warehouse.dropped == []
    assert done.text == f"ERROR {TOKEN_DENIAL_REASON}"


@pytest.mark.spec("S000-56")
async def test_token_of_another_call_cannot_approve(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """Swapping the valid tokens of two pending calls approves neither."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    tables = ("stg_2023", "orders")
    first = await _first_leg(
        "resume_from_checkpoint", warehouse, store, deps, signer, tables=tables
    )
    stale, orders = first.pending_approvals
    assert stale.approval_id != orders.approval_id

    swapped = await _settle(
        "resume_from_checkpoint",
        first,
        warehouse,
        store,
        deps,
        signer,
        [_approve(stale, orders.token), _approve(orders, stale.token)],
        tables=tables,
    )
    assert warehouse.dropped == []
    assert [r.result for r in _results(swapped)] == [TOKEN_DENIAL_REASON] * 2


@pytest.mark.spec("S000-56")
async def test_only_the_call_whose_token_matches_runs(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """In one batch, the call with its own token runs; the other is denied."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    tables = ("stg_2023", "orders")
    first = await _first_leg(
        "resume_from_checkpoint", warehouse, store, deps, signer, tables=tables
    )
    stale, orders = first.pending_approvals

    done = await _settle(
        "resume_from_checkpoint",
        first,
        warehouse,
        store,
        deps,
        signer,
        [_approve(stale), _approve(orders, stale.token)],
        tables=tables,
    )
    assert warehouse.dropped == ["stg_2023"]
    assert done.text == f"OK dropped stg_2023 | ERROR {TOKEN_DENIAL_REASON}"


@pytest.mark.spec("S000-56")
async def test_approval_ids_are_not_tool_call_ids(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """Approval ids stay distinct from tool call ids; a tool_call_id never approves."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    first = await _first_leg("resume_from_checkpoint", warehouse, store, deps, signer)
    request = first.pending_approvals[0]
    assert request.approval_id != request.tool_call_id

    done = await _settle(
        "resume_from_checkpoint",
        first,
        warehouse,
        store,
        deps,
        signer,
        [
            nd.ToolApprovalResponse(
                approval_id=request.tool_call_id, approved=True, token=request.token
            )
        ],
    )
    assert warehouse.dropped == []
    [result] = _results(done)
    assert result.is_error is True


@pytest.mark.spec("S000-56")
@pytest.mark.parametrize(
    "change",
    [
        {"tool_name": "truncate_table"},
        {"input": {"name": "orders"}},
        {"tool_call_id": "toolu_other"},
    ],
    ids=["tool_name", "input", "tool_call_id"],
)
async def test_token_pins_the_whole_request(
    change: dict[str, Any], store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """A validly signed token for the same approval_id
    but another tool name, input or call does not approve."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    first = await _first_leg("resume_from_checkpoint", warehouse, store, deps, signer)
    request = first.pending_approvals[0]
    other = request.model_copy(update={**change, "token": None})
    token = signer.sign(other, run_id="run-42")
    assert signer.verify(token) is not None  # the MAC itself is fine

    done = await _settle(
        "resume_from_checkpoint", first, warehouse, store, deps, signer, [_approve(request, token)]
    )
    assert warehouse.dropped == []
    assert done.text == f"ERROR {TOKEN_DENIAL_REASON}"


@pytest.mark.spec("S000-56")
async def test_a_token_settles_its_call_once(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """Replaying a used token changes nothing.

    The run asks twice for the same tool and input. The first verdict's token,
    replayed on the second suspension, does not approve the second call, and
    replaying the original resume against the finished run runs nothing again.
    """
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    dropped: list[str] = []

    @nd.tool(needs_approval=True)
    def drop_table(name: str) -> str:
        """Drop a warehouse table."""
        dropped.append(name)
        return f"dropped {name}"

    def model() -> nd.ScriptedModel:
        return nd.ScriptedModel(
            [
                nd.Turn.call("drop_table", name="stg_2023"),
                nd.Turn.call("drop_table", name="stg_2023"),
                _report,
            ]
        )

    first = await nd.generate_text(
        model=model(),
        messages="go",
        tools=[drop_table],
        session=nd.DurableSession(store, run_id="run-once"),
        approval_signer=signer,
        deps=deps,
    )
    used = _approve(first.pending_approvals[0])
    second = await nd.resume_from_checkpoint(
        store,
        "run-once",
        model=model(),
        tools=[drop_table],
        approval_signer=signer,
        approval_responses=[used],
        deps=deps,
    )
    assert dropped == ["stg_2023"]
    assert second.status == "suspended"

    replayed = await nd.resume_from_checkpoint(
        store,
        "run-once",
        model=model(),
        tools=[drop_table],
        approval_signer=signer,
        approval_responses=[used],
        deps=deps,
    )
    assert dropped == ["stg_2023"]  # the second call did not run on the old token
    assert replayed.status == "completed"
    first_result, second_result = _results(replayed)
    assert first_result.result == "dropped stg_2023" and not first_result.is_error
    assert second_result.is_error is True

    snapshots = len(store.history("run-once"))
    again = await nd.resume_from_checkpoint(
        store,
        "run-once",
        model=model(),
        tools=[drop_table],
        approval_signer=signer,
        approval_responses=[used, _approve(second.pending_approvals[0])],
        deps=deps,
    )
    assert dropped == ["stg_2023"]
    assert again.status == "completed"
    assert _results(again) == _results(replayed)
    assert len(store.history("run-once")) == snapshots


@pytest.mark.spec("S000-49", "S000-57")
@pytest.mark.parametrize("kind", SETTLERS)
async def test_token_as_old_as_max_age_is_denied(
    kind: str, store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """With approval_max_age_ms, a token of exactly that age is refused."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    first = await _first_leg(kind, warehouse, store, deps, signer)
    request = first.pending_approvals[0]
    clock.advance(3_600_000)

    done = await _settle(
        kind, first, warehouse, store, deps, signer, [_approve(request)], max_age_ms=3_600_000
    )
    assert warehouse.dropped == []
    assert done.text == f"ERROR {TOKEN_DENIAL_REASON}"


@pytest.mark.spec("S000-57")
@pytest.mark.parametrize("kind", SETTLERS)
async def test_token_younger_than_max_age_approves(
    kind: str, store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """A token one millisecond younger than approval_max_age_ms approves."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    first = await _first_leg(kind, warehouse, store, deps, signer)
    clock.advance(3_599_999)

    done = await _settle(
        kind,
        first,
        warehouse,
        store,
        deps,
        signer,
        [_approve(first.pending_approvals[0])],
        max_age_ms=3_600_000,
    )
    assert warehouse.dropped == ["stg_2023"]
    assert done.text == "OK dropped stg_2023"


@pytest.mark.spec("S000-58")
async def test_token_from_another_run_is_denied(store: nd.InMemorySessionStore, clock: Any) -> None:
    """Run A's valid token cannot approve the identical call in run B."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouses = {"run-A": Warehouse(), "run-B": Warehouse()}
    firsts = {
        run_id: await _first_leg(
            "resume_from_checkpoint", w, store, _fresh_deps(clock), signer, run_id=run_id
        )
        for run_id, w in warehouses.items()
    }
    request_a = firsts["run-A"].pending_approvals[0]
    request_b = firsts["run-B"].pending_approvals[0]
    # same ids, same tool, same input: only the run binding tells them apart
    assert request_a.model_dump(exclude={"token"}) == request_b.model_dump(exclude={"token"})

    for kind in ("resume_from_checkpoint", "generate_text+session"):
        done = await _settle(
            kind,
            firsts["run-B"],
            warehouses["run-B"],
            store,
            _fresh_deps(clock),
            signer,
            [_approve(request_a)],
            run_id="run-B",
        )
        assert warehouses["run-B"].dropped == [], kind
        assert done.text == f"ERROR {TOKEN_DENIAL_REASON}", kind


@pytest.mark.spec("S000-58")
async def test_plain_call_with_another_sessions_run_id_is_denied(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """Passing run A's history and token under session run B is refused."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    first = await _first_leg("resume_from_checkpoint", warehouse, store, deps, signer)
    done = await nd.generate_text(
        model=warehouse.model(),
        messages=first.messages,
        tools=[warehouse.tool],
        session=nd.DurableSession(store, run_id="run-B"),
        approval_signer=signer,
        approval_responses=[_approve(first.pending_approvals[0])],
        deps=deps,
    )
    assert warehouse.dropped == []
    assert done.text == f"ERROR {TOKEN_DENIAL_REASON}"


@pytest.mark.spec("S000-58")
async def test_binding_skipped_when_the_token_has_no_run_id(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """A token minted without run_id approves a durable run (binding skipped)."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    first = await _first_leg("resume_from_checkpoint", warehouse, store, deps, signer)
    request = first.pending_approvals[0]
    unbound = signer.sign(request.model_copy(update={"token": None}))
    unbound_payload = signer.verify(unbound)
    assert unbound_payload is not None and "run_id" not in unbound_payload

    done = await _settle(
        "resume_from_checkpoint",
        first,
        warehouse,
        store,
        deps,
        signer,
        [_approve(request, unbound)],
    )
    assert warehouse.dropped == ["stg_2023"]
    assert done.text == "OK dropped stg_2023"


@pytest.mark.spec("S000-58")
async def test_binding_skipped_when_the_call_has_no_run_id(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """A run-bound token approves in a call without a session (no call run_id)."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    first = await _first_leg("resume_from_checkpoint", warehouse, store, deps, signer)
    request = first.pending_approvals[0]
    payload = signer.verify(request.token)
    assert payload is not None and payload["run_id"] == "run-42"

    done = await _settle(
        "generate_text", first, warehouse, store, deps, signer, [_approve(request)]
    )
    assert warehouse.dropped == ["stg_2023"]
    assert done.text == "OK dropped stg_2023"


@pytest.mark.spec("S000-59")
@pytest.mark.parametrize("kind", ["resume_from_checkpoint", "resume_stream_from_checkpoint"])
async def test_failed_check_is_an_is_error_result_and_the_loop_continues(
    kind: str, store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """The exact reason reaches the model as is_error; the loop finishes; no raise."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    first = await _first_leg(kind, warehouse, store, deps, signer)
    request = first.pending_approvals[0]
    model = warehouse.model(keep_requests=None)
    options: dict[str, Any] = {
        "model": model,
        "tools": [warehouse.tool],
        "approval_signer": signer,
        "approval_responses": [_approve(request, "v1.forged.token")],
        "deps": deps,
    }
    if kind == "resume_from_checkpoint":
        done = await nd.resume_from_checkpoint(store, "run-42", **options)
        parts: list[Any] = []
    else:
        stream = nd.resume_stream_from_checkpoint(store, "run-42", **options)
        parts = [p async for p in stream.full_stream]
        done = await stream.result()

    assert (
        TOKEN_DENIAL_REASON == "Approval token missing, invalid, expired, or bound to another run."
    )
    assert done.status == "completed"
    assert done.finish_reason == "stop"
    seen = model.requests[0].messages[-1]  # the model was called again, with the denial
    assert seen.role == "tool"
    [result] = seen.tool_results
    assert (result.tool_call_id, result.is_error, result.result) == (
        request.tool_call_id,
        True,
        TOKEN_DENIAL_REASON,
    )
    checkpoint = store.load("run-42")
    assert checkpoint is not None and checkpoint.status == "completed"
    assert not [p for p in parts if p.type == "error"]
    if parts:
        denied = [p for p in parts if p.type == "tool-result"]
        assert denied[0].result == result


@pytest.mark.spec("S000-60")
@pytest.mark.parametrize("kind", SETTLERS)
async def test_denial_needs_no_token(
    kind: str, store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """approved=False without a token is a normal denial with its own reason."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    tables = ("stg_2023", "stg_2024")
    first = await _first_leg(kind, warehouse, store, deps, signer, tables=tables)
    with_reason, without_reason = first.pending_approvals

    done = await _settle(
        kind,
        first,
        warehouse,
        store,
        deps,
        signer,
        [
            nd.ToolApprovalResponse(
                approval_id=with_reason.approval_id, approved=False, reason="Keep it."
            ),
            nd.ToolApprovalResponse(approval_id=without_reason.approval_id, approved=False),
        ],
        tables=tables,
    )
    assert warehouse.dropped == []
    assert [(r.is_error, r.result) for r in _results(done)] == [
        (True, "Keep it."),
        (True, "Denied by user."),
    ]


@pytest.mark.spec("S000-61")
@pytest.mark.parametrize("kind", SETTLERS)
async def test_checks_run_wherever_verdicts_are_settled(
    kind: str, store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """Both resumes and plain calls (with or without session) verify tokens."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    tables = ("stg_2023", "stg_2024")
    first = await _first_leg(kind, warehouse, store, deps, signer, tables=tables)
    good, bad = first.pending_approvals

    done = await _settle(
        kind,
        first,
        warehouse,
        store,
        deps,
        signer,
        [_approve(good), _approve(bad, None)],
        tables=tables,
    )
    assert warehouse.dropped == ["stg_2023"]
    assert done.text == f"OK dropped stg_2023 | ERROR {TOKEN_DENIAL_REASON}"


@pytest.mark.spec("S000-62")
@pytest.mark.parametrize("kind", SETTLERS)
async def test_without_signer_tokens_are_not_checked(
    kind: str, store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """A settling call without approval_signer honours approvals as before."""
    warehouse = Warehouse()
    tables = ("stg_2023", "stg_2024")
    first = await _first_leg(
        kind, warehouse, store, deps, nd.ApprovalSigner(SECRET, clock=clock), tables=tables
    )
    missing, garbage = first.pending_approvals

    done = await _settle(
        kind,
        first,
        warehouse,
        store,
        deps,
        None,
        [_approve(missing, None), _approve(garbage, "not-a-token")],
        tables=tables,
    )
    assert warehouse.dropped == ["stg_2023", "stg_2024"]
    assert done.text == "OK dropped stg_2023 | OK dropped stg_2024"


@pytest.mark.spec("S000-62")
@pytest.mark.parametrize("kind", SETTLERS)
async def test_approving_signed_requests_without_a_signer_warns_once_per_leg(
    kind: str, store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any, logger: Any
) -> None:
    """Without a signer the approvals are honoured, but settling requests that were
    signed without a signer says so, once per leg: their tokens went unchecked."""
    warehouse = Warehouse()
    tables = ("stg_2023", "stg_2024")
    first = await _first_leg(
        kind, warehouse, store, deps, nd.ApprovalSigner(SECRET, clock=clock), tables=tables
    )
    a, b = first.pending_approvals
    before = list(logger.warnings)
    await _settle(
        kind,
        first,
        warehouse,
        store,
        deps,
        None,
        [_approve(a, None), _approve(b, "forged")],
        tables=tables,
    )
    assert warehouse.dropped == ["stg_2023", "stg_2024"]
    new = [w for w in logger.warnings if w not in before]
    assert len(new) == 1, new
    assert "approval_signer" in new[0] and "not checked" in new[0]


@pytest.mark.spec("S000-62")
async def test_no_warning_for_unsigned_requests_or_denials(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any, logger: Any
) -> None:
    """Requests that were never signed, or only denied, settle without the warning."""
    for signer, approve in ((None, True), (nd.ApprovalSigner(SECRET, clock=clock), False)):
        warehouse = Warehouse()
        own = nd.InMemorySessionStore()
        first = await _first_leg("resume_from_checkpoint", warehouse, own, deps, signer)
        [request] = first.pending_approvals
        before = list(logger.warnings)
        verdict = (
            _approve(request, None)
            if approve
            else nd.ToolApprovalResponse(approval_id=request.approval_id, approved=False)
        )
        await _settle("resume_from_checkpoint", first, warehouse, own, deps, None, [verdict])
        assert [w for w in logger.warnings if w not in before] == []


# --- out of scope by design -----------------------------------------------------------


@pytest.mark.spec("S000-63")
async def test_token_is_a_bearer_credential_that_names_no_user(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """Out of scope by design. The token says nothing about who approved:
    whoever presents a valid token (here a third party who only copied it) approves
    the call. Deciding who may reach the resume endpoint is the application's job."""
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    warehouse = Warehouse()
    first = await _first_leg("resume_from_checkpoint", warehouse, store, deps, signer)
    request = first.pending_approvals[0]
    payload = signer.verify(request.token)
    assert payload is not None
    assert set(payload) == {
        "approval_id",
        "tool_call_id",
        "tool_name",
        "input",
        "agent_path",
        "run_id",
        "issued_at",
    }

    # a different party, holding nothing but the copied approval id and token
    copied = json.loads(json.dumps({"id": request.approval_id, "t": request.token}))
    intruder_verdict = nd.ToolApprovalResponse(
        approval_id=copied["id"], approved=True, token=copied["t"]
    )
    done = await nd.resume_from_checkpoint(
        store,
        "run-42",
        model=warehouse.model(),
        tools=[warehouse.tool],
        approval_signer=nd.ApprovalSigner(SECRET, clock=clock),  # another server instance
        approval_responses=[intruder_verdict],
        deps=deps,
    )
    assert warehouse.dropped == ["stg_2023"]
    assert done.text == "OK dropped stg_2023"
