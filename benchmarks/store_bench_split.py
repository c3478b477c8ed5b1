"""Where persistence's time goes at N steps: SQL (replayed alone) against Python.

The same loop as store_bench.py is run without a store and with a SQLite session,
interleaved in one process (CPU time and wall time, medians). One more SQLite run
records every statement the store sent, with its parameters; replaying them, in
order and alone, on a fresh file with the same settings is the SQL's own cost.
Persistence's Python cost is the rest: (SQLite run - no-store run) - SQL.

    python benchmarks/store_bench_split.py            # N = 500, 5 pairs
    python benchmarks/store_bench_split.py --steps 200 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store_floor import TimedConnection
from store_floor import run_loop as floor_loop

import nbdurable as nd

Recorded = list[tuple[bool, str, Any]]


class _Recording(TimedConnection):
    """A timed connection that also keeps every statement it runs (for the replay)."""

    log: Recorded | None = None
    seconds = 0.0
    """Thread CPU time spent in the statements during the recorded run."""

    # A statement is kept once it ran: one that failed (a BEGIN IMMEDIATE that met
    # a store thread's fold holding the write lock, sent again from a store
    # thread) did nothing to replay. sqlite3 runs a statement's first step in
    # execute: all the work of the store's writes and of its one-row reads.

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        cursor = super().execute(sql, parameters)
        if self.log is not None:
            self.log.append((False, sql, parameters))
        return cursor

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        rows = list(parameters)
        cursor = super().executemany(sql, rows)
        if self.log is not None:
            self.log.append((True, sql, rows))
        return cursor


@dataclass
class Split:
    """Medians over the pairs; ``*_ms`` are per step."""

    steps: int
    pairs: int
    load: float
    statements_per_step: float
    no_store_cpu_s: float
    sqlite_cpu_s: float
    no_store_wall_s: float
    sqlite_wall_s: float
    sql_ms: float
    sql_wall_ms: float
    sql_in_run_ms: float = 0.0
    """CPU time per step inside the statements of the recorded run itself (one run)."""
    sql_checkpoints_ms: float = 0.0
    """The replay's CPU time per step with the store's WAL checkpoints replayed too."""

    @property
    def ratio(self) -> float:
        """SQLite session / no store, wall time."""
        return self.sqlite_wall_s / self.no_store_wall_s

    @property
    def cpu_ratio(self) -> float:
        """SQLite session / no store, CPU time."""
        return self.sqlite_cpu_s / self.no_store_cpu_s

    @property
    def persistence_ms(self) -> float:
        """Persistence's CPU time per step (SQLite run - no-store run)."""
        return (self.sqlite_cpu_s - self.no_store_cpu_s) * 1000 / self.steps

    @property
    def python_ms(self) -> float:
        """Persistence's CPU time per step that is not SQL."""
        return self.persistence_ms - self.sql_ms

    def lines(self) -> list[str]:
        """The figures as text."""
        return [
            f"N = {self.steps}, {self.pairs} interleaved pairs, load average {self.load:.2f}",
            f"  SQLite session / no store: wall {self.ratio:.2f}x "
            f"({self.sqlite_wall_s * 1000:.0f} / {self.no_store_wall_s * 1000:.0f} ms), "
            f"CPU {self.cpu_ratio:.2f}x "
            f"({self.sqlite_cpu_s * 1000:.0f} / {self.no_store_cpu_s * 1000:.0f} ms)",
            f"  persistence per step (CPU): {self.persistence_ms:.3f} ms = "
            f"SQL {self.sql_ms:.3f} ms ({self.statements_per_step:.1f} statements, "
            f"replayed alone; wall {self.sql_wall_ms:.3f} ms) + Python {self.python_ms:.3f} ms",
            f"  with its WAL checkpoints (a store thread's, in the run's CPU time) the SQL is "
            f"{self.sql_checkpoints_ms:.3f} ms/step replayed alone: Python "
            f"{self.persistence_ms - self.sql_checkpoints_ms:.3f} ms",
            f"  the same statements inside the recorded run: {self.sql_in_run_ms:.3f} ms/step "
            f"(WAL checkpoints and the timer included); Python beside them "
            f"{self.persistence_ms - self.sql_in_run_ms:.3f} ms",
        ]


def run_loop(n: int, db: Path | None, log: Recorded | None = None) -> tuple[float, float]:
    """One run of n tool steps; (wall s, CPU s). With ``log``, statements are recorded."""
    connect = sqlite3.connect
    if log is not None:
        _Recording.log = log
        sqlite3.connect = lambda *a, **k: connect(*a, factory=_Recording, **k)  # type: ignore[assignment]
    try:
        store = nd.SqliteSessionStore(db) if db is not None else None
        if log is not None:
            log.clear()  # the store's opening is not a step's work
            _Recording.seconds = 0.0
        wall, cpu = floor_loop(n, store)
        in_run = _Recording.seconds  # not the close's final WAL checkpoint
        if store is not None:
            store.close()
    finally:
        sqlite3.connect = connect
        _Recording.log = None
    _Recording.seconds = in_run
    return wall, cpu


def _kept(sql: str, checkpoints: bool) -> bool:
    text = sql.lstrip().upper()
    return not text.startswith("PRAGMA") or (checkpoints and "WAL_CHECKPOINT" in text)


def replay(db: Path, log: Recorded, checkpoints: bool = False) -> tuple[float, float]:
    """The recorded statements, in order, alone; (wall s, CPU s).

    With ``checkpoints`` the store's WAL checkpoints (which a store thread runs
    during the run, in the run's CPU time) are replayed too, where they came.
    """
    nd.SqliteSessionStore(db).close()  # a fresh file with the schema
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    # Checkpoints ran on a connection of their own, sometimes inside another's
    # transaction (in the log's order): so here too, never waiting.
    folds = sqlite3.connect(db, isolation_level=None, timeout=0)
    statements = [entry for entry in log if _kept(entry[1], checkpoints)]
    wall, cpu = time.perf_counter(), time.process_time()
    for many, sql, parameters in statements:
        if many:
            conn.executemany(sql, parameters)
        else:
            (folds if sql.startswith("PRAGMA") else conn).execute(sql, parameters).fetchall()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    folds.close()
    conn.close()
    return wall, cpu


def split(n: int = 500, pairs: int = 5, root: Path | None = None) -> Split:
    """Interleaved no-store and SQLite runs, and the SQL replayed alone, in one process."""
    with tempfile.TemporaryDirectory(prefix="nbdurable-split-", dir=root) as tmp:
        base = Path(tmp)
        log: Recorded = []
        run_loop(n, base / "recorded.db", log)
        in_run = _Recording.seconds
        statements = sum(1 for _, sql, _ in log if _kept(sql, checkpoints=False))
        plain, stored, sql, folded = [], [], [], []
        for k in range(pairs):
            plain.append(run_loop(n, None))
            stored.append(run_loop(n, base / f"run-{k}.db"))
            sql.append(replay(base / f"replay-{k}.db", log))
            folded.append(replay(base / f"replay-wal-{k}.db", log, checkpoints=True))
    med = statistics.median
    return Split(
        steps=n,
        pairs=pairs,
        load=os.getloadavg()[0],
        statements_per_step=statements / n,
        no_store_cpu_s=med(c for _, c in plain),
        sqlite_cpu_s=med(c for _, c in stored),
        no_store_wall_s=med(w for w, _ in plain),
        sqlite_wall_s=med(w for w, _ in stored),
        sql_ms=med(c for _, c in sql) * 1000 / n,
        sql_wall_ms=med(w for w, _ in sql) * 1000 / n,
        sql_in_run_ms=in_run * 1000 / n,
        sql_checkpoints_ms=med(c for _, c in folded) * 1000 / n,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5, help="interleaved pairs (medians)")
    args = parser.parse_args(argv)
    print("\n".join(split(args.steps, args.repeat).lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
