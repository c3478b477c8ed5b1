"""Every flag of `nbdurable worker` and `nbdurable serve` from `NBDURABLE_<FLAG>`."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from nbdurable._errors import ConfigurationError
from nbdurable.cli import _serve as serve
from nbdurable.cli import _worker as worker
from nbdurable.cli import main
from nbdurable.cli._env import env_variables, resolve_env
from nbdurable.notebook import NotebookSession

from .conftest import AGENTS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _parser(command: str) -> argparse.ArgumentParser:
    commands = argparse.ArgumentParser().add_subparsers(dest="command")
    {"worker": worker, "serve": serve}[command].add_parser(commands)
    parser: argparse.ArgumentParser = commands.choices[command]
    return parser


def _parse(command: str, argv: list[str]) -> argparse.Namespace:
    """Parse ``argv`` and read the environment, as the command's handler does first."""
    return resolve_env(_parser(command).parse_args(argv))


def test_worker_flags_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBDURABLE_STORE", "sqlite:///from-env.db")
    monkeypatch.setenv("NBDURABLE_AGENTS", "a.mod:one, b.mod:two")
    monkeypatch.setenv("NBDURABLE_TEMPORAL_ADDRESS", "temporal.example:7233")
    monkeypatch.setenv("NBDURABLE_TASK_QUEUE", "q-env")
    monkeypatch.setenv("NBDURABLE_ENGINE", "temporal")
    monkeypatch.setenv("NBDURABLE_LEASE_MS", "5000")
    monkeypatch.setenv("NBDURABLE_POLL_INTERVAL", "0.5")
    monkeypatch.setenv("NBDURABLE_EXIT_WHEN_IDLE", "yes")
    monkeypatch.setenv("NBDURABLE_LOG_FORMAT", "json")
    args = _parse("worker", [])  # --store and --agents are required, unless set
    assert args.store == "sqlite:///from-env.db"
    assert args.agents == ["a.mod:one", "b.mod:two"]
    assert args.address == "temporal.example:7233"
    assert args.task_queue == "q-env"
    assert args.engine == "temporal"
    assert args.lease_ms == 5000
    assert args.poll_interval == 0.5
    assert args.exit_when_idle is True
    assert args.log_format == "json"
    assert args.namespace == "default"  # unset: the flag's default


def test_a_flag_wins_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBDURABLE_STORE", "sqlite:///from-env.db")
    monkeypatch.setenv("NBDURABLE_AGENTS", "a.mod:one,b.mod:two")
    monkeypatch.setenv("NBDURABLE_LEASE_MS", "5000")
    monkeypatch.setenv("NBDURABLE_EXIT_WHEN_IDLE", "false")
    argv = ["--store", "sqlite:///flag.db", "--agents", "c.mod:three", "--lease-ms", "7"]
    args = _parse("worker", [*argv, "--exit-when-idle"])
    assert args.store == "sqlite:///flag.db"
    assert args.agents == ["c.mod:three"]  # replaces the variable's list, not added to it
    assert args.lease_ms == 7
    assert args.exit_when_idle is True


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("true", True), ("YES", True), ("0", False), ("no", False), ("False", False)],
)
def test_on_off_flags_take_yes_and_no(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("NBDURABLE_NO_STORE_GAUGES", raw)
    args = _parse("serve", ["--store", "memory://", "--agents", "m:a"])
    assert args.no_store_gauges is expected


def test_serve_flags_and_the_repeatable_cors_origin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBDURABLE_PORT", "8123")
    monkeypatch.setenv("NBDURABLE_CORS_ORIGIN", "https://a.example,https://b.example")
    monkeypatch.setenv("NBDURABLE_SERVER_TOKEN", "s3cret")
    args = _parse("serve", ["--store", "memory://", "--agents", "m:a"])
    assert args.port == 8123
    assert args.cors_origin == ["https://a.example", "https://b.example"]
    assert args.token == "s3cret"


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        (
            "NBDURABLE_LEASE_MS",
            "soon",
            "NBDURABLE_LEASE_MS='soon' is not a valid int for --lease-ms",
        ),
        (
            "NBDURABLE_EXIT_WHEN_IDLE",
            "maybe",
            "NBDURABLE_EXIT_WHEN_IDLE='maybe' is not a yes or no",
        ),
        ("NBDURABLE_ENGINE", "kafka", "NBDURABLE_ENGINE='kafka' is not one of embedded, temporal"),
    ],
)
def test_a_bad_value_names_its_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    raw: str,
    message: str,
) -> None:
    monkeypatch.setenv(variable, raw)
    code = main(["worker", "--store", "memory://", "--agents", AGENTS])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("nbdurable: ") and message in err, err


def test_an_empty_variable_of_a_required_flag_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NBDURABLE_STORE", "")
    monkeypatch.setenv("NBDURABLE_AGENTS", " , ")
    assert main(["worker", "--agents", AGENTS]) == 2
    assert "nbdurable: NBDURABLE_STORE is empty: set it, or give --store" in capsys.readouterr().err
    assert main(["worker", "--store", "memory://"]) == 2
    assert "nbdurable: NBDURABLE_AGENTS is empty" in capsys.readouterr().err


def test_a_worker_configured_only_by_the_environment_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("NBDURABLE_STORE", url)
    monkeypatch.setenv("NBDURABLE_AGENTS", AGENTS)
    monkeypatch.setenv("NBDURABLE_EXIT_WHEN_IDLE", "1")
    assert main(["worker"]) == 0
    assert f"from {url}" in capsys.readouterr().out


def test_nbdurable_store_is_the_default_store_of_every_command(
    monkeypatch: pytest.MonkeyPatch, runs_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NBDURABLE_STORE", runs_store)
    assert main(["runs", "list"]) == 0
    assert "run-done" in capsys.readouterr().out
    assert main(["runs", "show", "run-done"]) == 0
    assert NotebookSession().url == runs_store
    monkeypatch.delenv("NBDURABLE_STORE")
    assert NotebookSession().url == "sqlite:///.nbdurable/runs.db"


def _documented() -> set[tuple[str, str]]:
    """The ``| `--flag` | `NBDURABLE_...` |`` rows of docs/cli.md's environment table."""
    text = DOCS.read_text(encoding="utf-8")
    return set(re.findall(r"^\| `(--[a-z0-9-]+)` \| `(NBDURABLE_[A-Z0-9_]+)` \|", text, re.M))


def test_docs_list_every_variable_of_worker_and_serve() -> None:
    flags = set(env_variables(_parser("worker"))) | set(env_variables(_parser("serve")))
    documented = _documented()
    missing = sorted(flags - documented)
    stale = sorted(documented - flags)
    assert not missing, f"add to docs/cli.md's environment table: {missing}"
    assert not stale, f"no such flag any more, remove from docs/cli.md: {stale}"


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_log_level_and_format_are_taken_in_any_case(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    required = ["--store", "memory://", "--agents", AGENTS]
    flagged = _parse(command, [*required, "--log-level", "INFO", "--log-format", "JSON"])
    assert (flagged.log_level, flagged.log_format) == ("info", "json")
    monkeypatch.setenv("NBDURABLE_LOG_LEVEL", "Warning")
    monkeypatch.setenv("NBDURABLE_LOG_FORMAT", "Text")
    from_env = _parse(command, required)
    assert (from_env.log_level, from_env.log_format) == ("warning", "text")
    monkeypatch.setenv("NBDURABLE_LOG_LEVEL", "LOUD")
    with pytest.raises(ConfigurationError, match="NBDURABLE_LOG_LEVEL='LOUD' is not one of"):
        _parse(command, required)
