"""CLI test fixtures: a SQLite store holding real runs in every interesting state.

``runs_store`` (a URL) holds, all made by a real DurableRuntime on the ScriptedModel:

- ``run-done``: completed (a tool call, then text);
- ``run-wait``: waiting for one approval, ``drop_table(name='stg_2024')``;
- ``run-pair``: waiting for two approvals in one step;
- ``run-flaky``: failed (its model raised);
- ``run-loop``: a loop-API run (``generate_text``), suspended, with no runtime record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import cli_agents as test_agents

import nbdurable as nd
from nbdurable.cli import main

AGENTS = "support.cli_agents:agents"
"""The ``--agents`` spec of the test agents (tests/ is on sys.path)."""
WIDTH = 100


@pytest.fixture(autouse=True)
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A 100-column terminal (shutil.get_terminal_size reads COLUMNS first)."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("LINES", "24")
    test_agents.FLAKY["fail"] = True
    yield
    test_agents.FLAKY["fail"] = True


async def _build(url: str) -> None:
    store = nd.open_store(url)
    try:
        async with await nd.DurableRuntime.open(
            store=store, agents=test_agents.agents(), poll_interval=0.01
        ) as runtime:
            done = await runtime.submit("helper", "What is the answer?", run_id="run-done")
            await done.wait()
            wait = await runtime.submit("janitor", "Clean up stg_2024.", run_id="run-wait")
            await wait.wait("waiting_approval")
            pair = await runtime.submit("pair", "Drop a and b.", run_id="run-pair")
            await pair.wait("waiting_approval")
            flaky = await runtime.submit("flaky", "Try.", run_id="run-flaky")
            await flaky.wait("failed")
        model = nd.ScriptedModel([nd.Turn.call("drop_table", name="x"), "ok"])
        await nd.generate_text(
            model=model,
            messages="Drop x.",
            tools=[test_agents.drop_table],
            session=nd.DurableSession(store, "run-loop"),
            approval_signer=nd.ApprovalSigner("test secret"),
        )
    finally:
        store.close()


@pytest.fixture
def runs_store(tmp_path: Path) -> str:
    """A store URL holding the runs described in this module's docstring."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    asyncio.run(_build(url))
    return url


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """``cli(*argv) -> (status, stdout, stderr)``: the command run in this process."""

    def run(*argv: str) -> tuple[int, str, str]:
        status = main(list(argv))
        out, err = capsys.readouterr()
        return status, out, err

    return run


def fits(text: str, width: int = WIDTH) -> bool:
    """Every line of ``text`` fits ``width`` columns."""
    from nbdurable.cli._tables import text_width

    return all(text_width(line) <= width for line in text.splitlines())


def state(url: str, run_id: str) -> str:
    """The run's current state."""
    store = nd.open_store(url)
    try:
        record = store.rt_get(run_id)  # type: ignore[attr-defined]
        assert record is not None
        return str(record.state)
    finally:
        store.close()
