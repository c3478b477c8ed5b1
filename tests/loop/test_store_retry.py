"""Loop saves (`generate_text` with a DurableSession) through a busy SQLite store: retried for
`store_retry_ms`, then the seed's logged failed save (S000: a raising save never kills a run)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

from support.sqlite_locker import hold_write_lock

import nbdurable as nd


class Messages:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def error(self, msg: str, *args: object, **kwargs: object) -> None:
        self.errors.append(msg % args)

    def warning(self, msg: str, *args: object, **kwargs: object) -> None:
        self.warnings.append(msg % args)


def _lock_on_first_call(path: Path, seconds: float, holders: list[Any]) -> nd.Tool:
    @nd.tool
    async def lock_the_store(n: int) -> str:
        """Let another process take the store's write lock (the first time)."""
        if not holders:
            holders.append(await asyncio.to_thread(hold_write_lock, path, seconds))
        return f"locked {n}"

    return lock_the_store


async def _run(path: Path, store_retry_ms: int, lock_seconds: float) -> tuple[Any, Messages]:
    holders: list[Any] = []
    log = Messages()
    counter = itertools.count(1)
    deps = nd.Deps(generate_id=lambda: f"id{next(counter)}", logger=log)
    store = nd.SqliteSessionStore(path, busy_timeout=0.05)
    try:
        result = await nd.generate_text(
            model=nd.ScriptedModel([nd.Turn.call("lock_the_store", n=1), "done"]),
            messages="go",
            tools=[_lock_on_first_call(path, lock_seconds, holders)],
            session=nd.DurableSession(store, run_id="r", store_retry_ms=store_retry_ms),
            deps=deps,
        )
        assert result.text == "done"  # the run goes on in every case
        for holder in holders:
            holder.wait(timeout=10)
        return [info.step_index for info in store.history("r")], log
    finally:
        store.close()


async def test_a_save_that_meets_a_held_write_lock_is_retried_and_kept(tmp_path: Path) -> None:
    steps, log = await _run(tmp_path / "runs.db", store_retry_ms=10_000, lock_seconds=1.0)
    assert steps == [0, 1]  # both step boundaries were saved
    assert log.errors == []
    assert any("database is locked" in w and "retrying" in w for w in log.warnings)
    assert any("the store is back" in w for w in log.warnings)


async def test_past_its_budget_a_save_is_logged_as_failed_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    steps, log = await _run(tmp_path / "runs.db", store_retry_ms=200, lock_seconds=1.5)
    assert 0 not in steps  # the save at step 0 was given up
    assert any("stayed unavailable" in e and "database is locked" in e for e in log.errors)


def test_store_retry_ms_must_be_a_non_negative_integer() -> None:
    import pytest

    store = nd.InMemorySessionStore()
    for bad in (-5, 1.5, False):
        with pytest.raises(nd.ConfigurationError, match="store_retry_ms"):
            nd.DurableSession(store, store_retry_ms=bad)  # type: ignore[arg-type]
    assert nd.DurableSession(store).store_retry_ms == 60_000
