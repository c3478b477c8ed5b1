"""The kernel session: %load_ext, a kernel restart, the Python API, the documentation."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.notebook import NotebookSession, session, set_session
from nbdurable.notebook._usage import COMMANDS

from .conftest import Shown, eventually, greeter, janitor, state

DOC = Path(__file__).resolve().parents[2] / "docs" / "notebook.md"


async def test_load_ext_goes_through_the_extension_machinery(ip: Any) -> None:
    ip.extension_manager.loaded.discard("nbdurable")  # as in a fresh kernel
    ip.magics_manager.magics["line"].pop("durable", None)
    ip.magics_manager.magics["cell"].pop("agent", None)
    result = ip.run_cell("%load_ext nbdurable")
    assert result.success
    assert "durable" in ip.magics_manager.magics["line"]
    assert "agent" in ip.magics_manager.magics["cell"]
    assert "nbdurable" in ip.extension_manager.loaded


def test_import_nbdurable_does_not_load_the_notebook_code() -> None:
    code = (
        "import sys, nbdurable\n"
        "assert callable(nbdurable.load_ipython_extension)\n"
        "print([m for m in ('nbdurable.notebook', 'IPython') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_the_runtime_opens_lazily_on_the_running_loop(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    nb = NotebookSession()
    assert not nb.started and nb.url == "sqlite:///.nbdurable/runs.db"
    runtime = nb.runtime
    assert nb.started and nb.runtime is runtime
    assert (tmp_path / ".nbdurable" / "runs.db").exists()
    assert runtime.engine.home_loop() is asyncio.get_running_loop()
    await nb.close()
    assert not nb.started


def test_without_a_running_loop_the_runtime_says_where_it_runs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    nb = NotebookSession()
    with pytest.raises(nd.NbdurableError, match="kernel's event loop, and none is running"):
        nb.runtime  # noqa: B018
    nb.store.close()


def test_session_is_one_per_kernel() -> None:
    previous = set_session(None)
    try:
        assert session() is session()
        assert isinstance(session(), NotebookSession)
    finally:
        set_session(previous)


async def test_a_jsonl_store_inspects_but_cannot_run(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    nd.open_store("jsonl:///runs").close()  # type: ignore[attr-defined]
    magic("durable", "store jsonl:///runs")
    assert magic("durable", "runs").value.empty
    ip.user_ns["greet"] = greeter()
    out = magic("agent", "greet", "Hi")
    assert out.stderr.startswith("nbdurable: DurableRuntime needs a store that keeps run records")


async def test_after_a_kernel_restart_runs_are_listed_shown_and_resumed(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    gate = asyncio.Event()

    @nd.tool
    async def slow_export(table: str) -> str:
        """Export a table (slowly)."""
        await gate.wait()
        return f"exported {table}"

    def exporter() -> nd.Agent:
        model = nd.ScriptedModel([nd.Turn.call("slow_export", table="orders"), "Exported."])
        return nd.Agent(
            "exporter", model, [slow_export], version="1", tool_recovery={"slow_export": "safe"}
        )

    ip.user_ns["janitor"] = janitor()
    ip.user_ns["exporter"] = exporter()
    magic("agent", "janitor --run-id waits", "Clean up.")
    magic("agent", "exporter --run-id busy", "Export orders.")
    ip.user_ns["greet"] = greeter()
    magic("agent", "greet --run-id done", "Hi")
    await eventually(lambda: state(nb, "waits") == "waiting_approval")
    await eventually(lambda: state(nb, "done") == "completed")
    await eventually(lambda: nb.store.load("busy") is not None or state(nb, "busy") == "running")

    # the kernel restarts: its runtime stops (the busy run goes back to pending),
    # its variables are gone, and a new session opens the same store
    await nb.close()
    for name in ("janitor", "exporter", "greet"):
        del ip.user_ns[name]
    restarted = NotebookSession(poll_interval=0.01)
    set_session(restarted)
    try:
        magic("load_ext", "nbdurable")
        runs = magic("durable", "runs").value
        assert list(runs.index) == ["waits", "busy", "done"]
        assert runs["status"].tolist() == ["waiting_approval", "pending", "completed"]
        magic("durable", "show busy")
        assert views[-1] == Shown("run", "busy")

        refused = magic("durable", "resume busy")
        assert refused.stderr == (
            f"nbdurable: run 'busy' needs agent 'exporter' version '1' (defined at "
            f"{exporter().origin}): run the cell that "
            "defines it, then %durable resume busy\n"
        )
        ip.user_ns["exporter"] = exporter()  # the agent's cell runs again
        out = magic("durable", "resume busy")
        assert out.stdout == "busy: pending; it goes on in this kernel\n"
        assert views[-1] == Shown("run", "busy")
        gate.set()
        assert (await restarted.run("busy").result()).text == "Exported."

        ip.user_ns["janitor"] = janitor()
        resumed = magic("durable", "resume waits")
        assert resumed.stdout == (
            "waits: waiting_approval; answer it with %durable approve waits [APPROVAL_ID] "
            "[--deny | --arguments JSON], or %durable reply waits [APPROVAL_ID] TEXT\n"
        )
        magic("durable", "approve waits")
        assert (await restarted.run("waits").result()).text == "Done: dropped stg_2023."
    finally:
        await restarted.close()


async def test_every_subcommand_is_in_the_help_and_the_docs(magic: Any) -> None:
    help_text = magic("durable", "--help").stdout
    magics = DOC.read_text().split("## Magics", 1)[1].split("\n## ", 1)[0]
    assert set(COMMANDS) == {
        "store", "runs", "graphs", "show", "history", "explain", "approvals", "approve", "resume",
        "rewind", "cancel", "retry", "settle", "worker", "dashboard", "grant", "revoke", "reply",
    }  # fmt: skip
    for command in COMMANDS:
        assert re.search(rf"^\s+{command}\b", help_text, re.M), command
        assert f"`%durable {command}" in magics, command
        usage = magic("durable", f"{command} --help").stdout
        assert usage.startswith(f"usage: %durable {command}")
    agent_help = magic("agent", "--help").stdout
    for option in ("--run-id", "--as", "--session", "--max-steps", "--enqueue"):
        assert option in agent_help and f"`{option}" in magics
    usage = "%%agent AGENT [--run-id ID] [--as VAR] [--session S] [--max-steps N] [--enqueue]"
    assert usage in magics
    assert magic("durable", "").stdout == help_text


async def test_an_interrupted_manual_tool_is_settled_by_a_denial_after_a_restart(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    started = asyncio.Event()

    @nd.tool
    async def charge(amount: int) -> str:
        """Charge a card (never re-run without a human)."""
        started.set()
        await asyncio.Event().wait()  # the kernel dies before it returns
        return "charged"

    def biller() -> nd.Agent:
        model = nd.ScriptedModel([nd.Turn.call("charge", amount=5), "Nothing was charged."])
        return nd.Agent("biller", model, [charge], version="1")  # charge is "manual"

    ip.user_ns["biller"] = biller()
    magic("agent", "biller --run-id bill", "Charge 5.")
    await asyncio.wait_for(started.wait(), 5)
    await nb.close()  # the kernel restarts mid-tool
    ip.user_ns["biller"] = biller()  # and the agent's cell runs again
    out = magic("durable", "resume bill")
    assert out.stdout == "bill: pending; it goes on in this kernel\n"
    await eventually(lambda: state(nb, "bill") == "needs_attention")
    assert "an interrupted tool call waits" in magic("durable", "resume bill").stdout
    out = magic("durable", 'approve bill --deny --reason "charged by hand"')
    assert out.stdout.splitlines()[0] == "settled the interrupted tool call(s) of bill as errors"
    assert (await nb.run("bill").result()).text == "Nothing was charged."
    [result] = nb.store.load("bill").messages[-2].content
    assert result.is_error and result.result == "charged by hand"


async def test_show_works_for_a_loop_api_run_and_says_when_a_run_is_unknown(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    await nd.generate_text(
        model=nd.ScriptedModel([nd.Turn.call("lookup", table="t"), "ok"]),
        messages="Look.",
        tools=[janitor().tool_map["lookup"]],
        session=nd.DurableSession(nb.store, run_id="plain"),
    )
    assert magic("durable", "show plain").text == ""
    assert views == [Shown("run", "plain")]
    assert magic("durable", "show nope").stderr == "nbdurable: Run 'nope' not found.\n"
