"""A Temporal step's store writes share commits, as an embedded leg's do (issue 39).

The ``model_step`` activity is run here through the SDK's ``ActivityEnvironment``
on a SQLite store, the store's write calls counted: a steady step is two
commits in the activity (the model's count; the journal, the events and the
first call's start) and one checkpoint write in the mirror, where it made
seven transactions in the activity and two in the mirror before. What the
store holds afterwards is what the separate writes left.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment

import nbdurable as nd
from nbdurable.messages import ToolResultPart
from nbdurable.models._base import ModelRequest
from nbdurable.runs import RunPatch
from nbdurable.runtime import Agent, DurableRuntime
from nbdurable.runtime._limits import Limits
from nbdurable.temporal._activities import RunActivities

WRITES = ("rt_commit", "rt_update", "rt_intent", "rt_journal", "append_events", "save_with_events")


@nd.tool
async def tick(n: int) -> str:
    """Count one step."""
    return f"tick {n}"


def _counted(store: Any) -> Counter[str]:
    """Count ``store``'s write calls from now on (the real store answers them)."""
    calls: Counter[str] = Counter()
    for name in WRITES:
        method = getattr(store, name)

        def counted(*args: Any, _name: str = name, _method: Any = method, **kw: Any) -> Any:
            calls[_name] += 1
            return _method(*args, **kw)

        setattr(store, name, counted)
    return calls


async def _claimed(
    tmp_path: Path, turns: list[nd.Turn] | None = None, **options: Any
) -> tuple[DurableRuntime, RunActivities, ActivityEnvironment, str]:
    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    if turns is None:
        turns = [
            nd.Turn(tool_calls=[{"id": f"call-{n}", "name": "tick", "args": {"n": n}}])
            for n in (1, 2)
        ]
    model = nd.ScriptedModel([*turns, "done"], mode="sequential")
    agent = Agent(
        "a",
        model=model,
        tools=[tick],
        version="1",
        tool_recovery={"tick": "safe"},
        max_tool_concurrency=1,
    )
    rt = DurableRuntime(store=store, agents=[agent], **options)
    run = await rt.submit("a", "Go.")
    record = rt.runtime_store.rt_get(run.run_id)
    assert record is not None
    rt.runtime_store.rt_update(
        run.run_id,
        RunPatch(state="running", fence=record.fence + 1, lease_owner=f"temporal:{run.run_id}"),
        fence=record.fence,
    )
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=run.run_id)
    return rt, RunActivities(rt), env, run.run_id


def _request() -> dict[str, Any]:
    return ModelRequest(messages=[nd.user("Go.")]).model_dump(mode="json")


async def test_a_step_is_two_commits_and_its_intents_ride_the_next_one(tmp_path: Path) -> None:
    rt, acts, env, run_id = await _claimed(tmp_path)
    calls = _counted(rt.store)
    scope = {"run_id": run_id, "path": [], "log": run_id, "carries": True, "completed": []}

    first = await env.run(acts.model_step, scope, 0, _request())

    assert calls == Counter({"rt_commit": 2})  # the count; journal + events + the call's start
    assert first["answered"] and len(first["results"]) == 1
    (intent,) = rt.runtime_store.rt_intents(run_id)
    assert intent.state == "started"  # completed by the next step's first commit
    assert rt.runtime_store.rt_journaled(run_id, 0) is not None
    record = rt.runtime_store.rt_get(run_id)
    assert (record.operations, record.model_attempts) == (2, 0)

    calls.clear()
    ((call_id, result),) = first["results"].items()
    carried = {
        "run_id": run_id,
        "tool_call_id": call_id,
        "tool_name": "tick",
        "step_index": 0,
        "state": "completed",
        "result": result,
    }
    later = {**scope, "completed": [carried], "journal": False}
    second = await env.run(acts.model_step, later, 1, _request())

    assert calls == Counter({"rt_commit": 2})
    states = {i.tool_call_id: i.state for i in rt.runtime_store.rt_intents(run_id)}
    assert states[call_id] == "completed" and len(states) == 2
    assert second["answered"]


async def test_an_older_workflow_gets_its_intents_completed_in_the_activity(
    tmp_path: Path,
) -> None:
    rt, acts, env, run_id = await _claimed(tmp_path)
    calls = _counted(rt.store)
    scope = {"run_id": run_id, "path": [], "log": run_id}  # carries nothing

    await env.run(acts.model_step, scope, 0, _request())

    assert calls == Counter({"rt_commit": 3})  # and the completed intent at the end
    (intent,) = rt.runtime_store.rt_intents(run_id)
    assert intent.state == "completed"


async def test_a_leg_ending_after_early_calls_completes_their_intents(tmp_path: Path) -> None:
    rt, acts, env, run_id = await _claimed(tmp_path)
    scope = {"run_id": run_id, "path": [], "log": run_id, "carries": True, "completed": []}
    first = await env.run(acts.model_step, scope, 0, _request())
    ((call_id, result),) = first["results"].items()
    fence = rt.runtime_store.rt_get(run_id).fence
    intent = {
        "run_id": run_id,
        "tool_call_id": call_id,
        "tool_name": "tick",
        "step_index": 0,
        "state": "completed",
        "result": result,
    }
    entries = [{"log": run_id, "intent": intent}]
    changes = {"state": "completed", "result_text": "stopped"}

    await env.run(acts.finish_leg, run_id, entries, changes, fence)

    (written,) = rt.runtime_store.rt_intents(run_id)
    assert written.state == "completed"
    assert ToolResultPart.model_validate(written.result).result == "tick 1"
    assert rt.runtime_store.rt_get(run_id).state == "completed"


async def test_a_checkpoint_is_mirrored_with_the_events_after_it(tmp_path: Path) -> None:
    rt, acts, env, run_id = await _claimed(tmp_path)
    checkpoint = nd.AgentCheckpoint(
        run_id=run_id, step_index=0, messages=[nd.user("Go.")], status="running", created_at=1
    )
    entries = [
        {"log": run_id, "part": {"type": "step-start", "step_index": 0}},
        {"log": run_id, "checkpoint": checkpoint.model_dump(mode="json")},
        {"log": run_id, "part": {"type": "step-start", "step_index": 1}},
    ]
    calls = _counted(rt.store)

    await env.run(acts.mirror, entries)

    assert calls == Counter({"save_with_events": 1})
    types = [e.type for e in rt.store.read_events(run_id)][-3:]
    assert types == ["step_start", "checkpoint_saved", "step_start"]
    assert rt.store.load(run_id) is not None


async def test_a_call_that_raises_stops_the_calls_after_it(tmp_path: Path) -> None:
    calls = [{"id": f"call-{n}", "name": "tick", "args": {"n": n}} for n in (1, 2, 3)]
    # the model call and one tool call fit; the second call is over the limit
    limits = Limits(max_operations=2)
    rt, acts, env, run_id = await _claimed(tmp_path, [nd.Turn(tool_calls=calls)], limits=limits)
    scope = {"run_id": run_id, "path": [], "log": run_id, "carries": True, "completed": []}

    step = await env.run(acts.model_step, scope, 0, _request())

    # the workflow runs the others as run_tool activities, which fail the run for the limit
    assert list(step["results"]) == ["call-1"]
    assert [i.tool_call_id for i in rt.runtime_store.rt_intents(run_id)] == ["call-1"]


async def test_each_checkpoint_takes_the_events_after_it_up_to_the_next(tmp_path: Path) -> None:
    rt, acts, env, run_id = await _claimed(tmp_path)
    child = f"{run_id}/helper"

    def saved(log: str, step: int) -> dict[str, Any]:
        checkpoint = nd.AgentCheckpoint(
            run_id=log, step_index=step, messages=[nd.user("Go.")], status="running", created_at=1
        )
        return {"log": log, "checkpoint": checkpoint.model_dump(mode="json")}

    def start(log: str, step: int) -> dict[str, Any]:
        return {"log": log, "part": {"type": "step-start", "step_index": step}}

    entries = [
        start(run_id, 0),
        saved(run_id, 0),
        start(run_id, 1),
        start(child, 0),
        saved(child, 0),
        saved(run_id, 1),
        start(run_id, 2),
    ]
    calls = _counted(rt.store)

    await env.run(acts.mirror, entries)

    assert calls == Counter({"save_with_events": 3})
    mine = [(e.type, e.step_index) for e in rt.store.read_events(run_id)][-5:]
    assert mine == [
        ("step_start", 0),
        ("checkpoint_saved", 0),
        ("step_start", 1),  # with the checkpoint before it, the child's entries between
        ("checkpoint_saved", 1),
        ("step_start", 2),
    ]
    assert [e.type for e in rt.store.read_events(child)] == ["step_start", "checkpoint_saved"]
    assert rt.store.load(run_id).step_index == 1


async def test_a_workers_dispatcher_looks_every_idle_poll_interval(tmp_path: Path) -> None:
    from nbdurable.temporal import TemporalEngine

    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    rt = DurableRuntime(store=store, agents=[], poll_interval=0.05, idle_poll_interval=1.0)
    periods = []
    for adopt_after in (None, 2.0, 0.5):
        engine = TemporalEngine(adopt_after=adopt_after)
        engine.runtime = rt
        periods.append(engine.poll_period())
    # a client dispatches at once; a worker adopts runs pending for adopt_after anyway
    assert periods == [0.05, 1.0, 0.25]
