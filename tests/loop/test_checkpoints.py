"""The loop's checkpoints: durability opt-in per call, what the loops ask of a
store, the checkpoint's shape and status."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pydantic
import pytest
from support.checkpointing import (
    SpyStore,
    approval_model,
    approve,
    drain,
    make_tools,
    three_step_model,
    usage,
)

import nbdurable as nd
from nbdurable.parts import ErrorPart, FinishPart, StepStartPart

# --- helpers --------------------------------------------------------------------------


class AsyncStore:
    """A store whose methods are coroutine functions (optionally only some of them)."""

    def __init__(self, *, async_save: bool = True, async_load: bool = True) -> None:
        self.rows: dict[str, nd.AgentCheckpoint] = {}
        self.saves = 0
        self.loads = 0
        self.save = self._async_save if async_save else self._sync_save
        self.load = self._async_load if async_load else self._sync_load

    async def _async_save(self, checkpoint: nd.AgentCheckpoint) -> None:
        await asyncio.sleep(0)
        self._sync_save(checkpoint)

    def _sync_save(self, checkpoint: nd.AgentCheckpoint) -> None:
        self.saves += 1
        self.rows[checkpoint.run_id] = checkpoint

    async def _async_load(self, run_id: str) -> nd.AgentCheckpoint | None:
        await asyncio.sleep(0)
        return self._sync_load(run_id)

    def _sync_load(self, run_id: str) -> nd.AgentCheckpoint | None:
        self.loads += 1
        return self.rows.get(run_id)


# --- opt-in session -------------------------------------------------------------------


@pytest.mark.spec("S000-01")
async def test_generate_text_saves_at_every_step_boundary() -> None:
    """With a session, generate_text saves after each step, before the next starts."""
    events: list[str] = []
    store = SpyStore(events)
    result = await nd.generate_text(
        model=three_step_model(events),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-1"),
    )
    assert result.status == "completed"
    assert events == [
        "model",
        "save:0:running",
        "model",
        "save:1:running",
        "model",
        "save:2:completed",
    ]
    assert [len(c.messages) for c in store.saved] == [3, 5, 6]


@pytest.mark.spec("S000-01")
async def test_stream_chat_saves_at_every_step_boundary() -> None:
    """stream_chat checkpoints at every step boundary exactly like generate_text."""
    events: list[str] = []
    store = SpyStore(events)
    stream = nd.stream_chat(
        model=three_step_model(events),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-s"),
    )
    parts = await drain(stream)
    assert parts[-1].type == "finish"
    assert events == [
        "model",
        "save:0:running",
        "model",
        "save:1:running",
        "model",
        "save:2:completed",
    ]


@pytest.mark.spec("S000-01")
async def test_without_session_no_store_is_touched(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Without ``session`` nothing is saved or loaded anywhere, not even a default store."""
    touched: list[str] = []
    monkeypatch.setattr(nd.InMemorySessionStore, "save", lambda self, cp: touched.append("save"))
    monkeypatch.setattr(
        nd.InMemorySessionStore, "load", lambda self, *a, **k: touched.append("load")
    )
    monkeypatch.chdir(tmp_path)
    log: list[str] = []
    result = await nd.generate_text(model=three_step_model(), messages="go", tools=make_tools(log))
    stream = nd.stream_chat(model=three_step_model(), messages="go", tools=make_tools(log))
    await drain(stream)
    streamed = await stream.result()
    assert result.status == streamed.status == "completed"
    assert log == ["lookup:a", "lookup:b"] * 2  # the tools did run: it is an agentic call
    assert result.run_id is None and stream.run_id is None and streamed.run_id is None
    assert touched == []
    assert list(tmp_path.iterdir()) == []  # no default store file was created either


@pytest.mark.spec("S000-02")
async def test_run_id_defaults_to_deps_generate_id(deps: nd.Deps) -> None:
    """A session without run_id gets one from ``deps.generate_id()``."""
    store = nd.InMemorySessionStore()
    session = nd.DurableSession(store)
    assert session.store is store and session.run_id is None
    result = await nd.generate_text(
        model=three_step_model(), messages="go", tools=make_tools([]), session=session, deps=deps
    )
    assert result.run_id == "id1"
    assert store.list() == ["id1"]
    assert {c.run_id for c in store.history("id1")} == {"id1"}

    stream = nd.stream_chat(
        model=three_step_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store),
        deps=deps,
    )
    assert stream.run_id == "id2"
    await drain(stream)
    assert store.list() == ["id1", "id2"]


@pytest.mark.spec("S000-02")
async def test_explicit_run_id_is_used_and_no_id_is_generated(deps: nd.Deps) -> None:
    """An explicit run_id is used as is; generate_id is not consulted for it."""
    calls: list[int] = []

    def generate_id() -> str:
        calls.append(1)
        return f"gen{len(calls)}"

    store = nd.InMemorySessionStore()
    result = await nd.generate_text(
        model=three_step_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-42"),
        deps=nd.Deps(clock=deps.clock, generate_id=generate_id, logger=deps.logger),
    )
    assert result.run_id == "run-42"
    assert store.list() == ["run-42"]
    assert calls == []


@pytest.mark.spec("S000-03")
async def test_buffered_result_carries_run_id() -> None:
    """A durable generate_text returns ``GenerateTextResult.run_id``."""
    store = nd.InMemorySessionStore()
    result = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-b"),
    )
    assert isinstance(result, nd.GenerateTextResult)
    assert result.status == "suspended"
    assert result.run_id == "run-b"
    assert store.load("run-b") is not None


@pytest.mark.spec("S000-03")
async def test_stream_run_id_is_set_before_the_first_part(deps: nd.Deps) -> None:
    """``StreamChatResult.run_id`` is set on return, before any part exists."""
    store = nd.InMemorySessionStore()
    stream = nd.stream_chat(
        model=three_step_model(stream_delay=0.001),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store),
        deps=deps,
    )
    assert stream.run_id == "id1"
    assert stream.parts == ()
    assert store.list() == []
    first_seen_run_id = None
    async for part in stream.full_stream:
        if first_seen_run_id is None:
            first_seen_run_id = stream.run_id
            assert isinstance(part, StepStartPart)
    assert first_seen_run_id == "id1"
    assert (await stream.result()).run_id == "id1"
    assert store.list() == ["id1"]


@pytest.mark.spec("S000-04")
async def test_call_without_tools_saves_nothing_and_has_no_run_id() -> None:
    """A single-turn call (no tools) never checkpoints and has run_id None."""
    store = SpyStore()
    model = nd.ScriptedModel(["hello there"])
    result = await nd.generate_text(
        model=model, messages="hi", session=nd.DurableSession(store, run_id="run-x")
    )
    assert result.text == "hello there"
    assert result.run_id is None
    stream = nd.stream_chat(
        model=nd.ScriptedModel(["streamed hello"]),
        messages="hi",
        session=nd.DurableSession(store, run_id="run-y"),
    )
    assert stream.run_id is None
    await drain(stream)
    assert (await stream.result()).run_id is None
    assert store.saved == [] and store.loads == []

    # The same store and session with tools does checkpoint: the difference is the tools.
    agentic = await nd.generate_text(
        model=three_step_model(),
        messages="hi",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-z"),
    )
    assert agentic.run_id == "run-z"
    assert [c.step_index for c in store.saved] == [0, 1, 2]


@pytest.mark.spec("S000-05")
async def test_nothing_retries_a_failed_run_by_itself() -> None:
    """A failed call stays failed until the caller resumes; no hidden retry."""
    store = nd.InMemorySessionStore()
    log: list[str] = []
    model = three_step_model(fail_on={2: RuntimeError("provider down")})
    with pytest.raises(RuntimeError, match="provider down"):
        await nd.generate_text(
            model=model,
            messages="go",
            tools=make_tools(log),
            session=nd.DurableSession(store, run_id="run-f"),
        )
    await asyncio.sleep(0.05)
    assert model.calls == 2
    assert [c.step_index for c in store.history("run-f")] == [0]
    assert asyncio.all_tasks() == {asyncio.current_task()}

    stream = nd.stream_chat(
        model=three_step_model(fail_on={1: RuntimeError("again")}),
        messages="go",
        tools=make_tools(log),
        session=nd.DurableSession(store, run_id="run-g"),
    )
    parts = await drain(stream)
    assert isinstance(parts[-1], ErrorPart)
    await asyncio.sleep(0.05)
    assert store.load("run-g") is None
    assert asyncio.all_tasks() == {asyncio.current_task()}

    # Only an explicit resume continues the run: the caller owns the retry policy.
    done = await nd.resume_from_checkpoint(store, "run-f", model=model, tools=make_tools(log))
    assert done.status == "completed"
    assert model.calls == 4
    assert log == ["lookup:a", "lookup:b"]


# --- the stores the loops use -----------------------------------------------------------


@pytest.mark.spec("S000-06")
@pytest.mark.parametrize(
    ("async_save", "async_load"), [(True, True), (True, False), (False, True), (False, False)]
)
async def test_sync_and_async_store_methods_are_both_accepted(
    async_save: bool, async_load: bool
) -> None:
    """``save``/``load`` may be plain or coroutine functions, in any mix."""
    store = AsyncStore(async_save=async_save, async_load=async_load)
    assert isinstance(store, nd.SessionStore)
    log: list[str] = []
    first = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools(log),
        session=nd.DurableSession(store, run_id="run-a"),
    )
    assert first.status == "suspended"
    assert store.rows["run-a"].status == "suspended"  # an async save was really awaited
    done = await nd.resume_from_checkpoint(
        store,
        "run-a",
        model=approval_model(),
        tools=make_tools(log),
        approval_responses=[approve(first.pending_approvals[0])],
    )
    assert done.status == "completed" and done.text == "finished"
    assert log == ["lookup:a", "drop:stg"]
    assert store.saves == 3  # step 0 running, step 1 suspended, step 2 completed
    assert store.loads >= 1
    assert store.rows["run-a"].status == "completed"


@pytest.mark.spec("S000-06")
async def test_async_store_works_for_the_streaming_twins() -> None:
    """stream_chat and resume_stream_from_checkpoint also await async stores."""
    store = AsyncStore()
    stream = nd.stream_chat(
        model=approval_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-s"),
    )
    await drain(stream)
    pending = await stream.pending_approvals
    assert store.rows["run-s"].status == "suspended"
    resumed = nd.resume_stream_from_checkpoint(
        store,
        "run-s",
        model=approval_model(),
        tools=make_tools([]),
        approval_responses=[approve(pending[0])],
    )
    await drain(resumed)
    assert await resumed.status == "completed"
    assert store.rows["run-s"].status == "completed"


@pytest.mark.spec("S000-07")
async def test_loop_starts_fresh_when_load_returns_none() -> None:
    """The loop treats ``None`` from ``load`` as a new run starting at step 0."""
    store = SpyStore()
    result = await nd.generate_text(
        model=three_step_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="fresh"),
    )
    assert store.loads == ["fresh"]
    assert [c.step_index for c in store.saved] == [0, 1, 2]
    assert result.step_index == 2


@pytest.mark.spec("S000-08")
async def test_store_without_delete_or_list_works_for_every_loop() -> None:
    """``delete``/``list`` are optional; a save+load store runs, suspends, resumes."""
    store = SpyStore()
    assert not hasattr(store, "delete") and not hasattr(store, "list")
    log: list[str] = []
    first = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools(log),
        session=nd.DurableSession(store, run_id="run-m"),
    )
    resumed = nd.resume_stream_from_checkpoint(
        store,
        "run-m",
        model=approval_model(),
        tools=make_tools(log),
        approval_responses=[approve(first.pending_approvals[0])],
    )
    await drain(resumed)
    assert await resumed.status == "completed"
    assert log == ["lookup:a", "drop:stg"]
    assert [c.status for c in store.saved] == ["running", "suspended", "completed"]


@pytest.mark.spec("S000-08")
async def test_loops_never_call_delete() -> None:
    """The loops never call the optional ``delete`` (cleanup tooling only)."""

    class DeleteSpy(SpyStore):
        def __init__(self) -> None:
            super().__init__()
            self.deleted: list[str] = []

        def delete(self, run_id: str) -> None:
            self.deleted.append(run_id)

        def list(self) -> list[str]:
            return sorted({c.run_id for c in self.saved})

    store = DeleteSpy()
    first = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-d"),
    )
    await nd.resume_from_checkpoint(
        store,
        "run-d",
        model=approval_model(),
        tools=make_tools([]),
        approval_responses=[approve(first.pending_approvals[0])],
    )
    # Resuming a completed run and a fresh streaming run: still no delete.
    await nd.resume_from_checkpoint(store, "run-d", model=approval_model(), tools=make_tools([]))
    await drain(
        nd.stream_chat(
            model=three_step_model(),
            messages="go",
            tools=make_tools([]),
            session=nd.DurableSession(store, run_id="run-e"),
        )
    )
    assert store.deleted == []
    assert store.list() == ["run-d", "run-e"]


@pytest.mark.spec("S000-10")
@pytest.mark.parametrize("async_save", [False, True])
async def test_raising_save_is_logged_and_the_run_goes_on(
    deps: nd.Deps, logger: Any, async_save: bool
) -> None:
    """A raising ``save`` is logged via ``deps.logger.error``; the run completes."""

    class BrokenStore:
        def __init__(self) -> None:
            self.attempts = 0

        def load(self, run_id: str) -> None:
            return None

        if async_save:

            async def save(self, checkpoint: nd.AgentCheckpoint) -> None:
                self.attempts += 1
                raise OSError("disk full")

        else:

            def save(self, checkpoint: nd.AgentCheckpoint) -> None:
                self.attempts += 1
                raise OSError("disk full")

    store = BrokenStore()
    log: list[str] = []
    result = await nd.generate_text(
        model=three_step_model(),
        messages="go",
        tools=make_tools(log),
        session=nd.DurableSession(store, run_id="run-broken"),
        deps=deps,
    )
    assert result.status == "completed" and result.text == "all done"
    assert log == ["lookup:a", "lookup:b"]
    assert store.attempts == 3
    assert len(logger.errors) == 3
    assert "run-broken#0" in logger.errors[0] and "disk full" in logger.errors[0]

    stream = nd.stream_chat(
        model=three_step_model(),
        messages="go",
        tools=make_tools(log),
        session=nd.DurableSession(store, run_id="run-broken-2"),
        deps=deps,
    )
    parts = await drain(stream)
    assert not any(isinstance(p, ErrorPart) for p in parts)
    assert isinstance(parts[-1], FinishPart) and parts[-1].status == "completed"
    assert len(logger.errors) == 6


# --- checkpoint shape and status ------------------------------------------------------


@pytest.mark.spec("S000-12")
async def test_checkpoint_is_plain_json_data_with_the_seed_fields(deps: nd.Deps) -> None:
    """The checkpoint dumps to plain JSON with version 1 and every seed field."""
    store = nd.InMemorySessionStore()
    await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-j"),
        deps=deps,
    )
    for checkpoint in (store.load("run-j", step_index=0), store.load("run-j")):
        plain = checkpoint.model_dump(mode="json")
        assert json.loads(json.dumps(plain)) == plain
        assert {
            "version",
            "run_id",
            "step_id",
            "step_index",
            "status",
            "messages",
            "usage",
            "created_at",
            "pending_approvals",
            "agent_path",
        } <= set(plain)
        assert plain["version"] == 1
        assert isinstance(plain["messages"], list)
        assert isinstance(plain["usage"], dict)
        assert isinstance(plain["created_at"], int)
    assert store.load("run-j", step_index=0).model_dump(mode="json")["pending_approvals"] == []
    assert store.load("run-j").model_dump(mode="json")["pending_approvals"][0]["tool_name"] == (
        "drop_table"
    )
    with pytest.raises(pydantic.ValidationError):
        nd.AgentCheckpoint(
            run_id="r", step_index=0, status="running", messages=(), created_at=1, version=2
        )
    with pytest.raises(pydantic.ValidationError):
        nd.AgentCheckpoint(run_id="r", step_index=0, status="paused", messages=(), created_at=1)


@pytest.mark.spec("S000-13")
async def test_step_id_and_stable_run_id_across_legs() -> None:
    """``step_id == f"{run_id}#{step_index}"``; run_id is the same on every leg."""
    store = nd.InMemorySessionStore()
    first = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-13"),
    )
    second = await nd.resume_from_checkpoint(
        store,
        "run-13",
        model=approval_model(),
        tools=make_tools([]),
        approval_responses=[approve(first.pending_approvals[0])],
    )
    assert first.run_id == second.run_id == "run-13"
    history = store.history("run-13")
    assert len(history) == 3
    for info in history:
        assert info.run_id == "run-13"
        assert info.step_id == f"run-13#{info.step_index}"
    assert store.load("run-13").step_id == "run-13#2"
    assert nd.AgentCheckpoint(
        run_id="x", step_index=4, status="running", messages=(), created_at=0
    ).step_id == ("x#4")
    with pytest.raises(pydantic.ValidationError):
        nd.AgentCheckpoint(
            run_id="x", step_id="x#3", step_index=4, status="running", messages=(), created_at=0
        )


@pytest.mark.spec("S000-14")
async def test_step_index_only_grows_across_legs() -> None:
    """step_index keeps growing across three legs and never resets on resume."""
    model_turns = [
        nd.Turn.call("lookup", key="a"),
        nd.Turn.call("drop_table", name="one"),
        nd.Turn.call("drop_table", name="two"),
        "done",
    ]
    store = nd.InMemorySessionStore()
    log: list[str] = []
    leg1 = await nd.generate_text(
        model=nd.ScriptedModel(model_turns),
        messages="go",
        tools=make_tools(log),
        session=nd.DurableSession(store, run_id="run-14"),
    )
    leg2 = await nd.resume_from_checkpoint(
        store,
        "run-14",
        model=nd.ScriptedModel(model_turns),
        tools=make_tools(log),
        approval_responses=[approve(leg1.pending_approvals[0])],
    )
    assert leg2.status == "suspended"
    leg3 = await nd.resume_from_checkpoint(
        store,
        "run-14",
        model=nd.ScriptedModel(model_turns),
        tools=make_tools(log),
        approval_responses=[approve(leg2.pending_approvals[0])],
    )
    assert leg3.status == "completed"
    assert log == ["lookup:a", "drop:one", "drop:two"]
    indices = [h.step_index for h in store.history("run-14")]
    assert indices == [0, 1, 2, 3]
    assert (leg1.step_index, leg2.step_index, leg3.step_index) == (1, 2, 3)
    assert [s.step_index for s in leg2.steps] == [2]
    assert [s.step_index for s in leg3.steps] == [3]

    # Resuming the completed run adds no step and does not reset the index.
    again = await nd.resume_from_checkpoint(
        store, "run-14", model=nd.ScriptedModel(model_turns), tools=make_tools(log)
    )
    assert again.step_index == 3
    assert [h.step_index for h in store.history("run-14")] == [0, 1, 2, 3]


@pytest.mark.spec("S000-15")
async def test_messages_are_the_full_history_and_usage_is_cumulative() -> None:
    """Each checkpoint has the whole history so far and the run's usage total."""
    store = nd.InMemorySessionStore()
    first = await nd.generate_text(
        model=approval_model(),
        messages=[nd.system("be careful"), nd.user("go")],
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-15"),
    )
    second = await nd.resume_from_checkpoint(
        store,
        "run-15",
        model=approval_model(),
        tools=make_tools([]),
        approval_responses=[approve(first.pending_approvals[0])],
    )
    final = second.messages
    cp0 = store.load("run-15", step_index=0)
    cp1 = store.load("run-15", step_index=1)
    cp2 = store.load("run-15", step_index=2)
    assert [m.role for m in cp0.messages] == ["system", "user", "assistant", "tool"]
    assert cp0.messages == final[:4]
    assert cp1.messages[:4] == final[:4] and cp1.messages[4].role == "assistant"
    assert cp1.messages[4].tool_calls == final[4].tool_calls
    assert cp2.messages == final
    assert [m.role for m in cp2.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert cp0.usage == usage(1)
    assert cp1.usage == usage(1) + usage(2)
    assert cp2.usage == usage(1) + usage(2) + usage(3)
    assert cp2.usage.total_tokens == 12


@pytest.mark.spec("S000-16")
async def test_created_at_comes_from_the_injected_clock(clock: Any, deps: nd.Deps) -> None:
    """``created_at`` is ``deps.clock.now()`` at the moment of each save."""

    @nd.tool
    def lookup(key: str) -> str:
        """Look a key up (takes one simulated second)."""
        clock.advance(1_000)
        return key

    @nd.tool(needs_approval=True)
    def drop_table(name: str) -> str:
        """Drop a table (takes five simulated seconds)."""
        clock.advance(5_000)
        return name

    start = clock.now()
    store = nd.InMemorySessionStore()
    first = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=[lookup, drop_table],
        session=nd.DurableSession(store, run_id="run-16"),
        deps=deps,
    )
    clock.advance(60_000)  # the human answers a minute later
    await nd.resume_from_checkpoint(
        store,
        "run-16",
        model=approval_model(),
        tools=[lookup, drop_table],
        approval_responses=[approve(first.pending_approvals[0])],
        deps=deps,
    )
    assert [h.created_at for h in store.history("run-16")] == [
        start + 1_000,
        start + 1_000,
        start + 1_000 + 60_000 + 5_000,
    ]


@pytest.mark.spec("S000-17")
async def test_pending_approvals_on_the_suspended_checkpoint(deps: nd.Deps) -> None:
    """``pending_approvals`` is set on the suspending checkpoint only."""
    store = nd.InMemorySessionStore()
    first = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-17"),
        deps=deps,
    )
    suspended = store.load("run-17")
    assert suspended.status == "suspended"
    assert suspended.pending_approvals == first.pending_approvals
    (request,) = suspended.pending_approvals
    call = suspended.messages[-1].tool_calls[0]
    assert request.tool_call_id == call.tool_call_id
    assert request.tool_name == "drop_table" and request.input == {"name": "stg"}
    assert request.approval_id != call.tool_call_id
    assert request.agent_path == ()
    assert suspended.agent_path == ()
    assert store.load("run-17", step_index=0).pending_approvals == ()
    await nd.resume_from_checkpoint(
        store,
        "run-17",
        model=approval_model(),
        tools=make_tools([]),
        approval_responses=[approve(request)],
        deps=deps,
    )
    assert store.load("run-17").status == "completed"
    assert store.load("run-17").pending_approvals == ()


@pytest.mark.spec("S000-17")
async def test_agent_path_is_set_on_sub_agent_checkpoints() -> None:
    """Checkpoints written by (nested) sub-agents carry their ``agent_path``."""
    gated_log: list[str] = []

    @nd.tool(needs_approval=True)
    def run_shell(cmd: str) -> str:
        """Run a shell command."""
        gated_log.append(cmd)
        return "ok"

    coder = nd.agent_tool(
        "coder",
        model=nd.ScriptedModel([nd.Turn.call("run_shell", cmd="pytest"), "tests pass"]),
        tools=[run_shell],
    )
    lead = nd.agent_tool(
        "lead",
        model=nd.ScriptedModel([nd.Turn.call("coder", prompt="fix it"), "coder fixed it"]),
        tools=[coder],
    )
    store = nd.InMemorySessionStore()
    result = await nd.generate_text(
        model=nd.ScriptedModel([nd.Turn.call("lead", prompt="ship it"), "shipped"]),
        messages="go",
        tools=[lead],
        session=nd.DurableSession(store, run_id="run-p"),
    )
    assert result.status == "suspended"
    (request,) = result.pending_approvals
    assert request.agent_path == ("lead", "coder")
    assert gated_log == []

    lead_key = "run-p::lead#call_1_0"
    coder_key = f"{lead_key}::coder#call_1_0"
    assert set(store.list()) == {"run-p", lead_key, coder_key}
    assert store.load("run-p").agent_path == ()
    assert store.load(lead_key).agent_path == ("lead",)
    assert store.load(coder_key).agent_path == ("lead", "coder")
    assert store.load(coder_key).status == "suspended"
    assert store.load(coder_key).pending_approvals[0].agent_path == ("lead", "coder")


@pytest.mark.spec("S000-18")
async def test_running_is_saved_after_each_step_while_the_loop_goes_on() -> None:
    """Status ``running`` marks a completed step after which the loop continued."""
    events: list[str] = []
    store = SpyStore(events)
    await nd.generate_text(
        model=three_step_model(events),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-18"),
    )
    statuses = [c.status for c in store.saved]
    assert statuses == ["running", "running", "completed"]
    # Every ``running`` save is followed by another model call: the loop did go on.
    for i, event in enumerate(events):
        if event.endswith(":running"):
            assert events[i + 1] == "model"
    # A running checkpoint ends with the step's tool results.
    assert all(c.messages[-1].role == "tool" for c in store.saved if c.status == "running")


@pytest.mark.spec("S000-19")
async def test_suspended_on_client_mode_approval() -> None:
    """A client-mode approval break saves ``suspended`` with pending approvals."""
    store = nd.InMemorySessionStore()
    log: list[str] = []
    result = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools(log),
        session=nd.DurableSession(store, run_id="run-19"),
    )
    assert result.status == "suspended" and result.finish_reason == "suspended"
    checkpoint = store.load("run-19")
    assert checkpoint.status == "suspended"
    assert len(checkpoint.pending_approvals) == 1
    assert checkpoint.messages[-1].role == "assistant"
    assert log == ["lookup:a"]  # the gated call did not run


@pytest.mark.spec("S000-19")
async def test_client_tool_break_is_suspended_without_pending_approvals() -> None:
    """A break caused only by a client tool is ``suspended`` with no approvals."""
    pick = nd.client_tool("pick_file", "Ask the user to pick a file.")
    store = nd.InMemorySessionStore()
    result = await nd.generate_text(
        model=nd.ScriptedModel([nd.Turn.call("pick_file"), "thanks"]),
        messages="go",
        tools=[pick],
        session=nd.DurableSession(store, run_id="run-c"),
    )
    assert result.status == "suspended"
    assert result.pending_approvals == ()
    assert [c.tool_name for c in result.pending_tool_calls] == ["pick_file"]
    checkpoint = store.load("run-c")
    assert checkpoint.status == "suspended"
    assert checkpoint.pending_approvals == ()


@pytest.mark.spec("S000-20")
@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("ending", ["final_text", "stop_condition", "max_steps"])
async def test_completed_on_final_text_stop_condition_or_runaway_guard(
    ending: str, streaming: bool
) -> None:
    """The last checkpoint is ``completed`` whichever way the run ended."""
    forever = nd.ScriptedModel([nd.Turn.call("lookup", key=str(i)) for i in range(10)])
    kwargs: dict[str, Any] = {"model": forever}
    expected_reason, expected_last = {
        "final_text": ("stop", 2),
        "stop_condition": ("stop_condition", 0),
        "max_steps": ("max_steps", 2),
    }[ending]
    if ending == "final_text":
        kwargs["model"] = three_step_model()
    elif ending == "stop_condition":
        kwargs["stop_when"] = nd.step_count_is(1)
    else:
        kwargs["max_steps"] = 3
    store = nd.InMemorySessionStore()
    session = nd.DurableSession(store, run_id="run-20")
    if streaming:
        stream = nd.stream_chat(messages="go", tools=make_tools([]), session=session, **kwargs)
        await drain(stream)
        result = await stream.result()
    else:
        result = await nd.generate_text(
            messages="go", tools=make_tools([]), session=session, **kwargs
        )
    assert result.status == "completed"
    assert result.finish_reason == expected_reason
    history = store.history("run-20")
    assert history[-1].status == "completed"
    assert history[-1].step_index == expected_last
    assert history[-1].finish_reason == expected_reason
    assert all(h.status == "running" for h in history[:-1])


@pytest.mark.spec("S000-21")
async def test_saved_messages_never_change_and_prefixes_stay_byte_identical() -> None:
    """Later steps and legs never alter a saved snapshot; prefixes stay identical."""
    store = nd.InMemorySessionStore()
    history_in = [nd.system("sys"), nd.user("go")]
    snapshot_in = [m.model_dump_json() for m in history_in]
    model1 = approval_model(keep_requests=None)
    first = await nd.generate_text(
        model=model1,
        messages=history_in,
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-21"),
    )
    assert [m.model_dump_json() for m in history_in] == snapshot_in  # caller's list untouched
    frozen = {
        h.step_index: nd.serialize_checkpoint(store.load("run-21", step_index=h.step_index))
        for h in store.history("run-21")
    }
    leg1_messages = first.messages

    model2 = approval_model(keep_requests=None)
    await nd.resume_from_checkpoint(
        store,
        "run-21",
        model=model2,
        tools=make_tools([]),
        approval_responses=[approve(first.pending_approvals[0])],
    )
    # The snapshots saved in leg 1 are unchanged after leg 2.
    for step_index, text in frozen.items():
        assert nd.serialize_checkpoint(store.load("run-21", step_index=step_index)) == text
    assert first.messages is leg1_messages
    # Every later checkpoint starts with the earlier checkpoint's messages, byte for byte.
    snapshots = [store.load("run-21", step_index=h.step_index) for h in store.history("run-21")]
    for earlier, later in itertools.pairwise(snapshots):
        n = len(earlier.messages)
        assert [m.model_dump_json() for m in later.messages[:n]] == [
            m.model_dump_json() for m in earlier.messages
        ]
    # Each model request extends the previous one byte for byte, across the resume leg too.
    requests = [*model1.requests, *model2.requests]
    assert len(requests) == 3
    for earlier, later in itertools.pairwise(requests):
        n = len(earlier.messages)
        assert [m.model_dump_json() for m in later.messages[:n]] == [
            m.model_dump_json() for m in earlier.messages
        ]


async def test_a_store_that_takes_the_hint_is_told_each_save_extends_the_last(
    tmp_path: Any,
) -> None:
    """Each save after the first names the history saved before it; loads still verify."""
    hints: list[tuple[tuple[nd.Message, ...], Any]] = []

    class Recording(nd.SqliteSessionStore):
        def save_with_events(self, checkpoint: Any, events: Any, **kwargs: Any) -> Any:
            hints.append((checkpoint.messages, kwargs.get("extends")))
            return super().save_with_events(checkpoint, events, **kwargs)

    @nd.tool
    def ping(i: int) -> str:
        """Ping."""
        return f"pong {i}"

    turns: list[Any] = [nd.Turn(tool_calls=[("ping", {"i": i})]) for i in range(4)]
    model = nd.ScriptedModel([*turns, nd.Turn(text="done")], mode="sequential")
    store = Recording(tmp_path / "h.db")
    result = await nd.generate_text(
        model=model, messages="go", tools=[ping], session=nd.DurableSession(store, "r")
    )
    assert len(hints) == 5
    for (before, _), (after, extends) in itertools.pairwise(hints):
        assert extends is before and after[: len(before)] == before
    store.close()
    with nd.SqliteSessionStore(tmp_path / "h.db") as fresh:
        loaded = fresh.load("r")
        assert loaded is not None and loaded.messages == result.messages
