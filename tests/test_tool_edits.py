"""Edits and replies at the bottom: the schema check, the tool option, the messages' stored
form, the unchanged tokens, the loop (client and server mode) and what the model reads."""

from __future__ import annotations

from typing import Any

import pytest

import nbdurable as nd
from nbdurable._json_schema import schema_problems
from nbdurable.loop._history import model_view
from nbdurable.messages import ApprovalRequestPart
from nbdurable.models._base import ModelRequest
from nbdurable.runtime._fingerprint import definition_parts
from nbdurable.tools import ToolArgumentsError

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2},
        "mode": {"enum": ["fast", "safe"]},
        "limit": {"type": "integer", "minimum": 1},
        "tags": {"type": "array", "items": {"type": "string"}},
        "where": {"$ref": "#/$defs/Where"},
        "either": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["name"],
    "additionalProperties": False,
    "$defs": {"Where": {"type": "object", "properties": {"db": {"type": "string"}}}},
}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"name": "ok", "mode": "fast", "limit": 3, "tags": ["a"], "where": {"db": "x"}}, None),
        ({"name": "ok", "either": None}, None),
        ({}, "name: missing"),
        ({"name": "x"}, "name: at least 2 characters"),
        ({"name": "ok", "mode": "slow"}, "mode: must be one of"),
        ({"name": "ok", "limit": True}, "limit: expected integer"),
        ({"name": "ok", "limit": 0}, "limit: at least 1"),
        ({"name": "ok", "tags": ["a", 1]}, "tags[1]: expected string"),
        ({"name": "ok", "where": {"db": 3}}, "where.db: expected string"),
        ({"name": "ok", "either": 3}, "either: matches none"),
        ({"name": "ok", "drop_all": True}, "drop_all: not an argument"),
        ([], "expected object"),
    ],
)
def test_the_schema_check_names_each_problem(value: Any, problem: str | None) -> None:
    found = schema_problems(SCHEMA, value)
    if problem is None:
        assert found == []
    else:
        assert any(problem in line for line in found), found


def test_a_tool_says_whether_edits_are_allowed_and_validates_them() -> None:
    @nd.tool(needs_approval=True, allow_edit=True)
    def drop(name: str, cascade: bool = False) -> str:
        """Drop."""
        return name

    assert drop.allow_edit and not _drop_tool(allow_edit=False).allow_edit
    assert drop.validate_edit({"name": "a"}) == {"name": "a", "cascade": False}
    with pytest.raises(ToolArgumentsError, match="name"):
        drop.validate_edit({"cascade": True})
    client = nd.client_tool("pick", parameters=SCHEMA, allow_edit=True)  # a JSON schema only
    with pytest.raises(ToolArgumentsError, match="drop_all"):
        client.validate_edit({"name": "ok", "drop_all": 1})
    with pytest.raises(nd.ConfigurationError, match="allow_edit"):
        nd.Tool(name="t", allow_edit="yes")  # type: ignore[arg-type]


@pytest.mark.slow  # importing langchain-core takes seconds
def test_adapters_take_allow_edit() -> None:
    lc = pytest.importorskip("langchain_core.tools")

    @lc.tool
    def book(room: str) -> str:
        """Book a room."""
        return room

    tool = nd.Tool.from_langchain(book, needs_approval=True, allow_edit=True)
    assert tool.allow_edit
    with pytest.raises(ToolArgumentsError):
        tool.validate_edit({"room": 3, "x": 1})


def test_edits_leave_stored_forms_tokens_and_fingerprints_as_they_were() -> None:
    request = nd.ToolApprovalRequest(approval_id="a", tool_call_id="c", tool_name="t", input={})
    editable = request.model_copy(update={"allow_edit": True, "parameters": SCHEMA})
    assert "allow_edit" not in request.model_dump() and "parameters" not in request.model_dump()
    assert editable.model_dump()["allow_edit"] is True
    assert nd.ToolApprovalRequest.model_validate(editable.model_dump()) == editable

    class Fixed:
        def now(self) -> int:
            return 1

    signer = nd.ApprovalSigner("secret", clock=Fixed())
    assert signer.sign(editable, run_id="r") == signer.sign(request, run_id="r")
    response = nd.ToolApprovalResponse(approval_id="a", approved=True, arguments={"x": 1})
    assert nd.ToolApprovalResponse.model_validate(response.model_dump()) == response
    assert response.kind == "edited"

    def make(allow_edit: bool) -> nd.Agent:
        @nd.tool(needs_approval=True, allow_edit=allow_edit)
        def drop(name: str) -> str:
            """Drop."""
            return name

        return nd.Agent("a", nd.ScriptedModel(["x"]), [drop], version="1")

    assert "allow_edit" not in str(definition_parts(make(False)))
    assert make(True).fingerprint() != make(False).fingerprint()


def _drop_tool(allow_edit: bool = True) -> nd.Tool:
    @nd.tool(needs_approval=True, allow_edit=allow_edit)
    def drop_table(name: str) -> str:
        """Drop a table."""
        return f"dropped {name}"

    return drop_table


def _echo(request: ModelRequest) -> str:
    return str(request.messages[-1].tool_results[0].result)


async def test_the_loop_runs_an_edit_on_resume_and_the_model_reads_the_note() -> None:
    store = nd.InMemorySessionStore()
    signer = nd.ApprovalSigner("secret")
    seen: list[Any] = []

    def answer(request: ModelRequest) -> str:
        seen.append(request.messages)
        return _echo(request)

    model = nd.ScriptedModel([nd.Turn.call("drop_table", name="stg"), answer])
    tools = [_drop_tool()]
    session = nd.DurableSession(store, "r1")
    first = await nd.generate_text(
        model=model, messages="Drop.", tools=tools, session=session, approval_signer=signer
    )
    [request] = first.pending_approvals
    done = await nd.resume_from_checkpoint(
        store,
        "r1",
        model=model,
        tools=tools,
        approval_signer=signer,
        approval_responses=[
            nd.ToolApprovalResponse(
                approval_id=request.approval_id,
                approved=True,
                token=request.token,
                arguments={"name": "stg_2"},
            )
        ],
    )
    assert done.text == "dropped stg_2"
    [assistant] = [m for m in done.messages if m.tool_calls]
    assert assistant.tool_calls[0].args == {"name": "stg_2"}
    [part] = [p for p in assistant.content if isinstance(p, ApprovalRequestPart)]
    assert part.request.input == {"name": "stg"} and part.verdict is not None
    [viewed] = [m for m in seen[0] if m.tool_calls]
    assert viewed.content[0].type == "text" and "edited the arguments" in viewed.text
    assert model_view(done.messages)[1].tool_calls == assistant.tool_calls


async def test_the_loop_denies_an_edit_the_tool_does_not_allow_and_settles_a_reply() -> None:
    store = nd.InMemorySessionStore()
    model = nd.ScriptedModel([nd.Turn.call("drop_table", name="stg"), _echo])
    tools = [_drop_tool(allow_edit=False)]
    for run_id, verdict, expected in (
        ("r1", {"approved": True, "arguments": {"name": "x"}}, "does not allow editing"),
        ("r2", {"approved": False, "reply": "no need"}, "no need"),
    ):
        first = await nd.generate_text(
            model=model, messages="Drop.", tools=tools, session=nd.DurableSession(store, run_id)
        )
        [request] = first.pending_approvals
        done = await nd.resume_from_checkpoint(
            store,
            run_id,
            model=model,
            tools=tools,
            approval_responses=[
                nd.ToolApprovalResponse(approval_id=request.approval_id, **verdict)
            ],
        )
        assert expected in done.text
        [result] = [r for m in done.messages for r in m.tool_results]
        assert result.is_error == (run_id == "r1")


async def test_a_server_mode_approver_may_edit_or_reply() -> None:
    def approver(request: nd.ToolApprovalRequest) -> nd.ToolApprovalResponse:
        if request.input["name"] == "stg":
            return nd.ToolApprovalResponse(
                approval_id=request.approval_id, approved=True, arguments={"name": "stg_old"}
            )
        return nd.ToolApprovalResponse(
            approval_id=request.approval_id, approved=False, reply="skipped"
        )

    for name, expected in (("stg", "dropped stg_old"), ("prod", "skipped")):
        model = nd.ScriptedModel([nd.Turn.call("drop_table", name=name), _echo])
        done = await nd.generate_text(
            model=model, messages="Drop.", tools=[_drop_tool()], approve_tool_call=approver
        )
        assert done.text == expected
        [assistant] = [m for m in done.messages if m.tool_calls]
        assert any(isinstance(p, ApprovalRequestPart) for p in assistant.content)
