"""Where a run's agent lives: recorded on the run, used by ``%durable`` in a new kernel."""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nbdurable.notebook import NotebookSession, set_session
from nbdurable.notebook._next_step import provide
from nbdurable.runs import RuntimeRun

from .conftest import eventually, state

MODULE = "nbd_origin_agents"

SOURCE = textwrap.dedent(
    """
    import nbdurable as nd

    @nd.tool(needs_approval=True)
    def drop_table(name: str) -> str:
        '''Drop a table.'''
        return f"dropped {name}"

    AGENTS = [
        nd.Agent(
            "tidy",
            nd.ScriptedModel([nd.Turn.call("drop_table", name="stg"), "Tidied."]),
            [drop_table],
            version="1",
        )
    ]
    """
)


async def test_a_new_kernel_imports_the_agent_from_the_module_its_run_names(
    ip: Any, nb: NotebookSession, magic: Any, tmp_path: Path
) -> None:
    """A run of an agent defined in a module records ``module:attribute``; after a
    restart, the verdict's advice names the import, and ``%durable resume`` imports
    the agent from there: the run completes in this kernel."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    sys.path.insert(0, str(tmp_path))
    try:
        ip.user_ns["tidy"] = importlib.import_module(MODULE).AGENTS[0]
        magic("agent", "tidy --run-id t1", "Tidy up.")
        await eventually(lambda: state(nb, "t1") == "waiting_approval")
        assert nb.store.rt_get("t1").agent_origin == f"{MODULE}:AGENTS"

        await nb.close()  # the kernel restarts: its variables and imports are gone
        del ip.user_ns["tidy"], sys.modules[MODULE]
        restarted = NotebookSession(poll_interval=0.01)
        set_session(restarted)
        try:
            magic("load_ext", "nbdurable")
            approved = magic("durable", "approve t1").stdout.splitlines()[1]
            assert approved == (
                f"t1: pending; the run waits for a worker serving tidy v1: %durable resume t1 "
                f"imports it from {MODULE}:AGENTS (`from {MODULE} import AGENTS`), or start "
                f"`nbdurable worker --store sqlite:///.nbdurable/runs.db --agents {MODULE}:AGENTS`"
            )
            assert MODULE not in sys.modules  # a verdict imports nothing
            resumed = magic("durable", "resume t1")
            assert resumed.stdout == "t1: pending; it goes on in this kernel\n", resumed
            assert (await restarted.run("t1").result()).text == "Tidied."
        finally:
            await restarted.close()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(MODULE, None)


async def test_an_agent_from_a_cell_says_which_notebook_and_cell(
    ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent made in a notebook cell records the notebook (as the Jupyter server
    names it to the kernel) and the cell; the advice to provide it names them."""
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/reports/05-debug.ipynb")
    ran = ip.run_cell(
        "import nbdurable as nd\n"
        "cell_agent = nd.Agent('helper', nd.ScriptedModel(['hi']), version='3')\n"
    )
    assert ran.success
    origin = ip.user_ns["cell_agent"].origin
    assert re.fullmatch(r"notebook 05-debug\.ipynb, cell \[\d+\]", origin), origin
    record = RuntimeRun(
        run_id="r",
        agent_id="helper",
        agent_version="3",
        session_id="s",
        prompt='"hi"',
        state="pending",
        created_at=0,
        updated_at=0,
        agent_origin=origin,
    )
    advice = provide(record, "sqlite:///runs.db")
    assert advice.startswith(f"run the cell defining agent 'helper' version '3' ({origin})")


def test_a_module_origin_is_what_a_worker_takes() -> None:
    """``module:attribute``: the advice is the import and the worker's --agents."""
    record = RuntimeRun(
        run_id="r",
        agent_id="tidy",
        agent_version="1",
        session_id="s",
        prompt='"hi"',
        state="pending",
        created_at=0,
        updated_at=0,
        agent_origin="reports.agents:AGENTS",
    )
    assert provide(record, "sqlite:///runs.db") == (
        "%durable resume r imports it from reports.agents:AGENTS "
        "(`from reports.agents import AGENTS`), or start "
        "`nbdurable worker --store sqlite:///runs.db --agents reports.agents:AGENTS`"
    )
