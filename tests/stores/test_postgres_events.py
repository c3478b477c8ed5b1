"""The PostgreSQL event log beyond the conformance suite: LISTEN/NOTIFY, processes, races.

Subscribers here poll every 5 s, so an event seen in well under a second was
pushed by ``NOTIFY``, not found by polling.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest
from support.pgserver import PgServer

import nbdurable as nd
from nbdurable.events import NewEvent
from nbdurable.stores.postgres._schema import SCHEMA_VERSION

from .conftest import PG_SCHEMA
from .test_conformance import checkpoint, histories
from .test_postgres import delaying_proxy, sql

POLL = 5.0  # the subscribers' polling interval: far longer than any wake-up we accept
FAST = 1.0


@pytest.fixture
def url(pg_database: str) -> str:
    return pg_database


def new(kind: str = "e", **payload: object) -> NewEvent:
    return NewEvent(type=kind, payload=dict(payload), created_at=int(time.time() * 1000))


def finished() -> NewEvent:
    return NewEvent(type="run_finished", payload={"status": "completed"}, created_at=0)


def listeners(url: str) -> list[int]:
    """Backend pids of this database's connections sitting in LISTEN."""
    return [
        pid
        for (pid,) in sql(
            url,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()",
        )
    ]


def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def listener_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("nbdurable-listen")]


_SUBSCRIBER = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import nbdurable as nd

    async def main():
        store = nd.open_store(sys.argv[1])  # subscribe's first wait starts its listener
        async for event in nd.subscribe(store, "r", poll_interval=float(sys.argv[2])):
            print(json.dumps({"offset": event.offset, "at": time.time()}), flush=True)
        store.close()

    asyncio.run(main())
    """
)


async def test_a_subscriber_in_another_process_is_woken_by_notify(url: str) -> None:
    """S004: a subscriber in another process follows by LISTEN/NOTIFY, not by polling."""
    store = nd.PostgresSessionStore(url)
    store.append_events("r", [new("run_started")])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _SUBSCRIBER,
        url,
        str(POLL),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None

    async def line() -> dict[str, float]:
        raw = await asyncio.wait_for(proc.stdout.readline(), 30)  # type: ignore[union-attr]
        assert raw, "the subscriber ended early"
        return json.loads(raw)  # type: ignore[no-any-return]

    try:
        assert (await line())["offset"] == 1  # the replay
        await asyncio.to_thread(until, lambda: len(listeners(url)) == 1)
        for offset in range(2, 7):
            await asyncio.sleep(0.2)  # the subscriber is asleep, for up to POLL seconds
            written = time.time()
            store.append_events("r", [new(n=offset)])
            seen = await line()
            assert seen["offset"] == offset
            assert seen["at"] - written < FAST, seen["at"] - written
        store.append_events("r", [finished()])
        assert (await line())["offset"] == 7
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        store.close()


async def test_another_store_object_is_woken_by_notify(url: str) -> None:
    # store.append_events wakes no in-process subscriber by itself (the event
    # writer does that): here only the notification can wake the reader.
    writer = nd.PostgresSessionStore(url)
    reader = nd.PostgresSessionStore(url)
    writer.append_events("r", [new("run_started")])
    assert reader.listen()
    seen: list[tuple[int, float]] = []

    async def follow() -> None:
        async for event in nd.subscribe(reader, "r", poll_interval=POLL):
            seen.append((event.offset, time.monotonic()))

    task = asyncio.create_task(follow())
    try:
        for offset in range(2, 6):
            await asyncio.sleep(0.1)
            written = time.monotonic()
            await asyncio.to_thread(writer.append_events, "r", [new(n=offset)])
            while not seen or seen[-1][0] < offset:
                assert time.monotonic() - written < FAST, f"offset {offset} not seen"
                await asyncio.sleep(0.005)
        writer.save_with_events(checkpoint("r", 0, histories(1)[0]), [finished()])
        await asyncio.wait_for(task, FAST)
        assert [offset for offset, _ in seen] == [1, 2, 3, 4, 5, 6]
    finally:
        task.cancel()
        writer.close()
        reader.close()


async def test_an_append_between_a_read_and_the_wait_is_not_left_to_the_timeout(
    url: str,
) -> None:
    writer = nd.PostgresSessionStore(url)
    reader = nd.PostgresSessionStore(url)
    writer.append_events("r", [new()])
    assert reader.listen()
    for with_after in (False, True):
        [*_, last] = reader.read_events("r")  # a subscriber reads...
        writer.append_events("r", [new()])
        await asyncio.sleep(0.2)  # ...the notification arrives before it waits: nobody to wake
        started = time.monotonic()
        if with_after:  # what subscribe does: the wait sees the log is past its read
            await reader.wait_for_events("r", POLL, after=last.offset)
            assert time.monotonic() - started < FAST
        else:  # the race the offset closes: the wait sleeps its whole timeout
            await reader.wait_for_events("r", 0.5)
            assert time.monotonic() - started >= 0.45
    # with nothing new, it waits (for the timeout here)
    started = time.monotonic()
    await reader.wait_for_events("r", 0.3, after=3)
    assert time.monotonic() - started >= 0.25
    writer.close()
    reader.close()


async def test_the_listener_reconnects_and_wakes_waiters_after_a_lost_connection(
    url: str,
) -> None:
    writer = nd.PostgresSessionStore(url)
    reader = nd.PostgresSessionStore(url)
    writer.append_events("r", [new("run_started")])
    assert reader.listen()
    [first] = listeners(url)
    seen: list[int] = []

    async def follow() -> None:
        async for event in nd.subscribe(reader, "r", poll_interval=POLL):
            seen.append(event.offset)

    task = asyncio.create_task(follow())
    try:
        while seen != [1]:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the subscriber waits
        sql(url, "SELECT pg_terminate_backend(%s)", first)
        # Written while the listener may be down: its NOTIFY may reach no one,
        # but the reconnected listener wakes every waiter.
        written = time.monotonic()
        writer.append_events("r", [new(n=2)])
        while seen != [1, 2]:
            assert time.monotonic() - written < FAST + 1, "not woken after reconnecting"
            await asyncio.sleep(0.01)
        await asyncio.to_thread(until, lambda: len(listeners(url)) == 1)
        assert listeners(url) != [first]
        await asyncio.sleep(0.1)
        written = time.monotonic()
        writer.append_events("r", [new(n=3)])
        while seen != [1, 2, 3]:
            assert time.monotonic() - written < FAST, "the new connection is not listening"
            await asyncio.sleep(0.005)
    finally:
        task.cancel()
        writer.close()
        reader.close()


async def test_close_stops_the_listener_and_its_connection(url: str) -> None:
    before = set(listener_threads())
    store = nd.PostgresSessionStore(url)
    store.append_events("r", [new()])
    await store.wait_for_events("r", 0.01)  # starts the listener
    assert store.listen()
    assert len(listeners(url)) == 1 and len(set(listener_threads()) - before) == 1
    started = time.monotonic()
    store.close()
    assert time.monotonic() - started < 2  # woken, not waiting for a timeout
    assert set(listener_threads()) - before == set()
    until(lambda: listeners(url) == [])
    # a closed store never starts another listener
    await store.wait_for_events("r", 0.01)
    assert not store.listen(0.1)
    assert set(listener_threads()) - before == set()
    store.close()  # twice is fine


async def test_a_run_id_too_long_for_a_notification_still_wakes_its_subscriber(
    url: str,
) -> None:
    run_id = "r" * 9000  # longer than a NOTIFY payload may be (it compresses in the index)
    writer = nd.PostgresSessionStore(url)
    reader = nd.PostgresSessionStore(url)
    writer.append_events(run_id, [new("run_started")])
    assert reader.listen()
    task = asyncio.create_task(
        asyncio.wait_for(
            _collect(nd.subscribe(reader, run_id, poll_interval=POLL)), FAST + POLL / 2
        )
    )
    await asyncio.sleep(0.2)
    writer.append_events(run_id, [finished()])
    events = await task
    assert [e.offset for e in events] == [1, 2]
    writer.close()
    reader.close()


async def _collect(events):  # type: ignore[no-untyped-def]
    return [e async for e in events]


_APPENDER = textwrap.dedent(
    """
    import sys
    import nbdurable as nd
    from nbdurable.events import NewEvent
    url, name = sys.argv[1], sys.argv[2]
    store = nd.open_store(url)
    messages = (nd.user("go"),)
    for i in range(20):
        batch = [NewEvent(type="e", payload={"p": name, "i": i, "k": k}, created_at=i)
                 for k in range(3)]
        store.append_events("r", batch)
        messages = (*messages, nd.assistant(f"{name} {i}"))
        saved = [NewEvent(type="checkpoint_saved", payload={"p": name, "i": i, "k": k},
                          created_at=i) for k in range(2)]
        store.save_with_events(
            nd.AgentCheckpoint(run_id="r", step_index=i, status="running",
                               messages=messages, created_at=i),
            saved,
        )
    store.close()
    """
)


def test_processes_appending_and_saving_keep_batches_whole_and_offsets_gap_free(
    url: str,
) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _APPENDER, url, f"p{n}"], stderr=subprocess.PIPE, text=True
        )
        for n in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    with nd.PostgresSessionStore(url) as store:
        events = store.read_events("r")
        assert [e.offset for e in events] == list(range(1, 4 * 20 * 5 + 1))
        batches: dict[tuple[str, int, str], list[int]] = {}
        for e in events:
            batches.setdefault((e.payload["p"], e.payload["i"], e.type), []).append(e.offset)
        assert len(batches) == 4 * 20 * 2
        for offsets in batches.values():  # a batch's events are consecutive
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        for n in range(4):  # each process's batches in its order
            mine = [e.payload["i"] for e in events if e.payload["p"] == f"p{n}"]
            assert mine == sorted(mine)
        assert len(store.history("r")) == 80  # a checkpoint per checkpoint_saved pair
    assert sql(url, f"SELECT last_position FROM {PG_SCHEMA}.event_heads") == [(400,)]


def test_deletes_racing_appends_leave_no_orphan_and_no_hole(url: str) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []

    def appender(store: nd.PostgresSessionStore) -> None:
        try:
            while not stop.is_set():
                store.append_events("r", [new(), new()])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with nd.PostgresSessionStore(url) as store:
        threads = [threading.Thread(target=appender, args=(store,)) for _ in range(3)]
        for t in threads:
            t.start()
        for _ in range(30):
            store.delete("r")
            time.sleep(0.005)
        stop.set()
        for t in threads:
            t.join()
        assert errors == []
        events = store.read_events("r")
        assert [e.offset for e in events] == list(range(1, len(events) + 1))
        (last,) = sql(url, f"SELECT last_position FROM {PG_SCHEMA}.event_heads")[0]
        assert last == len(events)


def test_a_save_with_events_sent_again_after_a_delete_writes_its_events_once(url: str) -> None:
    h = histories(3)
    first = nd.PostgresSessionStore(url)
    first.save_with_events(checkpoint("r", 0, h[0]), [new(n=0)])
    first.save_with_events(checkpoint("r", 1, h[1]), [new(n=1)])
    with nd.PostgresSessionStore(url) as other:
        other.delete("r")
    # its cached chain names nodes that are gone: the save is sent again, whole
    added = first.save_with_events(checkpoint("r", 2, h[2]), [new(n=2), new(n=3)])
    assert [e.offset for e in added] == [1, 2]
    assert [e.payload["n"] for e in first.read_events("r")] == [2, 3]
    assert first.load("r") == checkpoint("r", 2, h[2])
    first.close()


def test_an_event_log_in_a_version_1_database_is_added_on_open(url: str) -> None:
    h = histories(2)
    with nd.PostgresSessionStore(url) as store:
        store.save(checkpoint("r", 0, h[0]))
    # make it a version 1 database
    sql(url, f"DROP TABLE {PG_SCHEMA}.events, {PG_SCHEMA}.event_heads")
    sql(url, f"DROP TABLE {PG_SCHEMA}.rt_runs, {PG_SCHEMA}.rt_intents, {PG_SCHEMA}.rt_journal")
    sql(url, f"DROP TABLE {PG_SCHEMA}.rt_locks")
    sql(url, f"DELETE FROM {PG_SCHEMA}.nbdurable_schema WHERE version >= 2")
    with nd.PostgresSessionStore(url) as store:
        assert store.load("r") == checkpoint("r", 0, h[0])
        assert store.read_events("r") == []  # a run with checkpoints, no events yet
        store.save_with_events(checkpoint("r", 1, h[1]), [new(n=1)])
        assert [e.offset for e in store.read_events("r")] == [1]
    versions = sql(url, f"SELECT version FROM {PG_SCHEMA}.nbdurable_schema ORDER BY 1")
    assert versions == [(v,) for v in range(1, SCHEMA_VERSION + 1)]


def test_payloads_are_kept_verbatim_json(url: str) -> None:
    payload = {"text": "nul \x00 é ✓", "n": 1.5, "big": 2**70, "nested": [None, True]}
    with nd.PostgresSessionStore(url) as store:
        [written] = store.append_events("r", [NewEvent(type="x", payload=payload, created_at=1)])
        [read] = store.read_events("r")
        assert read == written and read.payload == payload
    sql(url, f"UPDATE {PG_SCHEMA}.events SET payload = 'not json'")
    with (
        nd.PostgresSessionStore(url) as store,
        pytest.raises(nd.StoreCorruptionError, match="'r'"),
    ):
        store.read_events("r")


def test_the_channel_is_per_schema(url: str) -> None:
    with (
        nd.PostgresSessionStore(url) as default,
        nd.PostgresSessionStore(url, schema="team a") as other,
        nd.PostgresSessionStore(url, schema="s" * 60) as long,
    ):
        assert default.notify_channel == "nbdurable_events:nbdurable"
        assert other.notify_channel == "nbdurable_events:team a"
        assert len(long.notify_channel.encode()) <= 63
        assert default.event_channel != other.event_channel
        default.append_events("r", [new()])
        with pytest.raises(nd.RunNotFoundError):
            other.read_events("r")


def test_appends_saves_and_reads_cost_one_round_trip(url: str, pg_server: PgServer) -> None:
    rtt = 0.04
    h = histories(12)
    with delaying_proxy(pg_server.port, rtt / 2) as port:
        proxied = url.replace(f":{pg_server.port}/", f":{port}/")
        with nd.PostgresSessionStore(proxied) as store:
            store.pool.wait()
            for i in range(2):  # warm up: statements get prepared
                store.save_with_events(checkpoint("r", i, h[i]), [new(), new()])
                store.append_events("r", [new()])
                store.read_events("r", after=i)
            timings: dict[str, list[float]] = {"save": [], "append": [], "read": []}
            for i in range(2, 12):
                started = time.perf_counter()
                store.save_with_events(checkpoint("r", i, h[i]), [new() for _ in range(5)])
                timings["save"].append(time.perf_counter() - started)
                started = time.perf_counter()
                store.append_events("r", [new() for _ in range(50)])
                timings["append"].append(time.perf_counter() - started)
                started = time.perf_counter()
                assert store.read_events("r", after=i * 10, limit=10)
                timings["read"].append(time.perf_counter() - started)
    for name, values in timings.items():
        mean = sum(values) / len(values)
        assert mean < 2 * rtt, (name, mean)
