"""``nbdurable store check URL``: exit 0 when sound, 1 with what is damaged, 2 when it cannot run."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from .conftest import fits

NOT_UTF8 = "CAST(X'7B2262616420FF22' AS TEXT)"


def _path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def test_a_sound_store_checks_clean_with_exit_0(cli, runs_store: str) -> None:
    status, out, err = cli("store", "check", runs_store)
    assert (status, err) == (0, "")
    first, *rest = out.splitlines()
    assert first == f"Checked {runs_store}:"
    counts = " ".join(line.strip() for line in rest[:-1])
    assert counts.startswith("5 runs, 5 checkpoints,") and "4 run records" in counts
    assert rest[-1] == "OK: no damage found."
    assert fits("\n".join(rest))


def test_damage_is_listed_by_run_with_what_to_do_and_exit_1(cli, runs_store: str) -> None:
    path = _path(runs_store)
    conn = sqlite3.connect(path)
    conn.execute(
        f"UPDATE nodes SET message = {NOT_UTF8} WHERE id = "
        "(SELECT head FROM checkpoints WHERE run_id = 'run-done' ORDER BY seq DESC LIMIT 1)"
    )
    conn.execute(f"UPDATE event_batches SET events = {NOT_UTF8} WHERE run_id = 'run-flaky'")
    conn.commit()
    conn.close()
    status, out, err = cli("store", "check", runs_store)
    assert status == 1 and err == ""
    assert "DAMAGED:" in out and "Affected runs: run-done, run-flaky" in out
    assert "run run-done step 1: message node" in out and "is not valid UTF-8" in out
    assert "restore it from a backup" in out and "docs/stores.md" in out
    status, out, _ = cli("store", "check", "--json", runs_store)
    report = json.loads(out)
    assert status == 1 and report["clean"] is False
    assert report["affected_runs"] == ["run-done", "run-flaky"]
    # the store's own reads of the damaged run say the same, and point at the check
    status, _, err = cli("runs", "show", "run-done", "--store", runs_store)
    assert status == 2 and "nbdurable store check" in err and str(path) in err


def test_a_file_that_is_not_a_database_exits_1_and_a_missing_one_2(cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not an SQLite file at all" * 200)
    status, out, _ = cli("store", "check", f"sqlite:///{bad}")
    assert status == 1 and "not a readable SQLite database" in out
    status, _, err = cli("store", "check", f"sqlite:///{tmp_path}/missing.db")
    assert status == 2 and "no SQLite store file" in err
    assert not (tmp_path / "missing.db").exists()  # the check never creates a store
    status, _, err = cli("store", "check", "memory://")
    assert status == 2 and "cannot check" in err


def test_the_check_only_reads(runs_store: str) -> None:
    path = _path(runs_store)
    before = path.read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "nbdurable.cli", "store", "check", runs_store],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert path.read_bytes() == before
