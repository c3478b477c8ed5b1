"""The persisted event log at loop level: offsets, replay, live tail, attempts, the fold."""

from __future__ import annotations

import asyncio

import pytest

import nbdurable as nd
from nbdurable import events as ev


@nd.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@nd.tool(needs_approval=True)
def drop(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"


def two_step_model(**kw: object) -> nd.ScriptedModel:
    return nd.ScriptedModel(
        [nd.Turn.call("lookup", "Looking it up.", key="a"), "The value is known."], **kw
    )


async def test_every_part_becomes_an_event_with_gap_free_offsets(
    store: nd.InMemorySessionStore,
) -> None:
    stream = nd.stream_chat(
        model=two_step_model(),
        messages="go",
        tools=[lookup],
        session=nd.DurableSession(store, "r1"),
    )
    parts = [p async for p in stream.full_stream]
    events = await nd.read_events(store, "r1")
    assert [e.offset for e in events] == list(range(1, len(events) + 1))
    types = [e.type for e in events]
    assert types[0] == ev.RUN_STARTED and types[-1] == ev.RUN_FINISHED
    for expected in (
        ev.STEP_START,
        ev.MODEL_ATTEMPT_STARTED,
        ev.MODEL_DELTA,
        ev.MODEL_COMPLETED,
        ev.TOOL_CALL,
        ev.TOOL_RESULT,
        ev.STEP_FINISH,
        ev.CHECKPOINT_SAVED,
    ):
        assert expected in types
    # the events carry the parts the in-process stream showed, in the same order
    replayed = [p for p in (e.to_part() for e in events) if p is not None]
    assert replayed == parts
    assert {e.attempt_id for e in events if e.type == ev.MODEL_DELTA} <= {
        e.attempt_id for e in events if e.type == ev.MODEL_ATTEMPT_STARTED
    }


async def test_read_events_after_and_unknown_runs(store: nd.InMemorySessionStore) -> None:
    await nd.generate_text(
        model=two_step_model(),
        messages="go",
        tools=[lookup],
        session=nd.DurableSession(store, "r1"),
    )
    everything = await nd.read_events(store, "r1")
    assert await nd.read_events(store, "r1", after=3) == everything[3:]
    assert await nd.read_events(store, "r1", after=len(everything)) == []
    with pytest.raises(nd.RunNotFoundError):
        await nd.read_events(store, "nope")


async def test_checkpoint_events_commit_with_their_checkpoint(
    store: nd.InMemorySessionStore,
) -> None:
    await nd.generate_text(
        model=two_step_model(),
        messages="go",
        tools=[lookup],
        session=nd.DurableSession(store, "r1"),
    )
    saved = [e for e in await nd.read_events(store, "r1") if e.type == ev.CHECKPOINT_SAVED]
    assert [(e.step_index, e.payload["status"]) for e in saved] == [
        (0, "running"),
        (1, "completed"),
    ]


async def test_offsets_continue_across_resume_legs(store: nd.InMemorySessionStore) -> None:
    model = nd.ScriptedModel([nd.Turn.call("drop", name="t"), "done"])
    first = await nd.generate_text(
        model=model, messages="go", tools=[drop], session=nd.DurableSession(store, "r1")
    )
    first_leg = await nd.read_events(store, "r1")
    assert first_leg[-1].type == ev.RUN_SUSPENDED
    approval = first.pending_approvals[0]
    await nd.resume_from_checkpoint(
        store,
        "r1",
        model=model,
        tools=[drop],
        approval_responses=[
            nd.ToolApprovalResponse(approval_id=approval.approval_id, approved=True)
        ],
    )
    both = await nd.read_events(store, "r1")
    assert [e.offset for e in both] == list(range(1, len(both) + 1))
    second_leg = both[len(first_leg) :]
    assert second_leg[0].type == ev.RUN_STARTED and second_leg[0].payload["resumed"] is True
    assert [e.type for e in second_leg[1:3]] == [ev.APPROVAL_RESOLVED, ev.TOOL_RESULT]


@pytest.mark.spec("S004-17", "S004-18")
async def test_subscribe_replays_then_follows_live_and_ends_at_the_terminal_event(
    store: nd.InMemorySessionStore,
) -> None:
    """A subscriber joining mid-run gets everything after its offset."""
    model = nd.ScriptedModel(
        [nd.Turn.call("lookup", "one two three four five six", key="a"), "seven eight nine"],
        stream_delay=0.01,
    )
    stream = nd.stream_chat(
        model=model, messages="go", tools=[lookup], session=nd.DurableSession(store, "r1")
    )
    while not (await _events_or_empty(store, "r1")):
        await asyncio.sleep(0.005)
    early = [e async for e in _take(nd.subscribe(store, "r1"), 3)]
    late = [e async for e in nd.subscribe(store, "r1", after=early[-1].offset)]
    await stream.result()
    everything = await nd.read_events(store, "r1")
    assert early + late == everything  # no gap, no duplicate at the seam
    assert late[-1].type == ev.RUN_FINISHED
    # a finished run still replays in full, and a subscriber at its end returns at once
    assert [e async for e in nd.subscribe(store, "r1")] == everything
    assert [e async for e in nd.subscribe(store, "r1", after=everything[-1].offset)] == []


@pytest.mark.spec("S004-05", "S004-28")
async def test_cancelling_a_subscriber_never_cancels_the_run(
    store: nd.InMemorySessionStore,
) -> None:
    """Dropping a watcher leaves the run running."""
    model = nd.ScriptedModel(["a b c d e f g h"], stream_delay=0.01)
    stream = nd.stream_chat(
        model=model, messages="go", tools=[lookup], session=nd.DurableSession(store, "r1")
    )
    await asyncio.sleep(0.02)

    async def watch() -> None:
        async for _ in nd.subscribe(store, "r1"):
            pass

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.02)
    watcher.cancel()
    result = await stream.result()
    assert result.text == "a b c d e f g h"
    assert (await nd.read_events(store, "r1"))[-1].type == ev.RUN_FINISHED


@pytest.mark.spec("S003-22")
async def test_deltas_are_persisted_before_the_stream_shows_them(
    store: nd.InMemorySessionStore,
) -> None:
    """Every delta a consumer sees is already in the log."""
    model = nd.ScriptedModel(["one two three four five"], stream_delay=0.005)
    stream = nd.stream_chat(
        model=model, messages="go", tools=[lookup], session=nd.DurableSession(store, "r1")
    )
    seen = 0
    async for part in stream.full_stream:
        if part.type == "text-delta":
            seen += 1
            logged = [e for e in store.read_events("r1") if e.type == ev.MODEL_DELTA]
            assert len(logged) >= seen


@pytest.mark.spec("S003-26", "S004-12", "S004-13")
async def test_failed_attempt_then_retry_leg_folds_to_clean_text(
    store: nd.InMemorySessionStore,
) -> None:
    """A failed attempt's partial output is dropped by the fold."""
    model = nd.ScriptedModel(
        [
            nd.Turn.call("lookup", key="a"),
            nd.Turn(text="garbled partial", error=nd.ModelError("connection reset")),
        ]
    )
    stream = nd.stream_chat(
        model=model, messages="go", tools=[lookup], session=nd.DurableSession(store, "r1")
    )
    with pytest.raises(nd.ModelError):
        await stream.result()
    events = await nd.read_events(store, "r1")
    failed = [e for e in events if e.type == ev.MODEL_ATTEMPT_FAILED]
    assert failed[0].payload["failure_kind"] == "model"
    view = nd.fold_events(events)
    assert view.status == "error" and view.steps[1].provisional_text == ""
    # the next leg re-runs step 1 with a new attempt and clean output
    fixed = nd.ScriptedModel([nd.Turn.call("lookup", key="a"), "clean answer"])
    await nd.resume_stream_from_checkpoint(store, "r1", model=fixed, tools=[lookup]).result()
    events = await nd.read_events(store, "r1")
    attempts = [
        e.attempt_id for e in events if e.type == ev.MODEL_ATTEMPT_STARTED and e.step_index == 1
    ]
    assert len(set(attempts)) == 2
    view = nd.fold_events(events)
    assert view.status == "completed" and view.text == "clean answer"
    assert view.steps[1].attempts == 2


@pytest.mark.spec("S004-24")
async def test_fold_hides_resolved_approvals_after_a_reconnect(
    store: nd.InMemorySessionStore,
) -> None:
    """Approvals settled while the subscriber was away are not pending any more."""
    model = nd.ScriptedModel([nd.Turn.call("drop", name="t"), "done"])
    first = await nd.generate_text(
        model=model, messages="go", tools=[drop], session=nd.DurableSession(store, "r1")
    )
    seen = await nd.read_events(store, "r1")
    view = nd.fold_events(seen)
    assert view.status == "suspended" and list(view.pending_approvals) == [
        first.pending_approvals[0].approval_id
    ]
    await nd.resume_from_checkpoint(
        store,
        "r1",
        model=model,
        tools=[drop],
        approval_responses=[
            nd.ToolApprovalResponse(
                approval_id=first.pending_approvals[0].approval_id, approved=False
            )
        ],
    )
    view = nd.fold_events(await nd.read_events(store, "r1", after=view.last_offset), view)
    assert view.pending_approvals == {} and view.status == "completed"


async def test_fold_is_the_same_from_zero_and_incrementally(
    store: nd.InMemorySessionStore,
) -> None:
    await nd.stream_chat(
        model=two_step_model(),
        messages="go",
        tools=[lookup],
        session=nd.DurableSession(store, "r1"),
    ).result()
    events = await nd.read_events(store, "r1")
    whole = nd.fold_events(events)
    piecewise = nd.RunView()
    for event in events:
        piecewise.apply(event)
        piecewise.apply(event)  # re-delivered events are skipped
    assert piecewise == whole
    assert whole.text == "The value is known." and whole.steps[0].tool_results[0]["result"] == (
        "value of a"
    )


async def test_calls_without_an_event_store_still_work() -> None:
    class PlainStore:
        def __init__(self) -> None:
            self.saved: list[nd.AgentCheckpoint] = []

        def save(self, checkpoint: nd.AgentCheckpoint) -> None:
            self.saved.append(checkpoint)

        def load(self, run_id: str) -> nd.AgentCheckpoint | None:
            return self.saved[-1] if self.saved else None

    plain = PlainStore()
    stream = nd.stream_chat(
        model=two_step_model(),
        messages="go",
        tools=[lookup],
        session=nd.DurableSession(plain, "r1"),
    )
    assert await stream.text == "The value is known."
    with pytest.raises(nd.ConfigurationError, match="no event log"):
        await nd.read_events(plain, "r1")


async def _events_or_empty(store: nd.InMemorySessionStore, run_id: str) -> list[nd.Event]:
    try:
        return list(store.read_events(run_id))
    except nd.RunNotFoundError:
        return []


async def _take(iterator, n: int):  # type: ignore[no-untyped-def]
    count = 0
    async for item in iterator:
        yield item
        count += 1
        if count == n:
            return


def test_a_tool_call_announced_again_by_a_recovery_leg_folds_to_one_call() -> None:
    # what a leg resuming after a crash mid-tool writes: the step's call once more
    call = {"type": "tool_call", "tool_call_id": "c1", "tool_name": "lookup", "args": {"key": "a"}}
    result = {"tool_call_id": "c1", "tool_name": "lookup", "result": "v", "is_error": False}
    log = [
        (ev.RUN_STARTED, None, {}),
        (ev.TOOL_CALL, 0, {"tool_call": call}),
        (ev.RUN_STARTED, None, {}),
        (ev.TOOL_CALL, 0, {"tool_call": call}),
        (ev.TOOL_RESULT, 0, {"result": result}),
        (ev.TOOL_RESULT, 0, {"result": result}),
    ]
    events = [
        nd.Event(run_id="r", offset=i, type=t, step_index=s, payload=p, created_at=i)
        for i, (t, s, p) in enumerate(log, start=1)
    ]
    step = nd.fold_events(events).steps[0]
    assert step.tool_calls == [call] and step.tool_results == [result]
