"""Reading a store never creates it: a mistyped path is an error naming it (issue 36).

Each command runs as its own process, in a scratch working directory, as a user
would type it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.stores._default import DEFAULT_STORE

ROOT = Path(__file__).resolve().parents[2]


def _cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NBDURABLE_STORE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "80"
    return subprocess.run(
        [sys.executable, "-m", "nbdurable.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("runs", "list"),
        ("runs",),
        ("runs", "graphs"),
        ("runs", "show", "run-1"),
        ("runs", "history", "run-1"),
        ("runs", "explain", "run-1"),
        ("runs", "approvals"),
        ("runs", "cancel", "run-1"),
    ],
)
def test_a_mistyped_store_is_an_error_and_no_file(tmp_path: Path, argv: tuple[str, ...]) -> None:
    done = _cli(tmp_path, *argv, "--store", TYPO)
    _refused(tmp_path, done)


@pytest.mark.parametrize("command", ["check", "prune"])
def test_store_commands_refuse_a_mistyped_store(tmp_path: Path, command: str) -> None:
    extra = ("--older-than", "1d", "--dry-run") if command == "prune" else ()
    _refused(tmp_path, _cli(tmp_path, "store", command, TYPO, *extra))


TYPO = "sqlite:///typo/stuk.db"


def _refused(tmp_path: Path, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 2, done
    assert done.stdout == ""
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith("nbdurable: no SQLite store file at ")
    assert str(tmp_path / "typo" / "stuk.db") in line and DEFAULT_STORE in line
    assert list(tmp_path.iterdir()) == []  # neither the file nor its folder


def test_the_default_store_is_named_when_it_does_not_exist(tmp_path: Path) -> None:
    done = _cli(tmp_path, "runs", "list")
    assert done.returncode == 2
    assert str(tmp_path / ".nbdurable" / "runs.db") in done.stderr
    assert "default store" in done.stderr and "NBDURABLE_STORE" in done.stderr
    assert not (tmp_path / ".nbdurable").exists()


def test_an_empty_store_says_which_store_it_read(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    nd.open_store(url).close()  # type: ignore[attr-defined]
    assert _cli(tmp_path, "runs", "list", "--store", url).stdout == f"no runs in {url}\n"
    assert _cli(tmp_path, "runs", "graphs", "--store", url).stdout == f"no graphs in {url}\n"
    approvals = _cli(tmp_path, "runs", "approvals", "--store", url).stdout
    assert approvals == f"no pending approvals in {url}\n"


def test_inspect_given_a_url_refuses_a_missing_path(tmp_path: Path) -> None:
    code = (
        "import nbdurable as nd\n"
        "try:\n"
        "    nd.inspect.explain('sqlite:///nope.db', 'r')\n"
        "except nd.ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert "nope.db" in done.stdout and "nothing was created" in done.stdout, done
    assert list(tmp_path.iterdir()) == []


def test_a_worker_says_once_that_it_created_the_store(tmp_path: Path) -> None:
    argv = ["worker", "--agents", "nbdurable.cli.demo_agent:janitor", "--exit-when-idle"]
    argv += ["--store", "sqlite:///new/runs.db", "--poll-interval", "0.05"]
    first = _cli(tmp_path, *argv)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("(a new store, created now)") == 1
    assert (tmp_path / "new" / "runs.db").is_file()
    again = _cli(tmp_path, *argv)
    assert again.returncode == 0 and "a new store" not in again.stdout + again.stderr


def test_open_store_reads_without_creating_and_says_when_it_creates(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'runs.db'}"
    with pytest.raises(nd.ConfigurationError, match="nothing was created"):
        nd.open_store(url, create=False)
    with pytest.raises(nd.ConfigurationError, match="nothing was created"):
        nd.open_store(f"jsonl:///{tmp_path / 'dir'}", create=False)
    assert list(tmp_path.iterdir()) == []
    caplog.set_level("DEBUG", "nbdurable.stores")
    nd.open_store(url).close()  # type: ignore[attr-defined]
    nd.open_store(url).close()  # type: ignore[attr-defined]
    created = [r.getMessage() for r in caplog.records if "created a new store" in r.getMessage()]
    assert created == [f"created a new store: {url}"]
    nd.open_store(url, create=False).close()  # type: ignore[attr-defined]


def test_an_unknown_run_names_the_store_it_was_looked_up_in(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    nd.open_store(url).close()  # type: ignore[attr-defined]
    for action in ("show", "history", "explain"):
        done = _cli(tmp_path, "runs", action, "nope", "--store", url)
        assert done.returncode == 2 and done.stderr == f"nbdurable: Run 'nope' not found in {url}\n"
