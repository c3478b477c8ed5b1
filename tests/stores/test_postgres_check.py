"""``nbdurable store check`` on PostgreSQL: a real server, data damaged with plain SQL."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from support import broken_harness as harness

import nbdurable as nd
from nbdurable.stores._check import check_store


@pytest.fixture
def pg_store(pg_database: str) -> str:
    harness.build(pg_database)
    return pg_database


def _sql(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def test_a_sound_postgres_store_checks_clean(pg_store: str) -> None:
    report = check_store(pg_store)
    assert report.clean, report.lines()
    assert report.counts["runs"] == 3
    assert report.counts["checkpoints"] == 3 * (harness.STEPS + 1)


def test_indexes_are_checked_with_amcheck_when_installed(pg_store: str) -> None:
    before = check_store(pg_store)
    assert any("amcheck" in note for note in before.notes)
    try:
        _sql(pg_store, "CREATE EXTENSION IF NOT EXISTS amcheck")
    except psycopg.Error as exc:  # the server's contrib modules are not installed
        pytest.skip(f"amcheck is not available: {exc}")
    after = check_store(pg_store)
    assert after.clean and not any("amcheck" in note for note in after.notes)


def test_damage_is_found_and_names_the_runs(pg_store: str) -> None:
    _sql(
        pg_store,
        # a message whose text no longer hashes to its id (an edit by hand)
        "UPDATE nbdurable.nodes SET message = replace(message, 'of run-1', 'of run-X') "
        "WHERE message LIKE '%probe result 2 of run-1%'",
        # checkpoint metadata that is not JSON
        "UPDATE nbdurable.checkpoints SET usage = 'not json' WHERE run_id = 'run-0' AND seq = 2",
        # a hole in the event log
        "DELETE FROM nbdurable.events WHERE run_id = 'run-2' AND position = 5",
    )
    report = check_store(pg_store)
    assert sorted(report.affected_runs) == ["run-0", "run-1", "run-2"]
    lines = report.lines()
    assert any(
        line.startswith("run run-1 steps 2-4: message node") and "hash" in line for line in lines
    ), lines
    assert any(
        line.startswith("run run-0 step 1: save 2: its metadata does not decode") for line in lines
    ), lines
    assert "run run-2: events 5 are missing or unreadable" in lines
    # the password, if any, is not printed; the store's own reads agree
    store: Any = nd.open_store(pg_store)
    try:
        with pytest.raises(nd.StoreCorruptionError):
            store.load("run-1")
        assert store.load("run-1", 1) is not None
    finally:
        store.close()


def test_a_schema_without_nbdurable_tables_is_reported(pg_database: str) -> None:
    report = check_store(pg_database + "?schema=elsewhere")
    assert not report.clean and "no nbdurable schema" in report.lines()[0]
