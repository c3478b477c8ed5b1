"""The bundled stores' own conformance tests: those that need a backend's hooks.

The suite every store must pass ships in :mod:`nbdurable.testing` (run over the
bundled stores by ``test_suite.py``); the tests here damage stored data, fake a
newer schema, measure what a save writes or open a store from other processes,
through the hooks of the registry in ``conftest.py``. A test that needs a
capability skips stores that do not declare it, and fails when a store declares
it but the registry lacks the hook the test needs.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap

import pytest

import nbdurable as nd
from nbdurable.durable import (
    INCREMENTAL,
    MULTIPROCESS,
    PERSISTENT,
    VERSIONED_SCHEMA,
    supports,
)
from nbdurable.durable.store import EventLog
from nbdurable.testing._checkpoints import checkpoint, histories, save_run, step_pair

from .conftest import Backend, Damage, Footprint, StoreCase

# -- building histories ---------------------------------------------------------------------


def require(store: object, capability: str) -> None:
    if not supports(store, capability):
        pytest.skip(f"{type(store).__name__} does not declare {str(capability)!r}")


def hook(backend: Backend, name: str) -> object:
    found = getattr(backend, name)
    assert found is not None, f"backend {backend.name!r} declares a capability but has no {name}"
    return found


# -- the history capability (every bundled store) -------------------------------------------


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


# -- async use: the loop drives the store ----------------------------------------------------


# -- persistence -----------------------------------------------------------------------------


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


# -- the append-only hint (stores that declare saves_extensions) -----------------------------


def test_a_save_told_what_it_extends_writes_the_tail_and_loads_verified(
    any_store: nd.HistoryStore, store_case: StoreCase
) -> None:
    if not (isinstance(any_store, EventLog) and any_store.saves_extensions):
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
