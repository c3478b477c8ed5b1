"""The checkpoint tests: every store (a :class:`~nbdurable.durable.store.HistoryStore`).

Histories are built step by step (each from the previous one, as the loop
builds them); persistence and several handles use the ``reopen`` fixture.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import nbdurable as nd

from ..durable.store import Capability, supports
from ._fixtures import Reopen, require
from ._threads import in_threads

__all__ = [
    "checkpoint",
    "histories",
    "save_run",
    "step_pair",
    "test_a_reopened_store_has_everything",
    "test_bytes_round_trip",
    "test_concurrent_runs_on_one_event_loop",
    "test_empty_history_round_trips",
    "test_the_store_declares_history",
    "test_history_lists_every_save_in_order_without_messages",
    "test_latest_save_wins",
    "test_list_orders_runs_by_creation",
    "test_list_runs_summarises_each_run",
    "test_load_by_step_returns_the_latest_save_at_that_step",
    "test_several_store_instances_in_threads",
    "test_store_calls_from_worker_threads",
    "test_sync_use_from_plain_threads",
    "test_the_loop_checkpoints_into_the_store_and_resumes",
    "test_unknown_run_is_empty",
]

HISTORY = Capability.HISTORY
PERSISTENT = Capability.PERSISTENT
MULTIPROCESS = Capability.MULTIPROCESS


def step_pair(i: int) -> tuple[nd.Message, nd.Message]:
    """The two messages step ``i`` adds: a tool call and its 200-character result."""
    call_id = f"call_{i:07d}"
    return (
        nd.assistant([nd.ToolCallPart(tool_call_id=call_id, tool_name="probe", args={"n": i})]),
        nd.tool_message(
            [
                nd.ToolResultPart(
                    tool_call_id=call_id, tool_name="probe", result=f"{i:07d}" * 28 + "...."
                )
            ]
        ),
    )


def histories(steps: int, first: nd.Message | None = None) -> list[tuple[nd.Message, ...]]:
    """``histories(n)[i]``: the history after step i, each built from the previous one."""
    out: list[tuple[nd.Message, ...]] = []
    messages: tuple[nd.Message, ...] = (first or nd.user("Probe the system."),)
    for i in range(steps):
        messages = (*messages, *step_pair(i))
        out.append(messages)
    return out


def checkpoint(
    run_id: str,
    step_index: int,
    messages: Sequence[nd.Message],
    *,
    status: str = "running",
    created_at: int | None = None,
    **fields: object,
) -> nd.AgentCheckpoint:
    return nd.AgentCheckpoint.model_validate(
        {
            "run_id": run_id,
            "step_index": step_index,
            "status": status,
            "messages": tuple(messages),
            "created_at": 1_700_000_000_000 + step_index if created_at is None else created_at,
            **fields,
        }
    )


def save_run(store: nd.HistoryStore, run_id: str, steps: int) -> list[nd.AgentCheckpoint]:
    saved = [checkpoint(run_id, i, h) for i, h in enumerate(histories(steps))]
    for cp in saved:
        store.save(cp)
    return saved


def test_the_store_declares_history(store: nd.HistoryStore) -> None:
    assert supports(store, HISTORY)
    assert isinstance(store, nd.HistoryStore)
    assert isinstance(store, nd.SessionStore)


def test_unknown_run_is_empty(store: nd.HistoryStore) -> None:
    assert store.load("nope") is None
    assert store.load("nope", step_index=0) is None
    assert store.history("nope") == []
    assert store.list() == []
    assert store.list_runs() == []
    store.delete("nope")  # a no-op


def test_latest_save_wins(store: nd.HistoryStore) -> None:
    h = histories(3)
    store.save(checkpoint("r", 0, h[0]))
    store.save(checkpoint("r", 1, h[1]))
    assert store.load("r") == checkpoint("r", 1, h[1])
    # a save of an earlier step (a rewind in place) still wins: latest save, not highest step
    store.save(checkpoint("r", 0, h[0], status="suspended", finish_reason="suspended"))
    latest = store.load("r")
    assert latest is not None
    assert (latest.step_index, latest.status, latest.finish_reason) == (0, "suspended", "suspended")


def test_history_lists_every_save_in_order_without_messages(store: nd.HistoryStore) -> None:
    saved = save_run(store, "r", 5)
    usage = nd.Usage(input_tokens=7, output_tokens=3, total_tokens=10, cost=0.25)
    request = nd.ToolApprovalRequest(
        approval_id="a1", tool_call_id="c1", tool_name="drop", input={"t": "x"}, token="v1.p.m"
    )
    again = checkpoint(
        "r",
        2,
        saved[2].messages,
        status="suspended",
        usage=usage,
        pending_approvals=(request,),
        agent_path=("child",),
        finish_reason="suspended",
    )
    store.save(again)
    infos = store.history("r")
    assert infos == [cp.info() for cp in [*saved, again]]
    assert [i.step_index for i in infos] == [0, 1, 2, 3, 4, 2]
    assert infos[-1].message_count == 7 and infos[-1].pending_approvals == (request,)
    assert not hasattr(infos[0], "messages")


def test_load_by_step_returns_the_latest_save_at_that_step(store: nd.HistoryStore) -> None:
    saved = save_run(store, "r", 4)
    assert store.load("r", step_index=1) == saved[1]
    assert store.load("r", step_index=0) == saved[0]
    redo = checkpoint("r", 1, (*saved[0].messages, nd.user("Only older than 90 days.")))
    store.save(redo)
    assert store.load("r", step_index=1) == redo
    assert store.load("r", step_index=3) == saved[3]
    assert store.load("r", step_index=9) is None
    assert store.load("r") == redo


def test_list_orders_runs_by_creation(store: nd.HistoryStore) -> None:
    h = histories(2)
    for run_id in ["b", "a", "c"]:  # not alphabetical, same clock
        store.save(checkpoint(run_id, 0, h[0], created_at=5))
    store.save(checkpoint("a", 1, h[1], created_at=5))
    assert store.list() == ["b", "a", "c"]
    store.delete("a")
    store.save(checkpoint("a", 0, h[0], created_at=5))
    assert store.list() == ["b", "c", "a"]
    assert [r.run_id for r in store.list_runs()] == ["b", "c", "a"]


def test_list_runs_summarises_each_run(store: nd.HistoryStore) -> None:
    h = histories(3)
    request = nd.ToolApprovalRequest(approval_id="a1", tool_call_id="c1", tool_name="drop")
    store.save(checkpoint("r", 0, h[0], created_at=100, usage=nd.Usage(total_tokens=5)))
    store.save(checkpoint("r", 1, h[1], created_at=200, usage=nd.Usage(total_tokens=9)))
    store.save(
        checkpoint(
            "r",
            2,
            h[2],
            created_at=300,
            status="suspended",
            usage=nd.Usage(total_tokens=12, cost=0.5),
            pending_approvals=(request,),
            agent_path=("child",),
            finish_reason="suspended",
        )
    )
    store.save(checkpoint("s", 0, h[0], created_at=400, status="completed", finish_reason="stop"))
    records = store.list_runs()
    assert records == [
        nd.RunRecord(
            run_id="r",
            status="suspended",
            step_index=2,
            step_count=3,
            usage=nd.Usage(total_tokens=12, cost=0.5),
            created_at=100,
            updated_at=300,
            agent_path=("child",),
            pending_approval_count=1,
            finish_reason="suspended",
        ),
        nd.RunRecord(
            run_id="s",
            status="completed",
            step_index=0,
            step_count=1,
            usage=nd.Usage(),
            created_at=400,
            updated_at=400,
            finish_reason="stop",
        ),
    ]


def test_bytes_round_trip(store: nd.HistoryStore, reopen: Reopen) -> None:
    png = bytes(range(256)) * 3
    history = (
        nd.user(["What is in this picture?", png]),
        nd.user([nd.ImagePart(url="https://example.org/cat.png", media_type="image/png")]),
    )
    cp = checkpoint("img", 0, history)
    store.save(cp)
    loaded = store.load("img")
    assert loaded == cp
    assert loaded is not None and isinstance(loaded.messages[0].content[1], nd.ImagePart)
    assert loaded.messages[0].content[1].data == png
    if supports(store, PERSISTENT):
        reopened = reopen()
        try:
            again = reopened.load("img")
            assert again == cp
            assert again is not None and again.messages[0].content[1].data == png
        finally:
            reopened.close()


def test_empty_history_round_trips(store: nd.HistoryStore) -> None:
    cp = checkpoint("empty", 0, ())
    store.save(cp)
    assert store.load("empty") == cp
    assert store.history("empty")[0].message_count == 0


def test_sync_use_from_plain_threads(store: nd.HistoryStore) -> None:
    def writer(n: int) -> None:
        for cp in [checkpoint(f"t{n}", i, h) for i, h in enumerate(histories(25))]:
            store.save(cp)
            assert store.load(f"t{n}") == cp

    in_threads(writer, 8)
    assert sorted(store.list()) == sorted(f"t{n}" for n in range(8))
    for n in range(8):
        assert [i.step_index for i in store.history(f"t{n}")] == list(range(25))
        assert store.load(f"t{n}") == checkpoint(f"t{n}", 24, histories(25)[24])


@nd.tool
def probe(n: int) -> str:
    """Probe the system."""
    return f"probe {n} ok"


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"


def _script() -> list[nd.Turn | str]:
    return [
        nd.Turn.call("probe", "first", n=1),
        nd.Turn.call("probe", "second", n=2),
        nd.Turn.call("drop_table", "dropping", name="stg"),
        "All done.",
    ]


def test_the_loop_checkpoints_into_the_store_and_resumes(
    store: nd.HistoryStore, reopen: Reopen
) -> None:
    asyncio.run(_the_loop_checkpoints_into_the_store_and_resumes(store, reopen))


async def _the_loop_checkpoints_into_the_store_and_resumes(
    store: nd.HistoryStore, reopen: Reopen
) -> None:
    model = nd.ScriptedModel(_script())
    first = await nd.generate_text(
        model=model,
        messages="Clean up.",
        tools=[probe, drop_table],
        session=nd.DurableSession(store, run_id="loop-1"),
    )
    assert first.status == "suspended"
    infos = store.history("loop-1")
    assert [i.step_index for i in infos] == [0, 1, 2]
    assert infos[-1].status == "suspended"
    opened = store
    if supports(store, PERSISTENT):
        store.close()  # "the kernel restarts"
        opened = reopen()
    request = opened.load("loop-1").pending_approvals[0]  # type: ignore[union-attr]
    done = await nd.resume_from_checkpoint(
        opened,
        "loop-1",
        model=model,
        tools=[probe, drop_table],
        approval_responses=[
            nd.ToolApprovalResponse(approval_id=request.approval_id, approved=True)
        ],
    )
    assert done.status == "completed" and done.text == "All done."
    latest = opened.load("loop-1")
    assert latest is not None and latest.status == "completed"
    assert latest.messages == done.messages
    assert [r.status for r in opened.list_runs()] == ["completed"]
    if opened is not store:
        opened.close()


def test_concurrent_runs_on_one_event_loop(store: nd.HistoryStore) -> None:
    asyncio.run(_concurrent_runs_on_one_event_loop(store))


async def _concurrent_runs_on_one_event_loop(store: nd.HistoryStore) -> None:
    async def one(n: int) -> nd.GenerateTextResult:
        return await nd.generate_text(
            model=nd.ScriptedModel([nd.Turn.call("probe", n=n), nd.Turn.call("probe", n=n), "ok"]),
            messages=f"run {n}",
            tools=[probe],
            session=nd.DurableSession(store, run_id=f"async-{n}"),
        )

    results = await asyncio.gather(*(one(n) for n in range(6)))
    assert all(r.status == "completed" for r in results)
    for n in range(6):
        latest = store.load(f"async-{n}")
        assert latest is not None and latest.status == "completed"
        assert len(store.history(f"async-{n}")) == 3


def test_store_calls_from_worker_threads(store: nd.HistoryStore) -> None:
    asyncio.run(_store_calls_from_worker_threads(store))


async def _store_calls_from_worker_threads(store: nd.HistoryStore) -> None:
    saved = [checkpoint("w", i, h) for i, h in enumerate(histories(10))]
    await asyncio.gather(*(asyncio.to_thread(store.save, cp) for cp in saved[:5]))
    for cp in saved[5:]:
        await asyncio.to_thread(store.save, cp)
    assert await asyncio.to_thread(store.load, "w") == saved[-1]
    assert len(await asyncio.to_thread(store.history, "w")) == 10


def test_a_reopened_store_has_everything(store: nd.HistoryStore, reopen: Reopen) -> None:
    require(store, PERSISTENT)
    saved = save_run(store, "r", 6)
    store.save(checkpoint("s", 0, histories(1)[0]))
    store.close()
    reopened = reopen()
    try:
        assert reopened.load("r") == saved[-1]
        assert reopened.load("r", step_index=2) == saved[2]
        assert reopened.history("r") == [cp.info() for cp in saved]
        assert reopened.list() == ["r", "s"]
        # and it goes on where it was: appends to a run it did not write itself
        more = checkpoint("r", 6, (*saved[-1].messages, *step_pair(6)))
        reopened.save(more)
        assert reopened.load("r") == more
    finally:
        reopened.close()
    third = reopen()
    try:
        assert third.load("r") == more
        assert [i.step_index for i in third.history("r")] == [0, 1, 2, 3, 4, 5, 6]
    finally:
        third.close()


def test_several_store_instances_in_threads(store: nd.HistoryStore, reopen: Reopen) -> None:
    require(store, MULTIPROCESS)

    def writer(n: int) -> None:
        handle = reopen()
        try:
            for i, h in enumerate(histories(20)):
                handle.save(checkpoint(f"inst-{n}", i, h))
        finally:
            handle.close()

    in_threads(writer, 6)
    for n in range(6):
        assert store.load(f"inst-{n}") == checkpoint(f"inst-{n}", 19, histories(20)[19])
