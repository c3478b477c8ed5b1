"""The smaller front-door findings of issue 36, each as a user types it: a separate
process, an 80-column terminal."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.runs import RunPatch, RuntimeRun

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 80

# A process where an extra's modules are not installed: an import of them fails as
# pip would leave it (ModuleNotFoundError), the rest of the interpreter unchanged.
_WITHOUT = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "from nbdurable.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NBDURABLE_STORE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["COLUMNS"] = str(WIDTH)
    return env


def _run(cwd: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *command], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=90
    )


def _cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return _run(cwd, "-m", "nbdurable.cli", *argv)


def _fits(text: str) -> bool:
    return all(len(line) <= WIDTH for line in text.splitlines())


@pytest.mark.parametrize(
    ("missing", "argv", "extra"),
    [
        ("fastapi,uvicorn", ["serve", "--agents", "nbdurable.cli.demo_agent:janitor"], "server"),
        (
            "temporalio",
            ["worker", "--engine", "temporal", "--agents", "nbdurable.cli.demo_agent:janitor"],
            "temporal",
        ),
    ],
)
def test_a_missing_extra_names_its_pip_install(
    tmp_path: Path, missing: str, argv: list[str], extra: str
) -> None:
    done = _run(tmp_path, "-c", _WITHOUT, missing, *argv, "--store", "sqlite:///runs.db")
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\n" not in line and f"pip install 'nbdurable[{extra}]'" in line, line
    assert "ModuleNotFoundError" not in line
    assert list(tmp_path.iterdir()) == []  # refused before a store was made


def test_help_fits_80_columns_and_lists_every_command(tmp_path: Path) -> None:
    done = _cli(tmp_path, "--help")
    assert done.returncode == 0 and _fits(done.stdout), done.stdout
    for command in ("demo", "runs", "worker", "serve", "store check", "store prune"):
        assert f"nbdurable {command}" in done.stdout
    for sub in (["runs", "--help"], ["store", "prune", "--help"], ["runs", "approvals", "--help"]):
        assert _fits(_cli(tmp_path, *sub).stdout)


def test_approvals_at_80_columns_shorten_ids_not_the_call(tmp_path: Path, runs_store: str) -> None:
    done = _cli(tmp_path, "runs", "approvals", "--store", runs_store)
    assert done.returncode == 0 and _fits(done.stdout), done.stdout
    assert 'drop_table(name="stg_2024")' in done.stdout
    line = next(line for line in done.stdout.splitlines() if line.startswith("run-wait"))
    short = line.split()[1]
    assert short.startswith("approval_") and len(short) < 30 and "…" not in short
    # the prefix names the approval for approve
    approved = _cli(tmp_path, "runs", "approve", "run-wait", short, "--store", runs_store)
    assert approved.returncode == 0, approved.stderr
    assert "approved drop_table(name='stg_2024')" in approved.stdout


def test_history_at_80_columns_keeps_the_tool_name(tmp_path: Path, runs_store: str) -> None:
    done = _cli(tmp_path, "runs", "history", "run-wait", "--store", runs_store)
    assert done.returncode == 0 and _fits(done.stdout), done.stdout
    assert "drop_table" in done.stdout and "tool calls" in done.stdout


def test_explain_in_a_terminal_suggests_commands_not_python(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = nd.open_store(url)
    now = int(time.time() * 1000)
    record = RuntimeRun(
        run_id="r1",
        agent_id="janitor",
        agent_version="1",
        session_id="s1",
        prompt='"hi"',
        state="pending",
        created_at=now,
        updated_at=now,
    )
    store.rt_insert(record, enqueue=True, max_pending=10)  # type: ignore[attr-defined]
    reason = "waits for a runtime with this definition of janitor v1"
    store.rt_update("r1", RunPatch(waiting_reason=reason))  # type: ignore[attr-defined]
    store.close()  # type: ignore[attr-defined]
    done = _cli(tmp_path, "runs", "explain", "r1", "--store", url)
    assert done.returncode == 0 and "nbdurable runs cancel r1" in done.stdout, done.stdout
    assert "await" not in done.stdout


def test_submitting_a_mistyped_agent_names_the_registered_ones(tmp_path: Path) -> None:
    code = (
        "import asyncio\n"
        "import nbdurable as nd\n"
        "from support.cli_agents import agents\n"
        "async def main():\n"
        "    async with await nd.DurableRuntime.open(store=nd.open_store('memory://'),\n"
        "                                            agents=agents()) as rt:\n"
        "        try:\n"
        "            await rt.submit('janitr', 'Clean up.')\n"
        "        except nd.ConfigurationError as exc:\n"
        "            print(exc)\n"
        "asyncio.run(main())\n"
    )
    env = _env()
    env["PYTHONPATH"] += os.pathsep + str(ROOT / "tests")
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert "no agent 'janitr' is registered; did you mean 'janitor'?" in done.stdout, done
    assert "'helper'" in done.stdout  # the registered ones are listed


def test_check_of_an_unreadable_runs_table_does_not_say_no_run_is_affected(
    tmp_path: Path, runs_store: str
) -> None:
    path = runs_store.removeprefix("sqlite:///")
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE runs")
    conn.execute("CREATE TABLE runs (x)")
    conn.commit()
    conn.close()
    done = _cli(tmp_path, "store", "check", runs_store)
    assert done.returncode == 1, done
    assert "0 run(s) affected" not in done.stdout and "any run may be affected" in done.stdout
    assert "runs not listed read as before" not in done.stdout
