"""Seed 000, client-mode approval inside sub-agents.

Every model is a real ``ScriptedModel`` (turn chosen by the number of assistant
messages in the request), every gated tool a real ``@nd.tool(needs_approval=True)``,
every store a real ``InMemorySessionStore``. Sub-agent definitions are rebuilt for
each leg, as a caller would after a restart ("the same definition").
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.durable._signer import TOKEN_DENIAL_REASON
from nbdurable.loop._subagent import AgentTool

# --- shared pieces --------------------------------------------------------------------


class Shell:
    """A gated shell tool that records every command it really ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @nd.tool(needs_approval=True)
        def run_shell(cmd: str) -> str:
            """Run a shell command."""
            self.ran.append(cmd)
            return f"ran {cmd}"

        self.tool = run_shell


def _last_tool_result(request: nd.ModelRequest) -> nd.ToolResultPart:
    for message in reversed(request.messages):
        if message.role == "tool":
            return message.tool_results[-1]
    raise AssertionError("no tool result in the request")


def _reporting_turn(label: str) -> Any:
    """A script entry whose text reports the last tool result the model saw."""

    def turn(request: nd.ModelRequest) -> str:
        result = _last_tool_result(request)
        flag = "ERROR" if result.is_error else "OK"
        return f"{label}: {flag} {result.result}"

    return turn


def _coder(shell: Shell, *, name: str = "coder", keep_requests: int | None = 0) -> nd.Tool:
    """A sub-agent that runs the command named in its prompt, then reports."""
    model = nd.ScriptedModel(
        [
            lambda request: nd.Turn.call("run_shell", cmd=request.messages[0].text),
            _reporting_turn(name),
        ],
        keep_requests=keep_requests,
    )
    return nd.agent_tool(name, model=model, tools=[shell.tool])


def _parent(
    *calls: tuple[str, dict[str, Any], str], keep_requests: int | None = 0
) -> nd.ScriptedModel:
    """A parent that makes the given (name, args, id) calls in one step, then reports."""
    specs = [{"name": name, "args": args, "id": call_id} for name, args, call_id in calls]
    return nd.ScriptedModel(
        [nd.Turn(tool_calls=specs), _reporting_turn("parent")], keep_requests=keep_requests
    )


def _fresh_deps(clock: Any) -> nd.Deps:
    counter = itertools.count(1)
    return nd.Deps(clock=clock, generate_id=lambda: f"id{next(counter)}")


def _approve(request: nd.ToolApprovalRequest) -> nd.ToolApprovalResponse:
    return nd.ToolApprovalResponse(
        approval_id=request.approval_id, approved=True, token=request.token
    )


def _deny(request: nd.ToolApprovalRequest, reason: str) -> nd.ToolApprovalResponse:
    return nd.ToolApprovalResponse(approval_id=request.approval_id, approved=False, reason=reason)


# --- the first leg suspends child and parent ------------------------------------------


@pytest.mark.spec("S000-39")
async def test_gated_call_in_durable_sub_agent_suspends_the_child(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """With a durable session and no approve_tool_call, the child loop suspends."""
    shell = Shell()
    result = await nd.generate_text(
        model=_parent(("coder", {"prompt": "pytest -x"}, "toolu_9")),
        messages="Have the coder fix the failing test.",
        tools=[_coder(shell)],
        session=nd.DurableSession(store, run_id="run-7"),
        deps=deps,
    )

    assert shell.ran == []  # nothing gated ran before a human answered
    child = store.load("run-7::coder#toolu_9")
    assert child is not None
    assert child.status == "suspended"
    assert child.agent_path == ("coder",)
    [pending] = child.pending_approvals
    assert pending.tool_name == "run_shell"
    assert pending.input == {"cmd": "pytest -x"}
    # the child's history ends on its gated call: no tool message was written
    assert child.messages[-1].role == "assistant"
    assert child.messages[-1].tool_calls[0].tool_name == "run_shell"
    assert result.status == "suspended"


@pytest.mark.spec("S000-39")
async def test_inherited_server_mode_approver_means_no_suspension(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """An inherited server-mode approve_tool_call answers inside the child instead."""
    shell = Shell()
    asked: list[nd.ToolApprovalRequest] = []

    def approver(request: nd.ToolApprovalRequest) -> bool:
        asked.append(request)
        return True

    result = await nd.generate_text(
        model=_parent(("coder", {"prompt": "make test"}, "toolu_1")),
        messages="go",
        tools=[_coder(shell)],
        session=nd.DurableSession(store, run_id="run-srv"),
        approve_tool_call=approver,
        deps=deps,
    )

    assert result.status == "completed"
    assert result.pending_approvals == ()
    assert shell.ran == ["make test"]
    assert [(r.tool_name, r.agent_path) for r in asked] == [("run_shell", ("coder",))]
    assert result.text == "parent: OK coder: OK ran make test"
    child = store.load("run-srv::coder#toolu_1")
    assert child is not None and child.status == "completed"


@pytest.mark.spec("S000-40")
async def test_child_checkpoints_under_parent_agent_and_model_call_id(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """The child key is f"{parent_run_id}::{agent_name}#{tool_call_id}"."""
    shell = Shell()
    await nd.generate_text(
        model=_parent(("reviewer", {"prompt": "ls"}, "toolu_abc")),
        messages="go",
        tools=[_coder(shell, name="reviewer")],
        session=nd.DurableSession(store, run_id="run-40"),
        deps=deps,
    )

    assert sorted(store.list()) == ["run-40", "run-40::reviewer#toolu_abc"]
    child = store.load("run-40::reviewer#toolu_abc")
    assert child is not None
    assert child.run_id == "run-40::reviewer#toolu_abc"
    assert child.step_id == "run-40::reviewer#toolu_abc#0"
    # the id in the key is the one the parent model issued, recorded in the parent history
    parent = store.load("run-40")
    assert parent is not None
    assert [c.tool_call_id for c in parent.messages[-1].tool_calls] == ["toolu_abc"]


@pytest.mark.spec("S000-40")
async def test_generated_run_id_is_the_prefix_of_the_child_key(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """With a generated parent run_id, the child key is built from that id."""
    shell = Shell()
    result = await nd.generate_text(
        model=_parent(("coder", {"prompt": "ls"}, "toolu_2")),
        messages="go",
        tools=[_coder(shell)],
        session=nd.DurableSession(store),
        deps=deps,
    )

    assert result.run_id is not None
    assert store.load(f"{result.run_id}::coder#toolu_2") is not None


@pytest.mark.spec("S000-41")
async def test_parent_suspends_with_child_requests_tagged_by_agent_path(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """The parent suspends; pending_approvals carry the child's request + agent_path."""
    shell = Shell()
    result = await nd.generate_text(
        model=_parent(("coder", {"prompt": "pytest"}, "toolu_9")),
        messages="go",
        tools=[_coder(shell)],
        session=nd.DurableSession(store, run_id="run-7"),
        deps=deps,
    )

    assert result.status == "suspended"
    assert result.finish_reason == "suspended"
    [request] = result.pending_approvals
    assert request.agent_path == ("coder",)
    assert request.tool_name == "run_shell"
    assert request.input == {"cmd": "pytest"}
    child = store.load("run-7::coder#toolu_9")
    assert child is not None
    assert request == child.pending_approvals[0]  # the very request the child waits for

    parent = store.load("run-7")
    assert parent is not None
    assert parent.status == "suspended"
    assert parent.agent_path == ()
    assert parent.pending_approvals == (request,)
    # the parent's step wrote no tool message for the suspended sub-agent call
    assert parent.messages[-1].role == "assistant"
    assert parent.messages[-1].tool_calls[0].tool_call_id == "toolu_9"


@pytest.mark.spec("S000-41")
async def test_stream_parts_carry_the_childs_request_with_agent_path(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """The parent stream's tool-approval-request part names the asking sub-agent."""
    shell = Shell()
    stream = nd.stream_chat(
        model=_parent(("coder", {"prompt": "pytest"}, "toolu_9")),
        messages="go",
        tools=[_coder(shell)],
        session=nd.DurableSession(store, run_id="run-7s"),
        deps=deps,
    )
    parts = [part async for part in stream.full_stream]
    result = await stream.result()

    requests = [p for p in parts if p.type == "tool-approval-request"]
    assert len(requests) == 1
    assert requests[0].request.agent_path == ("coder",)
    assert requests[0].request.tool_name == "run_shell"
    assert requests[0].request == result.pending_approvals[0]
    assert parts[-1].type == "finish"
    assert parts[-1].status == "suspended"


# --- resume forwards verdicts down, at any depth --------------------------------------


@pytest.mark.spec("S000-42")
async def test_resume_forwards_verdict_and_child_continues_from_checkpoint(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """Resuming the parent re-runs the sub-agent call; the child settles and continues."""
    shell = Shell()
    first = await nd.generate_text(
        model=_parent(("coder", {"prompt": "pytest"}, "toolu_9")),
        messages="go",
        tools=[_coder(shell)],
        session=nd.DurableSession(store, run_id="run-7"),
        deps=deps,
    )
    [request] = first.pending_approvals

    coder = _coder(shell, keep_requests=None)  # the same definition, rebuilt after a restart
    assert isinstance(coder, AgentTool) and isinstance(coder.model, nd.ScriptedModel)
    child_model = coder.model
    parent_model = _parent(("coder", {"prompt": "pytest"}, "toolu_9"))
    done = await nd.resume_from_checkpoint(
        store,
        "run-7",
        model=parent_model,
        tools=[coder],
        approval_responses=[_approve(request)],
        deps=deps,
    )

    assert done.status == "completed"
    assert shell.ran == ["pytest"]
    assert done.text == "parent: OK coder: OK ran pytest"
    # the child continued from its checkpoint: its model was asked once this leg,
    # with the earlier gated call and its real result already in the history
    assert child_model.calls == 1
    seen = child_model.requests[0].messages
    assert [m.role for m in seen] == ["user", "assistant", "tool"]
    assert seen[-1].tool_results[0].result == "ran pytest"
    assert [(i.step_index, i.status) for i in store.history("run-7::coder#toolu_9")] == [
        (0, "suspended"),
        (1, "completed"),
    ]
    assert parent_model.calls == 1  # the parent went straight to its final turn


@pytest.mark.spec("S000-42")
async def test_denial_is_forwarded_down_to_the_child(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """A denial reaches the child as an is_error result with the reason."""
    shell = Shell()
    first = await nd.generate_text(
        model=_parent(("coder", {"prompt": "rm -rf /"}, "toolu_9")),
        messages="go",
        tools=[_coder(shell)],
        session=nd.DurableSession(store, run_id="run-7"),
        deps=deps,
    )
    done = await nd.resume_from_checkpoint(
        store,
        "run-7",
        model=_parent(("coder", {"prompt": "rm -rf /"}, "toolu_9")),
        tools=[_coder(shell)],
        approval_responses=[_deny(first.pending_approvals[0], "Not on my watch.")],
        deps=deps,
    )

    assert shell.ran == []
    assert done.status == "completed"
    assert done.text == "parent: OK coder: ERROR Not on my watch."


def _nested_tools(shell: Shell) -> list[nd.Tool]:
    """coder -> shell -> run_shell: a gated call at nesting depth 2."""
    shell_agent = nd.agent_tool(
        "shell",
        model=nd.ScriptedModel(
            [
                lambda request: nd.Turn.call("run_shell", cmd=request.messages[0].text),
                _reporting_turn("shell"),
            ]
        ),
        tools=[shell.tool],
    )
    coder = nd.agent_tool(
        "coder",
        model=nd.ScriptedModel(
            [
                lambda request: nd.Turn.call("shell", prompt=request.messages[0].text),
                _reporting_turn("coder"),
            ]
        ),
        tools=[shell_agent],
    )
    return [coder]


@pytest.mark.spec("S000-42")
async def test_nested_depth_two_agent_path_and_verdict_forwarding(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """At depth 2 the request names ['coder', 'shell'] and the verdict goes two down."""
    shell = Shell()
    first = await nd.generate_text(
        model=_parent(("coder", {"prompt": "pytest -q"}, "toolu_1")),
        messages="go",
        tools=_nested_tools(shell),
        session=nd.DurableSession(store, run_id="run-n"),
        deps=deps,
    )

    assert first.status == "suspended"
    [request] = first.pending_approvals
    assert request.agent_path == ("coder", "shell")
    assert request.tool_name == "run_shell"
    coder_key = "run-n::coder#toolu_1"
    coder_cp = store.load(coder_key)
    assert coder_cp is not None and coder_cp.status == "suspended"
    assert coder_cp.agent_path == ("coder",)
    [shell_call] = coder_cp.messages[-1].tool_calls
    shell_key = f"{coder_key}::shell#{shell_call.tool_call_id}"
    shell_cp = store.load(shell_key)
    assert shell_cp is not None and shell_cp.status == "suspended"
    assert shell_cp.agent_path == ("coder", "shell")
    assert shell_cp.pending_approvals == (request,)
    assert sorted(store.list()) == sorted(["run-n", coder_key, shell_key])

    done = await nd.resume_from_checkpoint(
        store,
        "run-n",
        model=_parent(("coder", {"prompt": "pytest -q"}, "toolu_1")),
        tools=_nested_tools(shell),
        approval_responses=[_approve(request)],
        deps=deps,
    )

    assert done.status == "completed"
    assert shell.ran == ["pytest -q"]
    assert done.text == "parent: OK coder: OK shell: OK ran pytest -q"
    for key in ("run-n", coder_key, shell_key):
        assert [(i.step_index, i.status) for i in store.history(key)] == [
            (0, "suspended"),
            (1, "completed"),
        ], key
    assert sorted(store.list()) == sorted(["run-n", coder_key, shell_key])


@pytest.mark.spec("S000-42")
async def test_nested_depth_three_stream_resume(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """Depth 3 through the streaming twin: agent_path ['lead', 'coder', 'shell']."""
    shell = Shell()

    def tools() -> list[nd.Tool]:
        lead = nd.agent_tool(
            "lead",
            model=nd.ScriptedModel(
                [
                    lambda request: nd.Turn.call("coder", prompt=request.messages[0].text),
                    _reporting_turn("lead"),
                ]
            ),
            tools=_nested_tools(shell),
        )
        return [lead]

    first = await nd.stream_chat(
        model=_parent(("lead", {"prompt": "make"}, "toolu_L")),
        messages="go",
        tools=tools(),
        session=nd.DurableSession(store, run_id="run-3"),
        deps=deps,
    )
    [request] = first.pending_approvals
    assert request.agent_path == ("lead", "coder", "shell")

    stream = nd.resume_stream_from_checkpoint(
        store,
        "run-3",
        model=_parent(("lead", {"prompt": "make"}, "toolu_L")),
        tools=tools(),
        approval_responses=[_approve(request)],
        deps=deps,
    )
    done = await stream.result()
    assert done.status == "completed"
    assert shell.ran == ["make"]
    assert done.text == "parent: OK lead: OK coder: OK shell: OK ran make"


@pytest.mark.spec("S000-42", "S000-51", "S000-55")
async def test_signed_verdicts_verify_inside_the_child(
    store: nd.InMemorySessionStore, deps: nd.Deps, clock: Any
) -> None:
    """A signed child request approves only with its own token."""
    signer = nd.ApprovalSigner("sub-agent-secret", clock=clock)
    shell = Shell()
    first = await nd.generate_text(
        model=_parent(("coder", {"prompt": "pytest"}, "toolu_9")),
        messages="go",
        tools=_nested_tools(shell),
        session=nd.DurableSession(store, run_id="run-s"),
        approval_signer=signer,
        deps=deps,
    )
    [request] = first.pending_approvals
    assert request.token is not None
    payload = signer.verify(request.token)
    assert payload is not None
    assert payload["agent_path"] == ["coder", "shell"]
    assert payload["approval_id"] == request.approval_id

    forged = nd.ApprovalSigner("not-the-secret", clock=clock).sign(request, run_id="run-s")
    denied = await nd.resume_from_checkpoint(
        store,
        "run-s",
        model=_parent(("coder", {"prompt": "pytest"}, "toolu_9")),
        tools=_nested_tools(shell),
        approval_signer=signer,
        approval_responses=[
            nd.ToolApprovalResponse(approval_id=request.approval_id, approved=True, token=forged)
        ],
        deps=deps,
    )
    assert shell.ran == []
    assert denied.status == "completed"
    assert denied.text == f"parent: OK coder: OK shell: ERROR {TOKEN_DENIAL_REASON}"


@pytest.mark.spec("S000-42", "S000-58")
async def test_signed_child_token_cannot_approve_another_runs_child(clock: Any) -> None:
    """A sub-agent's token is bound to its run; another run denies it."""
    signer = nd.ApprovalSigner("secret", clock=clock)
    store = nd.InMemorySessionStore()
    shell = Shell()
    legs: dict[str, nd.GenerateTextResult] = {}
    for run_id in ("run-A", "run-B"):  # identical runs: identical approval and call ids
        legs[run_id] = await nd.generate_text(
            model=_parent(("coder", {"prompt": "deploy"}, "toolu_9")),
            messages="go",
            tools=[_coder(shell)],
            session=nd.DurableSession(store, run_id=run_id),
            approval_signer=signer,
            deps=_fresh_deps(clock),
        )
    request_a = legs["run-A"].pending_approvals[0]
    request_b = legs["run-B"].pending_approvals[0]
    assert request_a.approval_id == request_b.approval_id  # only the run binding differs

    done = await nd.resume_from_checkpoint(
        store,
        "run-B",
        model=_parent(("coder", {"prompt": "deploy"}, "toolu_9")),
        tools=[_coder(shell)],
        approval_signer=signer,
        approval_responses=[_approve(request_a)],  # run A's token replayed on run B
        deps=_fresh_deps(clock),
    )
    assert shell.ran == []
    assert done.text == f"parent: OK coder: ERROR {TOKEN_DENIAL_REASON}"

    ok = await nd.resume_from_checkpoint(
        store,
        "run-A",
        model=_parent(("coder", {"prompt": "deploy"}, "toolu_9")),
        tools=[_coder(shell)],
        approval_signer=signer,
        approval_responses=[_approve(request_a)],
        deps=_fresh_deps(clock),
    )
    assert shell.ran == ["deploy"]
    assert ok.text == "parent: OK coder: OK ran deploy"


# --- stable keys across legs, no collision between parallel calls ---------------------


@pytest.mark.spec("S000-43")
async def test_child_key_is_stable_across_several_parent_legs(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """A child that suspends twice keeps one key over three parent legs."""
    shell = Shell()

    def coder() -> nd.Tool:
        return nd.agent_tool(
            "coder",
            model=nd.ScriptedModel(
                [
                    nd.Turn.call("run_shell", cmd="make build"),
                    nd.Turn.call("run_shell", cmd="make deploy"),
                    _reporting_turn("coder"),
                ]
            ),
            tools=[shell.tool],
        )

    def parent() -> nd.ScriptedModel:
        return _parent(("coder", {"prompt": "ship it"}, "toolu_7"))

    first = await nd.generate_text(
        model=parent(),
        messages="go",
        tools=[coder()],
        session=nd.DurableSession(store, run_id="run-43"),
        deps=deps,
    )
    second = await nd.resume_from_checkpoint(
        store,
        "run-43",
        model=parent(),
        tools=[coder()],
        approval_responses=[_approve(first.pending_approvals[0])],
        deps=deps,
    )
    assert second.status == "suspended"
    [request] = second.pending_approvals
    assert request.input == {"cmd": "make deploy"}
    assert request.agent_path == ("coder",)
    assert shell.ran == ["make build"]

    third = await nd.resume_from_checkpoint(
        store,
        "run-43",
        model=parent(),
        tools=[coder()],
        approval_responses=[_approve(request)],
        deps=deps,
    )
    assert third.status == "completed"
    assert shell.ran == ["make build", "make deploy"]
    assert sorted(store.list()) == ["run-43", "run-43::coder#toolu_7"]
    assert [(i.step_index, i.status) for i in store.history("run-43::coder#toolu_7")] == [
        (0, "suspended"),
        (1, "suspended"),
        (2, "completed"),
    ]
    # the parent re-ran the same tool_use on every leg: one assistant call in its history
    parent_cp = store.load("run-43")
    assert parent_cp is not None
    calls = [c.tool_call_id for m in parent_cp.messages for c in m.tool_calls]
    assert calls == ["toolu_7"]


@pytest.mark.spec("S000-43")
async def test_parallel_same_named_sub_agents_get_distinct_keys(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """Two parallel calls to 'coder' checkpoint under distinct keys and never collide."""
    shell = Shell()
    calls = (
        ("coder", {"prompt": "make a"}, "toolu_a"),
        ("coder", {"prompt": "make b"}, "toolu_b"),
    )
    first = await nd.generate_text(
        model=_parent(*calls),
        messages="go",
        tools=[_coder(shell)],
        session=nd.DurableSession(store, run_id="run-p"),
        deps=deps,
    )

    assert first.status == "suspended"
    assert sorted(store.list()) == ["run-p", "run-p::coder#toolu_a", "run-p::coder#toolu_b"]
    child_a = store.load("run-p::coder#toolu_a")
    child_b = store.load("run-p::coder#toolu_b")
    assert child_a is not None and child_b is not None
    assert child_a.pending_approvals[0].input == {"cmd": "make a"}
    assert child_b.pending_approvals[0].input == {"cmd": "make b"}
    by_cmd = {r.input["cmd"]: r for r in first.pending_approvals}
    assert set(by_cmd) == {"make a", "make b"}
    assert {r.agent_path for r in first.pending_approvals} == {("coder",)}
    assert by_cmd["make a"].approval_id != by_cmd["make b"].approval_id

    done = await nd.resume_from_checkpoint(
        store,
        "run-p",
        model=_parent(*calls),
        tools=[_coder(shell)],
        approval_responses=[_approve(by_cmd["make a"]), _deny(by_cmd["make b"], "Not b.")],
        deps=deps,
    )

    assert shell.ran == ["make a"]  # each verdict reached its own child
    assert done.status == "completed"
    tool_message = done.messages[-2]
    assert tool_message.role == "tool"
    results = {r.tool_call_id: r.result for r in tool_message.tool_results}
    assert results == {"toolu_a": "coder: OK ran make a", "toolu_b": "coder: ERROR Not b."}
    for key in ("run-p::coder#toolu_a", "run-p::coder#toolu_b"):
        assert [(i.step_index, i.status) for i in store.history(key)] == [
            (0, "suspended"),
            (1, "completed"),
        ]


@pytest.mark.spec("S000-43")
async def test_parallel_children_answered_one_at_a_time(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """Answering one sibling only denies the other by default; keys stay distinct."""
    shell = Shell()
    calls = (
        ("coder", {"prompt": "make a"}, "toolu_a"),
        ("coder", {"prompt": "make b"}, "toolu_b"),
    )
    first = await nd.generate_text(
        model=_parent(*calls),
        messages="go",
        tools=[_coder(shell)],
        session=nd.DurableSession(store, run_id="run-q"),
        deps=deps,
    )
    by_cmd = {r.input["cmd"]: r for r in first.pending_approvals}

    done = await nd.resume_from_checkpoint(
        store,
        "run-q",
        model=_parent(*calls),
        tools=[_coder(shell)],
        approval_responses=[_approve(by_cmd["make b"])],
        deps=deps,
    )

    assert shell.ran == ["make b"]
    results = {r.tool_call_id: r.result for r in done.messages[-2].tool_results}
    assert results["toolu_b"] == "coder: OK ran make b"
    assert results["toolu_a"].startswith("coder: ERROR ")
    assert "ran make" not in results["toolu_a"]


# --- without a session the gated sub-agent call is an is_error result -----------------


@pytest.mark.spec("S000-44")
async def test_without_session_gated_sub_agent_returns_is_error(
    store: nd.InMemorySessionStore, deps: nd.Deps
) -> None:
    """No session, no approver: an is_error result to the parent; no suspend, no raise."""
    shell = Shell()
    parent = _parent(("coder", {"prompt": "pytest"}, "toolu_9"), keep_requests=None)
    result = await nd.generate_text(
        model=parent,
        messages="go",
        tools=[_coder(shell)],
        deps=deps,
    )

    assert result.status == "completed"
    assert result.pending_approvals == ()
    assert result.run_id is None
    assert shell.ran == []
    assert store.list() == []
    # the parent model saw the error and reacted to it in its next turn
    assert parent.calls == 2
    seen = _last_tool_result(parent.requests[1])
    assert seen.is_error is True
    assert seen.tool_call_id == "toolu_9"
    assert "coder" in seen.result and "run_shell" in seen.result
    assert result.text.startswith("parent: ERROR ")


@pytest.mark.spec("S000-44")
async def test_without_session_stream_also_returns_is_error(deps: nd.Deps) -> None:
    """The streaming loop behaves the same: a tool-result part with is_error."""
    shell = Shell()
    stream = nd.stream_chat(
        model=_parent(("coder", {"prompt": "pytest"}, "toolu_9")),
        messages="go",
        tools=[_coder(shell)],
        deps=deps,
    )
    parts = [part async for part in stream.full_stream]
    result = await stream.result()

    assert result.status == "completed"
    assert not [p for p in parts if p.type in ("tool-approval-request", "error")]
    [tool_result] = [p for p in parts if p.type == "tool-result"]
    assert tool_result.result.is_error is True
    assert tool_result.result.tool_call_id == "toolu_9"
    assert shell.ran == []


# --- a sub-agent's token binds the session's run id -----------------------------------


async def _suspended_sub_agent(
    store: nd.InMemorySessionStore, signer: nd.ApprovalSigner, clock: Any, tools: Any
) -> nd.ToolApprovalRequest:
    first = await nd.generate_text(
        model=_parent(("coder", {"prompt": "pytest"}, "call_1_0")),
        messages="go",
        tools=tools,
        session=nd.DurableSession(store, run_id="run-42"),
        approval_signer=signer,
        deps=_fresh_deps(clock),
    )
    [request] = first.pending_approvals
    return request


async def _resume_42(
    store: nd.InMemorySessionStore, signer: nd.ApprovalSigner, clock: Any, tools: Any, token: str
) -> nd.GenerateTextResult:
    checkpoint = store.load("run-42")
    [request] = checkpoint.pending_approvals
    return await nd.resume_from_checkpoint(
        store,
        "run-42",
        model=_parent(("coder", {"prompt": "pytest"}, "call_1_0")),
        tools=tools,
        approval_signer=signer,
        approval_responses=[
            nd.ToolApprovalResponse(approval_id=request.approval_id, approved=True, token=token)
        ],
        deps=_fresh_deps(clock),
    )


@pytest.mark.spec("S000-52", "S000-58")
async def test_a_sub_agents_token_binds_the_sessions_run_id(clock: Any) -> None:
    """The token of a request raised inside a sub-agent binds the session's
    run id (the request, agent path included, stays pinned), so the seed's server check
    ``payload.run_id == run_id`` accepts it; a token the application signs
    for the session's run id approves the sub-agent's call."""
    signer = nd.ApprovalSigner("secret", clock=clock)
    for nested in (False, True):
        store, shell = nd.InMemorySessionStore(), Shell()
        tools = _nested_tools(shell) if nested else [_coder(shell)]
        request = await _suspended_sub_agent(store, signer, clock, tools)
        payload = signer.verify(request.token)
        assert payload is not None and payload["run_id"] == "run-42"  # the seed's server check
        assert payload["agent_path"] == (["coder", "shell"] if nested else ["coder"])
        minted = signer.sign(request.model_copy(update={"token": None}), run_id="run-42")
        done = await _resume_42(store, signer, clock, tools, minted)
        assert shell.ran == ["pytest"], done.text
        assert done.text.endswith("OK ran pytest")


@pytest.mark.spec("S000-58")
async def test_tokens_bound_to_the_child_key_stay_valid_and_other_runs_are_refused(
    clock: Any,
) -> None:
    """A token bound to the child key (how runs suspended before were signed)
    still approves; one bound to another run, or another run's child, is denied."""
    signer = nd.ApprovalSigner("secret", clock=clock)
    for bound_to, runs in [
        ("run-42::coder#call_1_0", True),
        ("run-43", False),
        ("run-43::coder#call_1_0", False),
        ("run-4", False),
        ("run-4::coder#call_1_0", False),
    ]:
        store, shell = nd.InMemorySessionStore(), Shell()
        request = await _suspended_sub_agent(store, signer, clock, [_coder(shell)])
        token = signer.sign(request.model_copy(update={"token": None}), run_id=bound_to)
        done = await _resume_42(store, signer, clock, [_coder(shell)], token)
        assert shell.ran == (["pytest"] if runs else []), bound_to
        if not runs:
            assert done.text == f"parent: OK coder: ERROR {TOKEN_DENIAL_REASON}"
