"""open_store(url): schemes, paths, lazy backends and clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import nbdurable as nd


def test_memory_url_gives_a_fresh_in_memory_store() -> None:
    a, b = nd.open_store("memory://"), nd.open_store("memory://")
    assert isinstance(a, nd.InMemorySessionStore) and a is not b


def test_sqlite_urls_relative_absolute_and_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = nd.open_store("sqlite:///data/runs.db")
    assert isinstance(relative, nd.SqliteSessionStore)
    assert Path(relative.path).resolve() == tmp_path / "data" / "runs.db"
    relative.close()
    absolute = nd.open_store("sqlite:///" + str(tmp_path / "abs" / "runs.db"))
    assert absolute.path == str(tmp_path / "abs" / "runs.db")  # type: ignore[attr-defined]
    absolute.close()
    assert (tmp_path / "abs" / "runs.db").exists()
    spaced = nd.open_store("sqlite:///with%20space.db")
    assert Path(spaced.path).name == "with space.db"  # type: ignore[attr-defined]
    spaced.close()
    memory = nd.open_store("sqlite:///:memory:")
    memory.save(
        nd.AgentCheckpoint(run_id="r", step_index=0, status="running", messages=(), created_at=1)
    )
    assert memory.list() == ["r"]
    memory.close()


def test_jsonl_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = nd.open_store("jsonl:///runs")
    assert isinstance(store, nd.JsonlSessionStore)
    assert store.directory.resolve() == tmp_path / "runs"
    absolute = nd.open_store(f"jsonl:///{tmp_path / 'elsewhere'}")
    assert isinstance(absolute, nd.JsonlSessionStore)
    assert absolute.directory == tmp_path / "elsewhere"


@pytest.mark.parametrize(
    "url",
    ["runs.db", "ftp://x", "sqlite://runs.db", "sqlite://", "jsonl://", "memory://x", "redis://h"],
)
def test_bad_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(nd.ConfigurationError, match=r"expected|needs a path|takes no path"):
        nd.open_store(url)


def test_a_missing_postgres_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whether or not the backend is installed here, simulate an environment without it.
    monkeypatch.setitem(sys.modules, "nbdurable.stores.postgres", None)
    with pytest.raises(nd.ConfigurationError, match=r"nbdurable\[postgres\]"):
        nd.open_store("postgresql://user@127.0.0.1:5432/db")
    with pytest.raises(nd.ConfigurationError, match=r"nbdurable\[postgres\]"):
        nd.open_store("postgres://user@127.0.0.1/db")


def test_backends_are_imported_only_when_their_scheme_is_used(tmp_path: Path) -> None:
    code = (
        "import sys, nbdurable as nd\n"
        "mods = ('nbdurable.stores.sqlite', 'nbdurable.stores.jsonl', 'sqlite_utils',"
        " 'nbdurable.stores.postgres', 'psycopg')\n"
        "nd.open_store('memory://')\n"
        "print(sorted(m for m in mods if m in sys.modules))\n"
        f"nd.open_store('jsonl:///{tmp_path / 'j'}')\n"
        "print(sorted(m for m in mods if m in sys.modules))\n"
        f"nd.open_store('sqlite:///{tmp_path / 'a.db'}')\n"
        "print(sorted(m for m in mods if m in sys.modules))\n"
        f"nd.open_store('sqlite:///{tmp_path / 'a.db'}')\n"
        "print(sorted(m for m in mods if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "[]"
    assert lines[1] == "['nbdurable.stores.jsonl']"
    # a new file needs the schema: sqlite-utils builds it
    assert lines[2] == "['nbdurable.stores.jsonl', 'nbdurable.stores.sqlite', 'sqlite_utils']"
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, nbdurable as nd; nd.open_store('sqlite:///{tmp_path / 'a.db'}');"
            "print('sqlite_utils' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    # an up-to-date file opens without importing sqlite-utils (which imports numpy/pandas)
    assert fresh.stdout.strip() == "False"


def test_store_classes_are_exported_lazily() -> None:
    assert "SqliteSessionStore" in dir(nd) and "JsonlSessionStore" in dir(nd)
    from nbdurable.stores import JsonlSessionStore, SqliteSessionStore

    assert nd.SqliteSessionStore is SqliteSessionStore
    assert nd.JsonlSessionStore is JsonlSessionStore
