"""One conformance suite for every bundled store, driven by the capabilities each declares.

Stores come from the registry in ``conftest.py``; a test that needs a capability
skips stores that do not declare it, and fails when a store declares it but the
registry lacks the hook the test needs.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence

import pytest

import nbdurable as nd
from nbdurable.durable import (
    HISTORY,
    INCREMENTAL,
    MULTIPROCESS,
    PERSISTENT,
    VERSIONED_SCHEMA,
    supports,
)

from .conftest import Backend, Damage, Footprint, StoreCase

# -- building histories ---------------------------------------------------------------------


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


def require(store: object, capability: str) -> None:
    if not supports(store, capability):
        pytest.skip(f"{type(store).__name__} does not declare {capability!r}")


def hook(backend: Backend, name: str) -> object:
    found = getattr(backend, name)
    assert found is not None, f"backend {backend.name!r} declares a capability but has no {name}"
    return found


# -- the history capability (every bundled store) -------------------------------------------


def test_every_bundled_store_declares_history(any_store: nd.HistoryStore) -> None:
    assert supports(any_store, HISTORY)
    assert isinstance(any_store, nd.HistoryStore)
    assert isinstance(any_store, nd.SessionStore)


def test_unknown_run_is_empty(any_store: nd.HistoryStore) -> None:
    assert any_store.load("nope") is None
    assert any_store.load("nope", step_index=0) is None
    assert any_store.history("nope") == []
    assert any_store.list() == []
    assert any_store.list_runs() == []
    any_store.delete("nope")  # a no-op


def test_latest_save_wins(any_store: nd.HistoryStore) -> None:
    h = histories(3)
    any_store.save(checkpoint("r", 0, h[0]))
    any_store.save(checkpoint("r", 1, h[1]))
    assert any_store.load("r") == checkpoint("r", 1, h[1])
    # a save of an earlier step (a rewind in place) still wins: latest save, not highest step
    any_store.save(checkpoint("r", 0, h[0], status="suspended", finish_reason="suspended"))
    latest = any_store.load("r")
    assert latest is not None
    assert (latest.step_index, latest.status, latest.finish_reason) == (0, "suspended", "suspended")


def test_history_lists_every_save_in_order_without_messages(any_store: nd.HistoryStore) -> None:
    saved = save_run(any_store, "r", 5)
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
    any_store.save(again)
    infos = any_store.history("r")
    assert infos == [cp.info() for cp in [*saved, again]]
    assert [i.step_index for i in infos] == [0, 1, 2, 3, 4, 2]
    assert infos[-1].message_count == 7 and infos[-1].pending_approvals == (request,)
    assert not hasattr(infos[0], "messages")


def test_load_by_step_returns_the_latest_save_at_that_step(any_store: nd.HistoryStore) -> None:
    saved = save_run(any_store, "r", 4)
    assert any_store.load("r", step_index=1) == saved[1]
    assert any_store.load("r", step_index=0) == saved[0]
    redo = checkpoint("r", 1, (*saved[0].messages, nd.user("Only older than 90 days.")))
    any_store.save(redo)
    assert any_store.load("r", step_index=1) == redo
    assert any_store.load("r", step_index=3) == saved[3]
    assert any_store.load("r", step_index=9) is None
    assert any_store.load("r") == redo


def test_list_orders_runs_by_creation(any_store: nd.HistoryStore) -> None:
    h = histories(2)
    for run_id in ["b", "a", "c"]:  # not alphabetical, same clock
        any_store.save(checkpoint(run_id, 0, h[0], created_at=5))
    any_store.save(checkpoint("a", 1, h[1], created_at=5))
    assert any_store.list() == ["b", "a", "c"]
    any_store.delete("a")
    any_store.save(checkpoint("a", 0, h[0], created_at=5))
    assert any_store.list() == ["b", "c", "a"]
    assert [r.run_id for r in any_store.list_runs()] == ["b", "c", "a"]


def test_list_runs_summarises_each_run(any_store: nd.HistoryStore) -> None:
    h = histories(3)
    request = nd.ToolApprovalRequest(approval_id="a1", tool_call_id="c1", tool_name="drop")
    any_store.save(checkpoint("r", 0, h[0], created_at=100, usage=nd.Usage(total_tokens=5)))
    any_store.save(checkpoint("r", 1, h[1], created_at=200, usage=nd.Usage(total_tokens=9)))
    any_store.save(
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
    any_store.save(
        checkpoint("s", 0, h[0], created_at=400, status="completed", finish_reason="stop")
    )
    records = any_store.list_runs()
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


def test_delete_keeps_the_prefixes_forks_share(
    any_store: nd.HistoryStore, store_case: StoreCase
) -> None:
    base = save_run(any_store, "base", 12)
    edited = checkpoint(
        "fork::edit#1", 3, (*base[3].messages[:5], nd.user("Only older than 90 days."))
    )
    extended = checkpoint("fork-extend", 12, (*base[11].messages, nd.user("And then?")))
    same = checkpoint("fork-same", 6, base[6].messages)
    for cp in (edited, extended, same):
        any_store.save(cp)
    any_store.delete("base")
    assert any_store.load("base") is None and any_store.history("base") == []
    assert any_store.list() == ["fork::edit#1", "fork-extend", "fork-same"]
    assert any_store.load("fork::edit#1") == edited
    assert any_store.load("fork-extend") == extended
    assert any_store.load("fork-same") == same
    if supports(any_store, PERSISTENT):
        reopened = store_case.open()
        try:
            for cp in (edited, extended, same):
                assert reopened.load(cp.run_id) == cp
        finally:
            reopened.close()
    for cp in (edited, extended, same):
        any_store.delete(cp.run_id)
    assert any_store.list() == []
    if supports(any_store, INCREMENTAL):
        measure = hook(store_case.backend, "footprint")
        assert measure(store_case.url).rows == 0  # type: ignore[operator]


def test_bytes_round_trip(any_store: nd.HistoryStore, store_case: StoreCase) -> None:
    png = bytes(range(256)) * 3
    history = (
        nd.user(["What is in this picture?", png]),
        nd.user([nd.ImagePart(url="https://example.org/cat.png", media_type="image/png")]),
    )
    cp = checkpoint("img", 0, history)
    any_store.save(cp)
    loaded = any_store.load("img")
    assert loaded == cp
    assert loaded is not None and isinstance(loaded.messages[0].content[1], nd.ImagePart)
    assert loaded.messages[0].content[1].data == png
    if supports(any_store, PERSISTENT):
        reopened = store_case.open()
        try:
            again = reopened.load("img")
            assert again == cp
            assert again is not None and again.messages[0].content[1].data == png  # type: ignore[union-attr]
        finally:
            reopened.close()


def test_empty_history_round_trips(any_store: nd.HistoryStore) -> None:
    cp = checkpoint("empty", 0, ())
    any_store.save(cp)
    assert any_store.load("empty") == cp
    assert any_store.history("empty")[0].message_count == 0


def test_sync_use_from_plain_threads(any_store: nd.HistoryStore) -> None:
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for cp in [checkpoint(f"t{n}", i, h) for i, h in enumerate(histories(25))]:
                any_store.save(cp)
                assert any_store.load(f"t{n}") == cp
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(any_store.list()) == sorted(f"t{n}" for n in range(8))
    for n in range(8):
        assert [i.step_index for i in any_store.history(f"t{n}")] == list(range(25))
        assert any_store.load(f"t{n}") == checkpoint(f"t{n}", 24, histories(25)[24])


# -- async use: the loop drives the store ----------------------------------------------------


@nd.tool
def probe(n: int) -> str:
    """Probe the system."""
    return f"probe {n} ok"


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"


def _script() -> list[object]:
    return [
        nd.Turn.call("probe", "first", n=1),
        nd.Turn.call("probe", "second", n=2),
        nd.Turn.call("drop_table", "dropping", name="stg"),
        "All done.",
    ]


async def test_the_loop_checkpoints_into_the_store_and_resumes(
    any_store: nd.HistoryStore, store_case: StoreCase
) -> None:
    model = nd.ScriptedModel(_script())
    first = await nd.generate_text(
        model=model,
        messages="Clean up.",
        tools=[probe, drop_table],
        session=nd.DurableSession(any_store, run_id="loop-1"),
    )
    assert first.status == "suspended"
    infos = any_store.history("loop-1")
    assert [i.step_index for i in infos] == [0, 1, 2]
    assert infos[-1].status == "suspended"
    store = any_store
    if supports(any_store, PERSISTENT):
        any_store.close()  # "the kernel restarts"
        store = store_case.open()
    request = store.load("loop-1").pending_approvals[0]  # type: ignore[union-attr]
    done = await nd.resume_from_checkpoint(
        store,
        "loop-1",
        model=model,
        tools=[probe, drop_table],
        approval_responses=[
            nd.ToolApprovalResponse(approval_id=request.approval_id, approved=True)
        ],
    )
    assert done.status == "completed" and done.text == "All done."
    latest = store.load("loop-1")
    assert latest is not None and latest.status == "completed"
    assert latest.messages == done.messages
    assert [r.status for r in store.list_runs()] == ["completed"]
    if store is not any_store:
        store.close()


async def test_concurrent_runs_on_one_event_loop(any_store: nd.HistoryStore) -> None:
    async def one(n: int) -> nd.GenerateTextResult:
        return await nd.generate_text(
            model=nd.ScriptedModel([nd.Turn.call("probe", n=n), nd.Turn.call("probe", n=n), "ok"]),
            messages=f"run {n}",
            tools=[probe],
            session=nd.DurableSession(any_store, run_id=f"async-{n}"),
        )

    results = await asyncio.gather(*(one(n) for n in range(6)))
    assert all(r.status == "completed" for r in results)
    for n in range(6):
        latest = any_store.load(f"async-{n}")
        assert latest is not None and latest.status == "completed"
        assert len(any_store.history(f"async-{n}")) == 3


async def test_store_calls_from_worker_threads(any_store: nd.HistoryStore) -> None:
    saved = [checkpoint("w", i, h) for i, h in enumerate(histories(10))]
    await asyncio.gather(*(asyncio.to_thread(any_store.save, cp) for cp in saved[:5]))
    for cp in saved[5:]:
        await asyncio.to_thread(any_store.save, cp)
    assert await asyncio.to_thread(any_store.load, "w") == saved[-1]
    assert len(await asyncio.to_thread(any_store.history, "w")) == 10


# -- persistence -----------------------------------------------------------------------------


def test_a_reopened_store_has_everything(any_store: nd.HistoryStore, store_case: StoreCase) -> None:
    require(any_store, PERSISTENT)
    saved = save_run(any_store, "r", 6)
    any_store.save(checkpoint("s", 0, histories(1)[0]))
    any_store.close()
    reopened = store_case.open()
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
    third = store_case.open()
    try:
        assert third.load("r") == more
        assert [i.step_index for i in third.history("r")] == [0, 1, 2, 3, 4, 5, 6]
    finally:
        third.close()


@pytest.mark.parametrize("damage", ["message", "chain", "metadata"])
def test_corrupt_data_is_a_typed_error_naming_run_and_step(
    any_store: nd.HistoryStore, store_case: StoreCase, damage: Damage
) -> None:
    require(any_store, PERSISTENT)
    saved = save_run(any_store, "run::child#7", 6)
    any_store.save(checkpoint("other", 0, histories(1)[0]))
    any_store.close()
    hook(store_case.backend, "corrupt")(store_case.url, "run::child#7", 3, damage)  # type: ignore[operator]
    store = store_case.open()
    try:
        with pytest.raises(nd.StoreCorruptionError) as caught:
            store.load("run::child#7", step_index=3)
        assert caught.value.run_id == "run::child#7" and caught.value.step_index == 3
        assert "run::child#7" in str(caught.value) and "3" in str(caught.value)
        if damage == "metadata":
            with pytest.raises(nd.StoreCorruptionError, match="step 3"):
                store.history("run::child#7")
        else:
            # history reads no message, so damaged messages do not stop it
            assert store.history("run::child#7") == [cp.info() for cp in saved]
            with pytest.raises(nd.StoreCorruptionError) as later:
                store.load("run::child#7")
            assert later.value.run_id == "run::child#7" and later.value.step_index == 5
        assert store.load("run::child#7", step_index=2) == saved[2]  # earlier steps are fine
        assert store.load("other") == checkpoint("other", 0, histories(1)[0])
    finally:
        store.close()


def test_a_newer_checkpoint_version_is_refused(
    any_store: nd.HistoryStore, store_case: StoreCase
) -> None:
    require(any_store, PERSISTENT)
    save_run(any_store, "r", 3)
    any_store.close()
    hook(store_case.backend, "corrupt")(store_case.url, "r", 2, "future_version")  # type: ignore[operator]
    store = store_case.open()
    try:
        with pytest.raises(nd.CheckpointVersionError) as caught:
            store.load("r")
        assert caught.value.version == 2
    finally:
        store.close()


def test_a_future_schema_version_is_refused(
    any_store: nd.HistoryStore, store_case: StoreCase
) -> None:
    require(any_store, VERSIONED_SCHEMA)
    save_run(any_store, "r", 2)
    any_store.close()
    hook(store_case.backend, "set_schema_version")(store_case.url, 999)  # type: ignore[operator]
    with pytest.raises(nd.CheckpointVersionError, match="upgrade nbdurable") as caught:
        store_case.open()
    assert caught.value.version == 999


# -- only what is new ------------------------------------------------------------------------

WINDOW = 100
"""Saves per disk measurement: a database file grows by whole pages, so its
size is compared over a window of saves (and reported, not asserted)."""


def test_a_save_writes_only_what_is_new(
    any_store: nd.HistoryStore, store_case: StoreCase, capsys: pytest.CaptureFixture[str]
) -> None:
    require(any_store, INCREMENTAL)
    measure = hook(store_case.backend, "footprint")
    assert callable(measure)
    saved = [checkpoint("long", i, h) for i, h in enumerate(histories(1001 + WINDOW))]

    def saving(indexes: range) -> Footprint:
        before = measure(store_case.url)
        for i in indexes:
            any_store.save(saved[i])
        return measure(store_case.url) - before

    saving(range(10))
    at_10 = saving(range(10, 11))
    early = saving(range(11, 11 + WINDOW))
    saving(range(11 + WINDOW, 1000))
    at_1000 = saving(range(1000, 1001))
    late = saving(range(1001, 1001 + WINDOW))
    assert at_10.rows > 0 and at_10.bytes > 0
    assert abs(at_1000.rows - at_10.rows) <= 0.1 * at_10.rows, (at_10, at_1000)
    assert abs(at_1000.bytes - at_10.bytes) <= 0.1 * at_10.bytes, (at_10, at_1000)
    assert abs(late.bytes - early.bytes) <= 0.1 * early.bytes, (early, late)
    assert any_store.load("long") == saved[-1]
    with capsys.disabled():
        print(
            f"\n[{store_case.backend.name}] save at step 10: {at_10.bytes} B, {at_10.rows} rows; "
            f"at step 1000: {at_1000.bytes} B, {at_1000.rows} rows; "
            f"disk growth over {WINDOW} saves from step 11: {early.disk} B, "
            f"from step 1001: {late.disk} B"
        )


# -- several processes on one store ----------------------------------------------------------

_PROCESS_WRITER = textwrap.dedent(
    """
    import sys
    import nbdurable as nd
    url, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = nd.open_store(url)
    messages = (nd.user("go"),)
    for i in range(count):
        messages = (*messages, nd.assistant(f"{name} step {i}"))
        store.save(nd.AgentCheckpoint(run_id=name, step_index=i, status="running",
                                      messages=messages, created_at=i))
    store.close()
    print("done", name)
    """
)


def test_several_processes_write_different_runs(
    any_store: nd.HistoryStore, store_case: StoreCase
) -> None:
    require(any_store, MULTIPROCESS)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS_WRITER, store_case.url, f"proc-{n}", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert out.startswith("done"), err
        assert proc.returncode == 0, err
        assert "locked" not in err
    assert sorted(any_store.list()) == [f"proc-{n}" for n in range(4)]
    for n in range(4):
        latest = any_store.load(f"proc-{n}")
        assert latest is not None and latest.step_index == 59 and len(latest.messages) == 61
        assert len(any_store.history(f"proc-{n}")) == 60


def test_several_store_instances_in_threads(
    any_store: nd.HistoryStore, store_case: StoreCase
) -> None:
    require(any_store, MULTIPROCESS)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        store = store_case.open()
        try:
            for i, h in enumerate(histories(20)):
                store.save(checkpoint(f"inst-{n}", i, h))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for n in range(6):
        assert any_store.load(f"inst-{n}") == checkpoint(f"inst-{n}", 19, histories(20)[19])


# -- the append-only hint (stores that declare saves_extensions) -----------------------------


def test_a_save_told_what_it_extends_writes_the_tail_and_loads_verified(
    any_store: nd.HistoryStore, store_case: StoreCase
) -> None:
    if not getattr(any_store, "saves_extensions", False):
        pytest.skip(f"{type(any_store).__name__} takes no extends hint")
    require(any_store, PERSISTENT)
    save = any_store.save  # a store that declares the hint takes it on save
    steps = histories(6)
    saved = [checkpoint("h", i, h) for i, h in enumerate(steps)]
    save(saved[0])
    for previous, cp in itertools.pairwise(saved[:4]):
        save(cp, extends=previous.messages)  # type: ignore[call-arg]
    assert any_store.load("h") == saved[3]
    # A hint that is not the history saved last is not trusted: an edited
    # history still gets its own nodes.
    edited = (saved[3].messages[0], nd.assistant("edited"), *saved[3].messages[2:])
    changed = checkpoint("h", 4, edited)
    save(changed, extends=saved[0].messages)  # type: ignore[call-arg]
    assert any_store.load("h") == changed
    # and a plain save after hinted ones keeps working
    save(saved[5])
    assert any_store.load("h") == saved[5]
    any_store.close()
    reopened = store_case.open()
    try:
        # loaded from the rows alone: every node is verified against its hash
        assert reopened.load("h") == saved[5]
        assert reopened.load("h", step_index=4) == changed
        assert reopened.load("h", step_index=3) == saved[3]
    finally:
        reopened.close()


def test_histories_that_grow_in_place_and_fork_save_and_load_like_tuples(
    any_store: nd.HistoryStore, store_case: StoreCase
) -> None:
    # A History appended to in place (what the loop saves) needs no hint: the
    # store knows it extends the history it saved last. A fork from an older
    # history shares no list with it and gets its own nodes.
    require(any_store, PERSISTENT)

    def at(step: int, messages: nd.History) -> nd.AgentCheckpoint:
        return nd.AgentCheckpoint.model_validate(
            {
                "run_id": "g",
                "step_index": step,
                "status": "running",
                "messages": messages,
                "created_at": 1_700_000_000_000 + step,
            }
        )

    grown = [nd.History([nd.user("Probe the system.")])]
    for i in range(4):
        grown.append(grown[-1].appended(*step_pair(i)))
    saved = [at(i, h) for i, h in enumerate(grown[1:])]
    for cp in saved:
        assert cp.messages is grown[cp.step_index + 1]
        any_store.save(cp)
    fork = grown[2].appended(nd.assistant("a fork of step 1"))  # grown[2] is not the newest
    forked = at(4, fork)
    any_store.save(forked)
    assert grown[4][-1] == step_pair(3)[1]  # the fork changed no other history
    assert any_store.load("g") == forked
    any_store.close()
    reopened = store_case.open()
    try:
        assert reopened.load("g") == forked
        for cp in saved:
            assert reopened.load("g", step_index=cp.step_index) == cp
            assert reopened.load("g", step_index=cp.step_index) == checkpoint(
                "g", cp.step_index, tuple(cp.messages)
            )
    finally:
        reopened.close()
