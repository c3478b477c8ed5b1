"""Streaming model output and stream reconnect, as the seeds state them.

Runtime-level items (``run.stream()``, observers, the stream setting fixed at
submission, the payload limit per delta) are proven here at the loop level,
which is what the runtime drives; the runtime issue adds its own tests. Seed
004's differences (finished runs replay, no "already completed" error) are the
ones listed at the end of shared/SEED-CHECKLIST.md.
"""

from __future__ import annotations

import asyncio

import pytest

import nbdurable as nd
from nbdurable import events as ev


@nd.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


class Crash(BaseException):
    """The process dying mid-step."""


@nd.tool
def crash() -> str:
    """Die."""
    raise Crash


def streamed(text: str = "alpha beta gamma delta", **kw: object) -> nd.ScriptedModel:
    return nd.ScriptedModel([nd.Turn.call("lookup", text, key="a"), "final words here"], **kw)


async def run_logged(store: nd.InMemorySessionStore, model: nd.ScriptedModel) -> list[nd.Event]:
    await nd.stream_chat(
        model=model, messages="go", tools=[lookup, crash], session=nd.DurableSession(store, "r")
    ).result()
    return list(await nd.read_events(store, "r"))


@pytest.mark.spec("S003-20")
async def test_attempt_events_carry_operation_and_unique_attempt_ids(
    store: nd.InMemorySessionStore,
) -> None:
    """model_attempt_started, model_delta (and failures) carry operation and attempt ids."""
    events = await run_logged(store, streamed())
    model_events = [e for e in events if e.type.startswith("model_")]
    assert {e.type for e in model_events} == {
        ev.MODEL_ATTEMPT_STARTED,
        ev.MODEL_DELTA,
        ev.MODEL_COMPLETED,
    }
    assert all(e.operation_id and e.attempt_id for e in model_events)
    starts = [e for e in events if e.type == ev.MODEL_ATTEMPT_STARTED]
    assert len({e.attempt_id for e in starts}) == len(starts) == 2
    assert [e.operation_id for e in starts] == ["r:model:0", "r:model:1"]


@pytest.mark.spec("S003-21")
async def test_deltas_wrap_normalized_generation_events(
    store: nd.InMemorySessionStore,
) -> None:
    """A model_delta payload is {'type': 'text_delta', 'turn': n, 'delta': ...}."""
    events = await run_logged(store, streamed("Hello world"))
    first = next(e for e in events if e.type == ev.MODEL_DELTA)
    assert first.payload == {"type": "text_delta", "turn": 0, "delta": "Hello "}


@pytest.mark.spec("S003-23")
async def test_model_completed_carries_the_attempt_and_the_validated_response(
    store: nd.InMemorySessionStore,
) -> None:
    """model_completed has the attempt's id and the normalized response."""
    events = await run_logged(store, streamed("Hello world"))
    started = next(e for e in events if e.type == ev.MODEL_ATTEMPT_STARTED)
    completed = next(e for e in events if e.type == ev.MODEL_COMPLETED)
    assert completed.attempt_id == started.attempt_id
    response = nd.ModelResponse.model_validate(completed.payload["response"])
    assert response.text == "Hello world" and response.tool_calls[0].tool_name == "lookup"


@pytest.mark.spec("S003-24")
async def test_the_model_checkpoint_commits_before_tools_act_on_it(
    store: nd.InMemorySessionStore,
) -> None:
    """A crash after the response (in a tool) leaves model_completed committed."""
    model = nd.ScriptedModel([nd.Turn.call("crash", "about to crash")])
    with pytest.raises(Crash):
        await nd.generate_text(
            model=model, messages="go", tools=[crash], session=nd.DurableSession(store, "r")
        )
    types = [e.type for e in store.read_events("r")]
    assert ev.MODEL_COMPLETED in types
    assert types.index(ev.MODEL_COMPLETED) < len(types)
    assert store.load("r") is None  # the step itself never completed


@pytest.mark.spec("S003-25")
async def test_failure_kind_model_for_model_errors_local_for_interruptions(
    store: nd.InMemorySessionStore,
) -> None:
    """failure_kind is 'model' for model errors, 'local' for what is not the model's."""
    failing = nd.ScriptedModel([nd.Turn(text="partial", error=ValueError("bad response"))])
    with pytest.raises(ValueError, match="bad response"):
        await nd.stream_chat(
            model=failing, messages="go", tools=[lookup], session=nd.DurableSession(store, "m")
        ).result()
    (failed,) = [e for e in store.read_events("m") if e.type == ev.MODEL_ATTEMPT_FAILED]
    assert (
        failed.payload["failure_kind"] == "model" and failed.payload["error_type"] == "ValueError"
    )

    slow = nd.ScriptedModel(["a b c d e f g h i j"], stream_delay=0.05)
    stream = nd.stream_chat(
        model=slow, messages="go", tools=[lookup], session=nd.DurableSession(store, "c")
    )
    await asyncio.sleep(0.12)
    stream.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stream.result()
    (cancelled,) = [e for e in store.read_events("c") if e.type == ev.MODEL_ATTEMPT_FAILED]
    assert cancelled.payload["failure_kind"] == "local"
    assert store.read_events("c")[-1].type == ev.RUN_ERROR


@pytest.mark.spec("S003-26")
async def test_a_new_attempt_replaces_partial_output_and_failure_discards_it() -> None:
    """The fold keeps only the latest attempt's partial text, and drops failed ones."""

    def event(offset: int, type_: str, attempt: str, delta: str = "") -> nd.Event:
        payload = {"type": "text_delta", "turn": 0, "delta": delta} if delta else {}
        return nd.Event(
            run_id="r",
            offset=offset,
            type=type_,
            step_index=0,
            operation_id="r:model:0",
            attempt_id=attempt,
            payload=payload,
            created_at=0,
        )

    view = nd.fold_events(
        [
            event(1, ev.MODEL_ATTEMPT_STARTED, "a1"),
            event(2, ev.MODEL_DELTA, "a1", "garbled "),
            event(3, ev.MODEL_ATTEMPT_STARTED, "a2"),
            event(4, ev.MODEL_DELTA, "a1", "late junk "),  # a stale delta of the old attempt
            event(5, ev.MODEL_DELTA, "a2", "clean "),
        ]
    )
    assert view.steps[0].provisional_text == "clean " and view.steps[0].attempts == 2
    view.apply(event(6, ev.MODEL_ATTEMPT_FAILED, "a2"))
    assert view.steps[0].provisional_text == ""


@pytest.mark.spec("S003-27", "S003-28")
async def test_recovery_starts_a_new_attempt_and_reuses_completed_steps(
    store: nd.InMemorySessionStore,
) -> None:
    """After a crash mid-model-call, resume re-runs only that step, new attempt."""
    first = nd.ScriptedModel(
        [nd.Turn.call("lookup", "step zero", key="a"), nd.Turn(text="step one", error=Crash())],
        stream_delay=0.001,
    )
    with pytest.raises(Crash):
        await nd.stream_chat(
            model=first, messages="go", tools=[lookup, crash], session=nd.DurableSession(store, "r")
        ).result()
    before = store.read_events("r")
    crashed_attempt = [e for e in before if e.type == ev.MODEL_ATTEMPT_STARTED][-1].attempt_id
    second = nd.ScriptedModel(
        [
            nd.Turn.call("lookup", "step zero", key="a"),
            nd.Turn.call("lookup", "step one again", key="b"),
            "done",
        ]
    )
    await nd.resume_stream_from_checkpoint(store, "r", model=second, tools=[lookup, crash]).result()
    after = store.read_events("r")[len(before) :]
    restarted = [e for e in after if e.type == ev.MODEL_ATTEMPT_STARTED]
    assert restarted[0].step_index == 1 and restarted[0].attempt_id != crashed_attempt
    # step 0 completed before the crash: its deltas are never written again
    assert not [e for e in after if e.type == ev.MODEL_DELTA and e.step_index == 0]
    view = nd.fold_events(store.read_events("r"))
    assert view.steps[1].text == "step one again" and view.text == "done"


@pytest.mark.spec("S003-29")
async def test_checkpoints_hold_completed_responses_never_partial_text(
    store: nd.InMemorySessionStore,
) -> None:
    """What a snapshot holds is completed messages; partial tokens live only in events."""
    failing = nd.ScriptedModel(
        [
            nd.Turn.call("lookup", "fine", key="a"),
            nd.Turn(text="half an ans", error=nd.ModelError("cut")),
        ]
    )
    with pytest.raises(nd.ModelError):
        await nd.stream_chat(
            model=failing, messages="go", tools=[lookup], session=nd.DurableSession(store, "r")
        ).result()
    snapshot = nd.serialize_checkpoint(store.load("r"))
    assert "half an ans" not in snapshot and "fine" in snapshot
    assert any(e.payload.get("delta") == "half " for e in store.read_events("r"))


@pytest.mark.spec("S003-30")
async def test_cursors_replay_from_zero_or_skip_what_a_snapshot_covers(
    store: nd.InMemorySessionStore,
) -> None:
    """After a cursor only later events; from 0 the partial output is rebuilt."""
    events = await run_logged(store, streamed("one two three"))
    saved = next(e for e in events if e.type == ev.CHECKPOINT_SAVED)
    later = [e async for e in nd.subscribe(store, "r", after=saved.offset)]
    assert all(e.offset > saved.offset for e in later)
    assert not [e for e in later if e.type == ev.MODEL_DELTA and e.step_index == 0]
    # replaying only up to the middle of the stream rebuilds the partial output
    upto = next(i for i, e in enumerate(events) if e.type == ev.MODEL_COMPLETED)
    partial = nd.fold_events(events[:upto])
    assert partial.steps[0].provisional_text == "one two three"


@pytest.mark.spec("S003-22", "S004-14")
async def test_run_id_is_known_at_once_and_deltas_persist_first(
    store: nd.InMemorySessionStore,
) -> None:
    """The handle's id exists before any event is read; deltas are persisted first."""
    stream = nd.stream_chat(
        model=streamed(stream_delay=0.002),
        messages="go",
        tools=[lookup],
        session=nd.DurableSession(store, "r"),
    )
    assert stream.run_id == "r" and stream.parts == ()
    async for part in stream.full_stream:
        if part.type == "text-delta":
            logged = "".join(
                e.payload["delta"] for e in store.read_events("r") if e.type == ev.MODEL_DELTA
            )
            shown = "".join(p.delta for p in stream.parts if p.type == "text-delta")
            assert logged.startswith(shown)


@pytest.mark.spec("S004-12", "S004-13")
async def test_a_retried_step_streams_clean_tokens(
    store: nd.InMemorySessionStore,
) -> None:
    """Subscribers drop the failed attempt's tokens; no duplicates, no garble."""
    failing = nd.ScriptedModel([nd.Turn(text="garbled partial", error=nd.ModelError("reset"))])
    with pytest.raises(nd.ModelError):
        await nd.stream_chat(
            model=failing, messages="go", tools=[lookup], session=nd.DurableSession(store, "r")
        ).result()
    # The loop has no checkpoint yet, so the retry is a fresh call on the same run id.
    ok = nd.ScriptedModel(["clean answer"])
    await nd.stream_chat(
        model=ok, messages="go", tools=[lookup], session=nd.DurableSession(store, "r")
    ).result()
    view = nd.fold_events(store.read_events("r"))
    assert view.text == "clean answer" and view.steps[0].provisional_text == ""
    assert "garbled" not in view.text


@pytest.mark.spec("S004-15", "S004-16")
async def test_logged_events_are_resume_points_stream_parts_are_not(
    store: nd.InMemorySessionStore,
) -> None:
    """offset() is (offset, True) and only increases; stream parts have no position."""
    stream = nd.stream_chat(
        model=streamed(), messages="go", tools=[lookup], session=nd.DurableSession(store, "r")
    )
    parts = [p async for p in stream.full_stream]
    events = store.read_events("r")
    offsets = [ev.position(e) for e in events]
    assert all(ok for _, ok in offsets)
    assert [o for o, _ in offsets] == sorted({o for o, _ in offsets})
    assert {ev.position(p) for p in parts} == {(0, False)}


@pytest.mark.spec("S004-17", "S004-18", "S004-19", "S004-20")
async def test_reference_consumer_reconnects_after_its_own_crash(
    store: nd.InMemorySessionStore,
) -> None:
    """Save run_id first, save each offset before handling, skip seen ones,
    clear state at RUN_FINISHED; the run never notices the consumer going away."""
    saved: dict[str, object] = {}
    handled: list[int] = []

    async def consumer(crash_after: int | None) -> None:
        run_id = str(saved["run_id"])
        after = int(saved.get("offset", 0))  # type: ignore[call-overload]
        async for event in nd.subscribe(store, run_id, after=after, wait=True):
            offset, ok = ev.position(event)
            assert ok
            if offset <= after:
                continue  # at or below the saved offset: already handled
            saved["offset"] = offset  # persist before handling
            handled.append(offset)
            if event.type in ev.TERMINAL_EVENTS:
                saved.clear()
                return
            if crash_after is not None and len(handled) >= crash_after:
                raise Crash

    stream = nd.stream_chat(
        model=streamed(" ".join(f"t{i}" for i in range(40)), stream_delay=0.002),
        messages="go",
        tools=[lookup],
        session=nd.DurableSession(store, "r"),
    )
    saved["run_id"] = stream.run_id
    with pytest.raises(Crash):
        await consumer(crash_after=5)
    await consumer(crash_after=None)
    await stream.result()
    assert handled == [e.offset for e in store.read_events("r")]  # every event once, in order
    assert saved == {}  # cleared at the terminal event


@pytest.mark.spec("S004-19")
async def test_the_stream_ends_with_run_error_on_failure(
    store: nd.InMemorySessionStore,
) -> None:
    """RUN_ERROR ends a failed run's stream."""
    failing = nd.ScriptedModel(["x"], fail_on=[1])
    await asyncio.gather(
        nd.stream_chat(
            model=failing, messages="go", tools=[lookup], session=nd.DurableSession(store, "r")
        ).result(),
        return_exceptions=True,
    )
    events = [e async for e in nd.subscribe(store, "r")]
    assert events[-1].type == ev.RUN_ERROR


@pytest.mark.spec("S004-21", "S004-22")
async def test_a_finished_run_still_replays_in_full(
    store: nd.InMemorySessionStore,
) -> None:
    """A finished run replays; its reply is in history."""
    events = await run_logged(store, streamed())
    replay = [e async for e in nd.subscribe(store, "r")]
    assert replay == events and replay[-1].type == ev.RUN_FINISHED
    assert store.load("r").messages[-1].text == "final words here"


@pytest.mark.spec("S004-24")
async def test_approvals_settled_while_away_are_not_asked_again(
    store: nd.InMemorySessionStore,
) -> None:
    """A reconnecting viewer does not see settled approvals as pending."""

    @nd.tool(needs_approval=True)
    def drop(name: str) -> str:
        """Drop a table."""
        return f"dropped {name}"

    model = nd.ScriptedModel(
        [nd.Turn.call("drop", name="t"), nd.Turn.call("drop", name="u"), "done"]
    )
    first = await nd.generate_text(
        model=model, messages="go", tools=[drop], session=nd.DurableSession(store, "r")
    )
    seen = nd.fold_events(store.read_events("r"))
    approval = first.pending_approvals[0]
    assert list(seen.pending_approvals) == [approval.approval_id]
    second = await nd.resume_from_checkpoint(
        store,
        "r",
        model=model,
        tools=[drop],
        approval_responses=[
            nd.ToolApprovalResponse(approval_id=approval.approval_id, approved=True)
        ],
    )
    # the viewer reconnects after its offset: the old approval is gone, the new one shows
    view = nd.fold_events(store.read_events("r", after=seen.last_offset), seen)
    assert list(view.pending_approvals) == [second.pending_approvals[0].approval_id]
