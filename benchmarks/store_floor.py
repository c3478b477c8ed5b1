"""Floors for a durable run at N steps: what persistence costs at the least.

The loop of store_bench.py runs, interleaved in one process (medians of wall and
CPU time), with:

- no store;
- a store that discards every write, run on the loop's thread: the cost of the
  loop's own persistence work (events, checkpoints, the writer, the dispatch),
  with no store behind it;
- a minimal SQLite store on the loop's thread: each commit is one row holding the
  commit's events and new messages as one JSON text (no packing, no message
  chain, no hashes, no checks, no index but the key), in the same two commits a
  step as the real store;
- the minimal store with each commit's row packed as the real store packs its
  values (deflate with its preset dictionary, ``packing.pack_json``): the
  floor of a store that also keeps its bytes down (the bytes goal);
- the same minimal store with its commits on a writer thread that the loop never
  waits for: not a durable design (a step is not committed when the loop goes
  on), but the most that overlapping the SQL with the loop's own work could give;
- nbdurable's SQLite session store.

For each store the CPU time spent inside its SQL statements (on any thread,
the store's WAL checkpoints included) is measured too, and persistence's Python
is the rest of the run's CPU time above the no-store run. With ``--dbos`` each
round also runs the same loop as a DBOS Transact workflow on SQLite
(``store_bench_dbos.py``), and each configuration's run is compared with it, in
time and in the bytes of its file once closed.

A store cannot make a run cheaper than its floor, so the ratios say which goals a
faster store alone can reach and which need less work in the loop as well.

    python benchmarks/store_floor.py                  # N = 500, 5 rounds
    python benchmarks/store_floor.py --steps 200 --repeat 3
    python benchmarks/store_floor.py --dbos           # also DBOS (the bench group)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import queue
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import nbdurable as nd
from nbdurable.durable._offload import NowaitCapable
from nbdurable.events import NewEvent
from nbdurable.stores._packing import pack_json
from nbdurable.stores.memory import InMemorySessionStore

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit; "


class DiscardingStore(InMemorySessionStore, NowaitCapable):
    """Takes every write and keeps nothing; its writes run on the loop's thread."""

    local_nonblocking_writes = True
    saves_extensions = True

    def try_without_waiting(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run the write here, on the caller's thread (it never waits)."""
        return fn(*args, **kwargs)

    def load(self, run_id: str, step_index: int | None = None) -> None:
        """No run is ever stored."""
        return None

    def save_with_events(self, checkpoint: Any, events: Sequence[NewEvent], **_: Any) -> list[Any]:
        """Discard both."""
        return []

    def append_events(self, run_id: str, events: Sequence[NewEvent], **_: Any) -> list[Any]:
        """Discard them."""
        return []


class TimedConnection(sqlite3.Connection):
    """A connection that adds the thread CPU time of its statements to ``seconds``."""

    seconds = 0.0
    _lock = threading.Lock()

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        began = time.thread_time()
        try:
            return super().execute(sql, parameters)
        finally:
            self._add(time.thread_time() - began)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        began = time.thread_time()
        try:
            return super().executemany(sql, parameters)
        finally:
            self._add(time.thread_time() - began)

    @classmethod
    def _add(cls, seconds: float) -> None:
        with cls._lock:  # the store's WAL checkpoints run on a store thread
            cls.seconds += seconds


class MinimalSqliteStore(DiscardingStore):
    """One row per commit: the commit's events and new messages as one JSON text."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.db = sqlite3.connect(path, isolation_level=None, factory=TimedConnection)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS log "
            "(run_id TEXT, seq INTEGER, body TEXT, PRIMARY KEY (run_id, seq)) WITHOUT ROWID"
        )
        self.seq = 0
        self.saved = 0

    def _commit(self, run_id: str, events: Sequence[NewEvent], head: object) -> list[Any]:
        self.seq += 1
        body = self._body(events, head)
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("INSERT INTO log VALUES (?, ?, ?)", (run_id, self.seq, body))
        self.db.execute("COMMIT")
        return []

    def _body(self, events: Sequence[NewEvent], head: object) -> str | bytes:
        rows = [
            (e.type, e.step_index, e.operation_id, e.attempt_id, e.payload, e.created_at)
            for e in events
        ]
        return _ENCODER.encode([head, rows])

    def save_with_events(self, checkpoint: Any, events: Sequence[NewEvent], **_: Any) -> list[Any]:
        """One row: the checkpoint's metadata and new messages, and the events."""
        new = checkpoint.messages[self.saved :]
        self.saved = len(checkpoint.messages)
        head = {
            "step": checkpoint.step_index,
            "status": checkpoint.status,
            "usage": checkpoint.usage.model_dump_json(),
            "messages": [m.model_dump_json() for m in new],
        }
        return self._commit(checkpoint.run_id, events, head)

    def append_events(self, run_id: str, events: Sequence[NewEvent], **_: Any) -> list[Any]:
        """One row: the events."""
        return self._commit(run_id, events, None)

    def close(self) -> None:
        """Close the file."""
        self.db.close()


class PackedMinimalSqliteStore(MinimalSqliteStore):
    """The minimal store's rows, each packed with nbdurable's codec (one value a commit)."""

    def _body(self, events: Sequence[NewEvent], head: object) -> str | bytes:
        text = str(super()._body(events, None))
        if isinstance(head, dict):  # the messages' and usage's JSON inline, not as strings
            meta = _ENCODER.encode({"step": head["step"], "status": head["status"]})
            inline = ",".join(head["messages"])
            text = f'[{meta[:-1]},"usage":{head["usage"]},"messages":[{inline}]}}{text[5:]}'
        return pack_json(text)


class NeverWaitingSqliteStore(MinimalSqliteStore):
    """The minimal store's rows, committed on a writer thread the loop never waits for."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.db.close()
        self.rows: queue.SimpleQueue[tuple[str, int, str] | None] = queue.SimpleQueue()
        self.writer = threading.Thread(target=self._write_rows, args=(path,), daemon=True)
        self.writer.start()

    def _write_rows(self, path: Path) -> None:
        db = sqlite3.connect(path, isolation_level=None, factory=TimedConnection)
        db.execute("PRAGMA synchronous = NORMAL")
        while (row := self.rows.get()) is not None:
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO log VALUES (?, ?, ?)", row)
            db.execute("COMMIT")
        db.close()

    def _commit(self, run_id: str, events: Sequence[NewEvent], head: object) -> list[Any]:
        self.seq += 1
        self.rows.put((run_id, self.seq, str(self._body(events, head))))
        return []

    def close(self) -> None:
        """Write what is queued, then close the file."""
        self.rows.put(None)
        self.writer.join()


def timed_sqlite_store(path: Path) -> nd.SqliteSessionStore:
    """nbdurable's store, its connections' statements timed (see :class:`TimedConnection`)."""
    connect = sqlite3.connect
    sqlite3.connect = lambda *a, **k: connect(*a, factory=TimedConnection, **k)  # type: ignore[assignment]
    try:
        return nd.SqliteSessionStore(path)
    finally:
        sqlite3.connect = connect


def run_loop(n: int, store: Any) -> tuple[float, float]:
    """One run of n tool steps on ``store`` (None: no session); (wall s, CPU s).

    The store stays open: what closing it costs is not a step's.
    """
    usage = nd.Usage(input_tokens=10, output_tokens=5, total_tokens=15)
    turns: list[Any] = [nd.Turn(tool_calls=[("probe", {"i": i})], usage=usage) for i in range(n)]
    turns.append(nd.Turn(text="Done.", usage=usage))
    model = nd.ScriptedModel(turns, mode="sequential")

    @nd.tool
    def probe(i: int) -> str:
        """Probe the system once."""
        return (f"probe {i}: " + FILLER * 5)[:200]

    session = nd.DurableSession(store, run_id="bench") if store is not None else None

    async def go() -> str:
        result = await nd.generate_text(
            model=model,
            messages="Probe the system.",
            tools=[probe],
            max_steps=n + 1,
            session=session,
        )
        return result.text

    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    text = asyncio.run(go())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert text == "Done."
    return wall, cpu


CONFIGS: dict[str, Callable[[Path], Any]] = {
    "no store": lambda _: None,
    "discarding store": lambda _: DiscardingStore(),
    "minimal sqlite": MinimalSqliteStore,
    "minimal, packed": PackedMinimalSqliteStore,
    "minimal, never waits": NeverWaitingSqliteStore,
    "nbdurable sqlite": timed_sqlite_store,
}


def _dbos_run(n: int, db: Path) -> tuple[float, int]:
    """DBOS's run of the loop: its wall time and the bytes of its file once shut down."""
    from store_bench_dbos import dbos_run

    seconds = dbos_run(n, db, lambda i: (f"probe {i}: " + FILLER * 5)[:200]).total_s
    return seconds, file_bytes(db)


def file_bytes(db: Path) -> int:
    """Bytes of a SQLite database and its WAL and shared-memory files."""
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists())


def floors(
    n: int = 500, rounds: int = 5, root: Path | None = None, dbos: bool = False
) -> list[str]:
    """The table: each configuration's medians over ``rounds`` interleaved rounds.

    A run's SQL is the CPU time inside its statements; with ``dbos`` each round
    also runs DBOS, and the last columns are DBOS's median wall time over the
    configuration's and the configuration's file over DBOS's (both closed).
    """
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in CONFIGS}
    sizes: dict[str, int] = {}
    dbos_runs: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory(prefix="nbdurable-floor-", dir=root) as tmp:
        for k in range(rounds):
            if dbos:
                dbos_runs.append(_dbos_run(n, Path(tmp) / f"dbos-{k}.db"))
            for name, make in CONFIGS.items():
                path = Path(tmp) / f"{name.replace(' ', '-').replace(',', '')}-{k}.db"
                store = make(path)
                TimedConnection.seconds = 0.0
                wall, cpu = run_loop(n, store)
                if store is not None:
                    store.close()  # a never-waiting store's queue is written by now
                if path.exists():
                    sizes[name] = file_bytes(path)
                times[name].append((wall, cpu, TimedConnection.seconds))
    med = statistics.median
    base_wall = med(w for w, _, _ in times["no store"])
    base_cpu = med(c for _, c, _ in times["no store"])
    dbos_wall = med(w for w, _ in dbos_runs) if dbos_runs else None
    dbos_bytes = med(b for _, b in dbos_runs) if dbos_runs else None
    per_step = 1000 / n
    lines = [
        f"N = {n}, {rounds} interleaved rounds, load average {os.getloadavg()[0]:.2f}"
        + (
            f", DBOS {dbos_wall * per_step:.3f} ms/step, {dbos_bytes:,.0f} bytes"
            if dbos_wall and dbos_bytes
            else ""
        ),
        "config               | wall ms/step | x no store | CPU ms/step | x no store | "
        "SQL ms/step | Python ms/step | x faster than DBOS | bytes closed | x DBOS bytes",
        "---------------------+--------------+------------+-------------+------------+"
        "-------------+----------------+--------------------+--------------+-------------",
    ]
    for name, runs in times.items():
        wall, cpu = med(w for w, _, _ in runs), med(c for _, c, _ in runs)
        sql = med(s for _, _, s in runs)
        python = cpu - base_cpu - sql
        faster = f"{dbos_wall / wall:18.1f}" if dbos_wall else f"{'-':>18}"
        size = sizes.get(name)
        closed = f"{size:12,}" if size is not None else f"{'-':>12}"
        share = f"{size / dbos_bytes:12.2f}" if size is not None and dbos_bytes else f"{'-':>12}"
        lines.append(
            f"{name:20} | {wall * per_step:12.3f} | {wall / base_wall:10.2f} | "
            f"{cpu * per_step:11.3f} | {cpu / base_cpu:10.2f} | "
            f"{sql * per_step:11.3f} | {python * per_step:14.3f} | {faster} | {closed} | {share}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds (medians)")
    parser.add_argument("--dbos", action="store_true", help="also run DBOS (the bench group)")
    args = parser.parse_args(argv)
    print("\n".join(floors(args.steps, args.repeat, dbos=args.dbos)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
