"""What is particular to the PostgreSQL store: pool, schema option, processes, shared node ids.

The conformance suite covers the common contract; these tests use the same
session server (``pg_server``) and a fresh database per test (``pg_database``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.stores._chain import encode_message, node_id
from nbdurable.stores.postgres._schema import SCHEMA_VERSION

from .conftest import PG_SCHEMA, PgServer
from .test_conformance import checkpoint, histories, step_pair


def sql(url: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []


def count(url: str, table: str, schema: str = PG_SCHEMA) -> int:
    return int(sql(url, f'SELECT count(*) FROM "{schema}".{table}')[0][0])


@pytest.fixture
def url(pg_database: str) -> str:
    return pg_database


def test_a_new_database_gets_the_schema_in_its_own_namespace(url: str) -> None:
    sql(url, "CREATE TABLE public.notes (text text)")
    sql(url, "INSERT INTO public.notes VALUES ('mine')")
    with nd.PostgresSessionStore(url) as store:
        assert store.schema == "nbdurable" and store.schema_version == SCHEMA_VERSION == 5
        store.save(checkpoint("r", 0, histories(1)[0]))
    tables = {
        (s, t)
        for s, t in sql(
            url,
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')",
        )
    }
    assert tables == {
        ("public", "notes"),
        *(
            (PG_SCHEMA, t)
            for t in (
                "nbdurable_schema",
                "nodes",
                "runs",
                "checkpoints",
                "events",
                "event_heads",
                "rt_runs",
                "rt_intents",
                "rt_journal",
                "rt_locks",
            )
        ),
    }
    assert sql(url, f"SELECT version FROM {PG_SCHEMA}.nbdurable_schema ORDER BY 1") == [
        (1,),
        (2,),
        (3,),
        (4,),
        (5,),
    ]
    assert sql(url, "SELECT text FROM public.notes") == [("mine",)]


def test_the_schema_option_keeps_stores_apart_in_one_database(url: str) -> None:
    h = histories(2)
    with (
        nd.PostgresSessionStore(url) as default,
        nd.PostgresSessionStore(url, schema="team a") as spaced,
        nd.open_store(url + "?schema=team_b") as from_url,
    ):
        assert (default.schema, spaced.schema, from_url.schema) == (
            "nbdurable",
            "team a",
            "team_b",
        )
        default.save(checkpoint("r", 0, h[0]))
        spaced.save(checkpoint("r", 1, h[1]))
        assert from_url.list() == [] and from_url.load("r") is None
        assert default.load("r") == checkpoint("r", 0, h[0])
        assert spaced.load("r") == checkpoint("r", 1, h[1])
    assert count(url, "nodes", "team a") == 5 and count(url, "nodes") == 3
    assert count(url, "runs", "team_b") == 0
    # the URL's schema= is the store's, not libpq's; other parameters pass through
    with nd.open_store(url + "?sslmode=disable&schema=team%20a") as store:
        assert store.load("r") == checkpoint("r", 1, h[1])
    with pytest.raises(nd.ConfigurationError, match="schema given twice"):
        nd.PostgresSessionStore(url + "?schema=x", schema="y")
    with pytest.raises(nd.ConfigurationError, match="schema name"):
        nd.PostgresSessionStore(url, schema="")


def test_open_store_urls(url: str, pg_server: PgServer) -> None:
    store = nd.open_store(url)
    assert isinstance(store, nd.PostgresSessionStore)
    store.close()
    other = nd.open_store(url.replace("postgresql://", "postgres://", 1))
    assert isinstance(other, nd.PostgresSessionStore)
    other.close()
    database = url.rsplit("/", 1)[1]
    with nd.PostgresSessionStore(
        f"host=127.0.0.1 port={pg_server.port} dbname={database} user=postgres"
    ) as keywords:
        assert keywords.list() == []
        assert repr(keywords) == (
            f"PostgresSessionStore('postgresql://127.0.0.1:{pg_server.port}/{database}', "
            "schema='nbdurable')"
        )
    # trust authentication ignores the password; repr and errors never show it
    secret = url.replace("postgres@", "postgres:hunter2@", 1)
    with nd.open_store(secret) as store:
        assert "hunter2" not in repr(store)
        assert repr(store).startswith(
            f"PostgresSessionStore('postgresql://127.0.0.1:{pg_server.port}/"
        )


def test_the_pool_reuses_its_connections(url: str) -> None:
    h = histories(60)
    with nd.PostgresSessionStore(url, max_size=3) as store:
        store.pool.wait()  # the pool opens its first connection in the background
        for i, messages in enumerate(h):
            store.save(checkpoint("seq", i, messages))
            assert store.load("seq") is not None
        store.history("seq")
        store.list_runs()
        # one caller at a time: one connection did everything
        assert store.pool.get_stats()["connections_num"] == 1

        errors: list[BaseException] = []

        def writer(n: int) -> None:
            try:
                fresh = histories(20)  # new objects: nothing cached for these runs
                for i, messages in enumerate(fresh):
                    store.save(checkpoint(f"t{n}", i, messages))
                    store.load(f"t{n}", step_index=i // 2)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        stats = store.pool.get_stats()
        assert stats["pool_max"] == 3 and stats["connections_num"] <= 3
        mine = sql(
            url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = '' AND pid <> pg_backend_pid()",
        )[0][0]
        assert mine <= 3
    with nd.PostgresSessionStore(url) as reader:
        assert sorted(reader.list()) == sorted(["seq", *(f"t{n}" for n in range(8))])


_WRITER = textwrap.dedent(
    """
    import sys
    import nbdurable as nd
    url, run_id, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = nd.open_store(url)
    messages = (nd.user("go"),)
    for i in range(first, first + count):
        messages = (*messages, nd.assistant(f"{run_id} step {i}"))
        store.save(nd.AgentCheckpoint(run_id=run_id, step_index=i, status="running",
                                      messages=messages, created_at=i))
    store.close()
    print("done")
    """
)


def _run_writers(url: str, jobs: list[tuple[str, int, int]]) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, url, run_id, str(first), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for run_id, first, n in jobs
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.strip() == "done", err


def test_two_processes_write_different_runs_and_one_shared_run(url: str) -> None:
    # a fresh database: the four processes also race to create the schema
    _run_writers(url, [("a", 0, 80), ("b", 0, 80), ("shared", 0, 80), ("shared", 1000, 80)])
    with nd.PostgresSessionStore(url) as store:
        assert sorted(store.list()) == ["a", "b", "shared"]
        for run_id in ("a", "b"):
            assert [i.step_index for i in store.history(run_id)] == list(range(80))
        # two writers of one run: their saves interleave, each gets its own seq
        steps = [i.step_index for i in store.history("shared")]
        assert len(steps) == 160
        assert sorted(steps) == [*range(80), *range(1000, 1080)]
        assert [s for s in steps if s < 1000] == list(range(80))
        assert [s for s in steps if s >= 1000] == list(range(1000, 1080))
        [record] = [r for r in store.list_runs() if r.run_id == "shared"]
        assert record.step_count == 160
        latest = store.load("shared")
        assert latest is not None and latest.step_index == steps[-1]
    seqs = sql(url, f"SELECT seq FROM {PG_SCHEMA}.checkpoints WHERE run_id = 'shared' ORDER BY seq")
    assert [s for (s,) in seqs] == list(range(1, 161))
    assert count(url, "nbdurable_schema") == SCHEMA_VERSION  # each migration applied once


def test_node_ids_are_the_sqlite_stores(url: str, tmp_path: Path) -> None:
    h = histories(5)
    cp = checkpoint("r", 4, h[-1])
    with nd.PostgresSessionStore(url) as pg, nd.SqliteSessionStore(tmp_path / "r.db") as lite:
        pg.save(cp)
        lite.save(cp)
    pg_head = sql(url, f"SELECT head FROM {PG_SCHEMA}.checkpoints")[0][0]
    lite_head = lite_heads(tmp_path / "r.db")
    parent = None
    for message in h[-1]:
        parent = node_id(parent, encode_message(message))
    assert pg_head == lite_head == parent


def lite_heads(path: Path) -> bytes:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return bytes(conn.execute("SELECT head FROM checkpoints").fetchone()[0])
    finally:
        conn.close()


def test_appends_and_forks_store_each_message_once(url: str) -> None:
    h = histories(10)
    with nd.PostgresSessionStore(url) as store:
        for i, messages in enumerate(h):
            store.save(checkpoint("a", i, messages))
        assert count(url, "nodes") == len(h[-1])
        store.save(checkpoint("a", 9, h[-1]))  # the same history again: no new node
        assert count(url, "nodes") == len(h[-1])
        store.save(checkpoint("b", 3, (*h[4][:7], nd.user("Only older than 90 days."))))
        assert count(url, "nodes") == len(h[-1]) + 1
        rebuilt = tuple(nd.Message.model_validate_json(encode_message(m)) for m in h[-1])
        store.save(checkpoint("c", 9, (*rebuilt, *step_pair(10))))
        assert count(url, "nodes") == len(h[-1]) + 1 + 2
        store.delete("a")
        store.delete("c")
        assert count(url, "nodes") == 8  # b's history: 7 shared + its edit
        assert store.load("b") == checkpoint(
            "b", 3, (*h[4][:7], nd.user("Only older than 90 days."))
        )


def test_a_run_deleted_by_another_store_is_written_whole_again(url: str) -> None:
    h = histories(4)
    first = nd.PostgresSessionStore(url)
    for i in range(3):
        first.save(checkpoint("r", i, h[i]))
    with nd.PostgresSessionStore(url) as other:
        other.delete("r")
    first.save(checkpoint("r", 3, h[3]))  # its cached chain names nodes that are gone
    first.close()
    assert count(url, "nodes") == len(h[3])  # written once, none left over
    with nd.PostgresSessionStore(url) as fresh:
        assert fresh.load("r") == checkpoint("r", 3, h[3])
        assert [i.step_index for i in fresh.history("r")] == [3]


def test_deletes_racing_saves_of_forks_never_break_a_chain(url: str) -> None:
    base = histories(30)
    stop = threading.Event()
    errors: list[BaseException] = []

    def deleter() -> None:
        with nd.PostgresSessionStore(url) as store:
            try:
                while not stop.is_set():
                    store.save(checkpoint("base", 29, base[-1]))
                    store.delete("base")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

    def forker(n: int) -> None:
        with nd.PostgresSessionStore(url) as store:
            try:
                for i in range(40):
                    # each save shares base's prefix: nodes the deleter keeps removing
                    history = (*base[(n * 7 + i) % 30], nd.user(f"fork {n}.{i}"))
                    store.save(checkpoint(f"fork-{n}", i, history))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

    threads = [threading.Thread(target=forker, args=(n,)) for n in range(3)]
    racer = threading.Thread(target=deleter)
    racer.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    racer.join()
    assert errors == []
    with nd.PostgresSessionStore(url) as fresh:  # nothing cached: every chain is read
        for n in range(3):
            for i in range(40):
                loaded = fresh.load(f"fork-{n}", step_index=i)
                assert loaded is not None
                assert loaded.messages[-1] == nd.user(f"fork {n}.{i}")


def test_a_chain_cycle_is_reported_not_followed(url: str) -> None:
    with nd.PostgresSessionStore(url) as store:
        store.save(checkpoint("r", 2, histories(3)[2]))
    head = sql(url, f"SELECT head FROM {PG_SCHEMA}.checkpoints")[0][0]
    sql(url, f"UPDATE {PG_SCHEMA}.nodes SET parent = %s WHERE parent IS NULL", head)
    with nd.PostgresSessionStore(url) as store:
        with pytest.raises(nd.StoreCorruptionError, match="step 2") as caught:
            store.load("r")
        assert (caught.value.run_id, caught.value.step_index) == ("r", 2)


def test_unknown_optional_fields_from_a_newer_version_are_ignored(url: str) -> None:
    with nd.PostgresSessionStore(url) as store:
        store.save(checkpoint("r", 0, histories(1)[0]))
    sql(url, f"""UPDATE {PG_SCHEMA}.checkpoints SET extra = '{{"from_the_future": "x#1"}}'""")
    with nd.PostgresSessionStore(url) as store:
        assert store.load("r") == checkpoint("r", 0, histories(1)[0])


def test_an_unreachable_server_fails_at_once(pg_server: PgServer) -> None:
    import psycopg
    from support.pgserver import _free_port

    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        nd.PostgresSessionStore(f"postgresql://postgres@127.0.0.1:{_free_port()}/postgres")
    assert time.monotonic() - started < 10


def test_without_the_extra_the_class_still_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbdurable.stores.postgres import PostgresSessionStore

    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(nd.ConfigurationError, match=r"nbdurable\[postgres\]"):
        PostgresSessionStore("postgresql://nobody@127.0.0.1/none")
    assert nd.PostgresSessionStore is PostgresSessionStore


# -- round trips -----------------------------------------------------------------------------


@contextmanager
def delaying_proxy(port: int, one_way: float) -> Iterator[int]:
    """A TCP proxy to 127.0.0.1:port that delays every byte by ``one_way`` seconds each way."""
    loop = asyncio.new_event_loop()
    ready: list[tuple[int, asyncio.Event]] = []
    started = threading.Event()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def later() -> None:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                if not data:
                    writer.close()
                    with suppress(OSError):
                        await writer.wait_closed()
                    return
                writer.write(data)

        sender = asyncio.ensure_future(later())
        while True:
            data = await reader.read(65536)
            queue.put_nowait((loop.time() + one_way, data))
            if not data:
                break
        await sender

    connections: set[asyncio.Task[Any]] = set()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections.add(task)
        server_r, server_w = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(
            relay(client_r, server_w), relay(server_r, client_w), return_exceptions=True
        )

    async def serve() -> None:
        stop = asyncio.Event()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ready.append((server.sockets[0].getsockname()[1], stop))
        started.set()
        async with server:
            await stop.wait()
        if connections:  # closed by the client: let the last bytes through
            await asyncio.wait(connections, timeout=10)

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    started.wait(10)
    proxy_port, stop = ready[0]
    try:
        yield proxy_port
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(15)
        loop.close()


def test_a_save_and_a_load_cost_one_round_trip(url: str, pg_server: PgServer) -> None:
    rtt = 0.04
    h = histories(12)
    with delaying_proxy(pg_server.port, rtt / 2) as port:
        proxied = url.replace(f":{pg_server.port}/", f":{port}/")
        with nd.PostgresSessionStore(proxied) as store, nd.PostgresSessionStore(proxied) as other:
            store.pool.wait()
            other.pool.wait()
            for i in range(2):  # warm up: statements get prepared
                store.save(checkpoint("r", i, h[i]))
            started = time.perf_counter()
            for i in range(2, 12):
                store.save(checkpoint("r", i, h[i]))
            per_save = (time.perf_counter() - started) / 10
            started = time.perf_counter()
            assert store.load("r") == checkpoint("r", 11, h[11])  # its messages are cached
            warm = time.perf_counter() - started
            started = time.perf_counter()
            assert other.load("r") == checkpoint("r", 11, h[11])  # reads the chain
            cold = time.perf_counter() - started
    # one round trip per save: BEGIN to COMMIT go out as one pipeline
    # (psycopg's conn.transaction() would wait at BEGIN, at COMMIT and in between)
    assert per_save < 2 * rtt, per_save
    assert warm < 2 * rtt, warm
    assert cold < 3 * rtt, cold
