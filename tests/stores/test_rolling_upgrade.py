"""Old and new workers share one store during a rolling upgrade.

Across versions, for real: the previous release's code (extracted from git
history and imported in a subprocess) reads, checks and works a store the
current code wrote (its JSONL store; the SQLite store packs values since schema
version 5, which the previous release refuses by name). Forward: records a later release writes with fields this
one does not know are read (the unknown fields ignored), and a store whose
schema a later release changed in a way this one cannot read is refused with
an error naming the version needed. The other direction (old files, new code)
is tests/stores/test_old_store_files.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.reseal import reseal

import nbdurable as nd
from nbdurable.durable._stored import validate_stored
from nbdurable.runs import RuntimeRun
from nbdurable.runtime import DurableRuntime
from nbdurable.stores._check import check_store
from nbdurable.stores.jsonl._format import FORMAT_FILE, FORMAT_VERSION
from nbdurable.stores.postgres._schema import SCHEMA_VERSION as PG_SCHEMA_VERSION
from nbdurable.stores.sqlite._schema import SCHEMA_VERSION

from .conftest import PG_SCHEMA, StoreCase
from .fixtures import store_agents as sa

PREVIOUS = "5faba37"
"""The previous release: the oldest code expected to share a store with this one."""
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "stores" / "fixtures"
MAKE_FIXTURES = FIXTURES / "make_fixtures.py"
LATER = "a_field_of_a_later_release"
WAIT = 30.0
TIMEOUT = 240


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's ``nbdurable`` package, from git."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the previous release cannot be extracted")
    known = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if known.returncode != 0:
        pytest.skip(f"git history without {PREVIOUS} (a shallow clone or an export)")
    target = tmp_path_factory.mktemp("previous")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS, "nbdurable"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


@pytest.fixture(scope="module")
def written_now(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite and a JSONL store written by the current code (``now.sqlite``, ``now.jsonl``)."""
    out = tmp_path_factory.mktemp("now")
    subprocess.run(
        [sys.executable, str(MAKE_FIXTURES), "now", "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        check=True,
        timeout=TIMEOUT,
    )
    return out


def _copy(written: Path, tmp_path: Path) -> tuple[Path, Path]:
    sqlite, jsonl = tmp_path / "now.sqlite", tmp_path / "now.jsonl"
    shutil.copyfile(written / "now.sqlite", sqlite)
    shutil.copytree(written / "now.jsonl", jsonl)
    return sqlite, jsonl


# What the previous release does with a store, run with its own code: it opens
# each store (reporting the version error of one it refuses), reads every run's
# checkpoints and events, decodes every run record and tool intent (reporting
# the ones it cannot) and checks the store.
READER = textwrap.dedent(
    """
    import asyncio, json, sqlite3, sys
    from pathlib import Path

    import nbdurable as nd
    from pydantic import ValidationError

    assert nd.__file__.startswith(sys.argv[1]), nd.__file__
    from nbdurable.stores.check import check_store
    RuntimeRun = nd.runtime.RuntimeRun
    out = {"fields": sorted(RuntimeRun.model_fields), "runs": {}, "records": {}}
    for url in sys.argv[2:4]:
        try:
            store = nd.open_store(url)
        except nd.CheckpointVersionError as exc:
            out.setdefault("refused", {})[url.split("/")[-1]] = [exc.version, str(exc)]
            continue
        for run_id in store.list():
            checkpoint = store.load(run_id)
            events = store.read_events(run_id)
            out["runs"][url.split("/")[-1] + ":" + run_id] = [
                checkpoint.status, len(checkpoint.messages), len(events)
            ]
        store.close()
        report = check_store(url)
        out.setdefault("clean", {})[url.split("/")[-1]] = [report.clean, report.lines()]
    conn = sqlite3.connect(sys.argv[2].removeprefix("sqlite:///"))
    for run_id, text in conn.execute("SELECT run_id, record FROM rt_runs"):
        try:
            out["records"][run_id] = RuntimeRun.model_validate_json(text).state
        except ValidationError as exc:
            out["records"][run_id] = [[e["type"], list(e["loc"])] for e in exc.errors()]
    conn.close()
    print(json.dumps(out))
    """
)


def _previous(release: Path, *args: str) -> dict[str, Any]:
    """Run :data:`READER` with the previous release's code; its report."""
    done = subprocess.run(
        [sys.executable, "-c", READER, str(release), *args],
        cwd=release,  # ``python -c`` puts the working directory first on the path
        # the previous release's package first; the store test agents beside it
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(release), str(FIXTURES)])},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


def _current_view(sqlite: Path, jsonl: Path) -> dict[str, list[Any]]:
    """What the current code reads of each run: status, message count, events."""
    seen: dict[str, list[Any]] = {}
    for path in (sqlite, jsonl):
        store = nd.open_store(f"{'sqlite' if path == sqlite else 'jsonl'}:///{path}")
        for run_id in store.list():
            checkpoint = store.load(run_id)
            assert checkpoint is not None
            events = store.read_events(run_id)  # type: ignore[attr-defined]
            seen[f"{path.name}:{run_id}"] = [
                checkpoint.status,
                len(checkpoint.messages),
                len(events),
            ]
        store.close()
    return seen


def _records(sqlite: Path) -> dict[str, dict[str, Any]]:
    conn = sqlite3.connect(sqlite)
    try:
        return {r: json.loads(t) for r, t in conn.execute("SELECT run_id, record FROM rt_runs")}
    finally:
        conn.close()


def test_the_previous_release_refuses_the_sqlite_store_by_name_and_reads_the_jsonl_one(
    previous_release: Path, written_now: Path, tmp_path: Path
) -> None:
    sqlite, jsonl = _copy(written_now, tmp_path)
    expected = _current_view(sqlite, jsonl)
    records = _records(sqlite)
    before = sqlite.read_bytes()
    seen = _previous(previous_release, f"sqlite:///{sqlite}", f"jsonl:///{jsonl}")

    # Schema version 7 checksums rows the previous release would write without one
    # (as version 6 kept events in batches it cannot read): it says so, naming the
    # version it would need, rather than misreading the file.
    assert SCHEMA_VERSION == 7 and list(seen["refused"]) == [sqlite.name]
    version, message = seen["refused"][sqlite.name]
    assert version == SCHEMA_VERSION
    assert f"schema version {SCHEMA_VERSION}" in message and "upgrade nbdurable" in message
    assert sqlite.read_bytes() == before  # and it left the file alone
    # The JSONL store's format did not change: every checkpoint and event log reads.
    assert seen["runs"] == {k: v for k, v in expected.items() if k.startswith(jsonl.name)}
    assert seen["clean"] == {jsonl.name: [True, seen["clean"][jsonl.name][1]]}
    # Run records are JSON as before: its reader decodes the ones it knows.
    old_fields = set(seen["fields"])
    for run_id, record in records.items():
        unknown = sorted(set(record) - old_fields)
        if unknown:
            # A field added since the previous release: its strict reader refuses
            # the record (and says why) rather than misreading it.
            errors = seen["records"][run_id]
            assert sorted(errors) == [["extra_forbidden", [name]] for name in unknown], run_id
        else:
            assert seen["records"][run_id] == record["state"], run_id
    # ...and the current code still reads and checks what it wrote.
    assert _current_view(sqlite, jsonl) == expected
    assert check_store(f"sqlite:///{sqlite}").clean


def _add_later_fields(sqlite: Path, jsonl: Path) -> None:
    """Give every stored record a field, as a later release would write it."""
    conn = sqlite3.connect(sqlite, isolation_level=None)
    try:
        for table, column in (("rt_runs", "record"), ("rt_intents", "intent")):
            conn.execute(f"UPDATE {table} SET {column} = json_set({column}, '$.{LATER}', 7)")
        conn.execute(f"""UPDATE checkpoints SET extra = '{{"{LATER}": 7}}'""")
    finally:
        conn.close()
    reseal(sqlite)  # a later release checksums the rows it writes
    for path in jsonl.glob("*.jsonl"):
        lines = []
        for raw in path.read_text().splitlines():
            line = json.loads(raw)
            line[LATER] = 7
            for event in line.get("events") or ():
                event[LATER] = 7
            lines.append(json.dumps(line))
        path.write_text("\n".join(lines) + "\n")


async def test_records_with_a_later_release_field_read_check_clean_and_work(
    written_now: Path, tmp_path: Path
) -> None:
    sqlite, jsonl = _copy(written_now, tmp_path)
    expected = _current_view(sqlite, jsonl)
    _add_later_fields(sqlite, jsonl)
    assert LATER in _records(sqlite)["rt-pending"]

    assert _current_view(sqlite, jsonl) == expected
    for url in (f"sqlite:///{sqlite}", f"jsonl:///{jsonl}"):
        report = check_store(url)
        assert report.clean, report.lines()
    store = nd.open_store(f"sqlite:///{sqlite}")
    signer = nd.ApprovalSigner(sa.SECRET)
    async with DurableRuntime(store=store, agents=sa.agents, approval_signer=signer) as rt:
        assert {r.run_id: r.state for r in rt.list_runs()}["rt-waiting"] == "waiting_approval"
        run = await rt.get_run("rt-pending")
        done = await asyncio.wait_for(run.result(), WAIT)
        assert done.text in {"First answer.", "Second answer."}
    store.close()


def test_a_stored_record_ignores_unknown_fields_but_code_stays_strict() -> None:
    fields: dict[str, Any] = {
        "run_id": "r",
        "agent_id": "a",
        "agent_version": "1",
        "session_id": "s",
    }
    fields |= {"prompt": '"hi"', "state": "pending", "created_at": 1, "updated_at": 2}
    stored = json.dumps({**fields, LATER: {"any": "thing"}})
    assert validate_stored(RuntimeRun, stored) == RuntimeRun(**fields)
    assert validate_stored(RuntimeRun, json.loads(stored)) == RuntimeRun(**fields)
    with pytest.raises(ValueError, match=LATER):
        RuntimeRun(**fields, **{LATER: 1})
    with pytest.raises(ValueError, match="state"):  # a known field stays validated
        validate_stored(RuntimeRun, json.dumps({**fields, "state": "bogus", LATER: 1}))


# -- a newer schema ------------------------------------------------------------------------


def _mark_newer(case: StoreCase, readable_by: int | None) -> None:
    """Put the store at one version past this nbdurable's, as a later release's migration."""
    name = case.backend.name
    if name == "jsonl":
        marker = Path(case.url.removeprefix("jsonl:///")) / FORMAT_FILE
        data: dict[str, Any] = {"format": "nbdurable-jsonl", "version": FORMAT_VERSION + 1}
        if readable_by is not None:
            data["readable_by"] = readable_by
        marker.write_text(json.dumps(data))
    elif name == "sqlite":
        conn = sqlite3.connect(case.url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            conn.execute("ALTER TABLE nbdurable_schema ADD COLUMN readable_by INTEGER")
            conn.execute(
                "INSERT INTO nbdurable_schema (version, applied_at, readable_by) VALUES (?, 0, ?)",
                (SCHEMA_VERSION + 1, readable_by),
            )
        finally:
            conn.close()
    else:
        import psycopg

        with psycopg.connect(case.url, autocommit=True) as pg:
            pg.execute(f"ALTER TABLE {PG_SCHEMA}.nbdurable_schema ADD COLUMN readable_by integer")
            pg.execute(
                f"INSERT INTO {PG_SCHEMA}.nbdurable_schema (version, applied_at, readable_by) "
                "VALUES (%s, 0, %s)",
                (PG_SCHEMA_VERSION + 1, readable_by),
            )


def _version(backend: str) -> int:
    """The store version this nbdurable writes on ``backend`` (each counts its own)."""
    return {"jsonl": FORMAT_VERSION, "sqlite": SCHEMA_VERSION}.get(backend, PG_SCHEMA_VERSION)


@pytest.mark.parametrize("backend", ["sqlite", "jsonl", "postgres"])
def test_a_newer_schema_is_refused_naming_the_version_needed(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    case = _case(backend, request, tmp_path)
    _mark_newer(case, readable_by=None)
    newer = _version(backend) + 1
    with pytest.raises(nd.CheckpointVersionError) as caught:
        case.open()
    assert caught.value.version == newer
    message = str(caught.value)
    assert f"reads {'format' if backend == 'jsonl' else 'schema'} version {newer}" in message
    assert nd.__version__ in message and "upgrade nbdurable" in message


@pytest.mark.parametrize("backend", ["sqlite", "jsonl", "postgres"])
def test_a_newer_schema_that_says_this_version_reads_it_opens(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    case = _case(backend, request, tmp_path)
    _mark_newer(case, readable_by=_version(backend))
    store = case.open()
    try:
        assert [c.step_index for c in store.history("r")] == [0, 1]
        store.save(_step("r", 2))
        loaded = store.load("r")
        assert loaded is not None and loaded.step_index == 2
    finally:
        store.close()


def test_the_previous_release_refuses_a_newer_schema_naming_it(
    previous_release: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = nd.open_store(url)
    store.save(_step("r", 0))
    store.close()
    conn = sqlite3.connect(tmp_path / "runs.db", isolation_level=None)
    conn.execute("INSERT INTO nbdurable_schema VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    conn.close()
    code = (
        "import sys, nbdurable as nd\n"
        "try:\n    nd.open_store(sys.argv[1])\n"
        "except nd.CheckpointVersionError as exc:\n    print(exc.version, exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, url],
        cwd=previous_release,
        env={**os.environ, "PYTHONPATH": str(previous_release)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    assert done.stdout.startswith(f"{SCHEMA_VERSION + 1} "), done.stdout + done.stderr
    assert f"schema version {SCHEMA_VERSION + 1}" in done.stdout


def _step(run_id: str, step_index: int) -> nd.AgentCheckpoint:
    messages = [nd.user("Hello.")] + [nd.assistant(f"Step {i}.") for i in range(step_index)]
    return nd.AgentCheckpoint(
        run_id=run_id,
        step_index=step_index,
        status="suspended",
        messages=tuple(messages),
        created_at=step_index,
    )


def _case(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreCase:
    from .conftest import BACKENDS

    case = StoreCase(BACKENDS[backend], BACKENDS[backend].make_url(request, tmp_path))
    store = case.open()
    for step_index in (0, 1):
        store.save(_step("r", step_index))
    store.close()
    return case
