"""%%agent: submit a run of a notebook-defined agent to the kernel's runtime."""

from __future__ import annotations

from typing import Any

import pytest

import nbdurable as nd
from nbdurable.notebook import NotebookSession

from .conftest import Shown, eventually, greeter, janitor, state


async def test_agent_cell_submits_returns_at_once_and_the_run_completes_in_the_background(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    out = magic("agent", "janitor --run-id r1", "Clean up the staging tables.\n")
    assert out.text == ""
    assert views == [Shown("run", "r1")]
    # the cell returned before the runtime took a single loop turn: read from the
    # store directly (a handle's read runs the kernel's loop, and the leg with it)
    assert nb.runtime.runtime_store.rt_get("r1").state in ("pending", "running")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    record = nb.run("r1").record()
    assert record.agent_id == "janitor" and record.agent_version == "1"
    checkpoint = nb.store.load("r1")
    assert checkpoint.messages[0].text == "Clean up the staging tables."


async def test_rerunning_an_agent_cell_starts_a_new_run_kept_in_the_as_variable(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    """Without --run-id, running the cell again once its run finished is a new run (no
    "exists already"); --new starts one even while it is unfinished; --as keeps the
    latest one's handle for the cells below."""
    ip.user_ns["greet"] = greeter()
    assert magic("agent", "greet --as run", "Hi").text == ""
    first = ip.user_ns["run"]
    assert isinstance(first, nd.Run)
    await first.result()
    assert magic("agent", "greet --as run", "Hi").text == ""
    second = ip.user_ns["run"]
    assert second.run_id != first.run_id
    assert magic("agent", "greet --as run --new", "Hi").text == ""
    third = ip.user_ns["run"]
    assert third.run_id not in (first.run_id, second.run_id)
    assert views == [Shown("run", r.run_id) for r in (first, second, third)]
    assert (await second.result()).text == "Hello!"
    assert (await third.result()).text == "Hello!"
    listed = [r.run_id for r in nb.runtime.list_runs()]
    assert listed == [first.run_id, second.run_id, third.run_id]


async def test_the_kernel_stays_free_while_a_run_streams(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    model = nd.ScriptedModel(["slowly " * 30], stream_delay=0.01)
    ip.user_ns["slow"] = nd.Agent("slow", model, version="1", stream=True)
    magic("agent", "slow --run-id s1", "Take your time.")
    # other cells run meanwhile: the loop is not blocked by the run
    await eventually(lambda: state(nb, "s1") == "running")
    assert magic("durable", "runs").value.loc["s1", "status"] == "running"
    result = await nb.run("s1").result()
    assert result.text.startswith("slowly slowly")


async def test_rerunning_an_unchanged_agent_cell_reuses_its_registration(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["greet"] = first = greeter()
    magic("agent", "greet --run-id g1", "Hi")
    ip.user_ns["greet"] = greeter()  # the defining cell runs again, unchanged
    out = magic("agent", "greet --run-id g2", "Hi again")
    assert out.stderr == ""
    assert nb.runtime.registry.keys() == [("greeter", "1")]
    assert nb.runtime.registry.get("greeter") is first
    assert (await nb.run("g2").result()).text == "Hello!"


async def test_a_changed_agent_under_the_same_version_is_told_to_bump_it(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id j1", "Clean up.")
    ip.user_ns["janitor"] = janitor(instructions="Never drop anything.")
    out = magic("agent", "janitor --run-id j2", "Clean up.")
    assert out.stderr.startswith("nbdurable: agent 'janitor' changed since version '1'")
    assert "bump version= in its cell (e.g. version='2')" in out.stderr
    assert "Traceback" not in out.text
    assert [r.run_id for r in nb.runtime.list_runs()] == ["j1"]
    ip.user_ns["janitor"] = janitor(version="2", instructions="Never drop anything.")
    magic("agent", "janitor --run-id j3", "Clean up.")
    assert nb.run("j3").record().agent_version == "2"


async def test_session_and_enqueue(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    ip.user_ns["greet"] = greeter()
    magic("agent", "janitor --run-id a --session chat", "Clean up.")
    await eventually(lambda: state(nb, "a") == "waiting_approval")
    refused = magic("agent", "greet --run-id b --session chat", "And now?")
    assert refused.stderr.startswith("nbdurable: ")
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "Traceback" not in refused.text
    magic("agent", "greet --run-id c --session chat --enqueue", "And now?")
    assert state(nb, "c") == "queued"
    assert nb.run("c").record().session_id == "chat"
    magic("durable", "approve a")
    assert (await nb.run("c").result()).text == "Hello!"
    assert state(nb, "a") == "completed"
    # the queued run started from the session's completed history
    texts = [m.text for m in nb.store.load("c").messages]
    assert texts[0] == "Clean up." and "Done: dropped stg_2023." in texts
    assert texts[-2:] == ["And now?", "Hello!"]


async def test_max_steps_bounds_the_run(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id short --max-steps 1", "Clean up.")
    assert nb.run("short").record().max_steps == 1
    await eventually(lambda: state(nb, "short") == "completed")
    assert nb.store.load("short").finish_reason == "max_steps"
    for bad in ("0", "-2", "two"):
        out = magic("agent", f"janitor --max-steps {bad}", "Clean up.")
        assert "usage: %%agent" in out.stderr and "--max-steps" in out.stderr
    assert [r.run_id for r in nb.runtime.list_runs()] == ["short"]


async def test_runtime_submit_takes_max_steps(nb: NotebookSession) -> None:
    nb.register(janitor())
    run = await nb.runtime.submit("janitor", "Clean up.", max_steps=2)
    assert run.record().max_steps == 2
    assert (await nb.runtime.submit("janitor", "Clean up.")).record().max_steps == 20
    for bad in (0, -1, True, 1.5):
        with pytest.raises(nd.ConfigurationError, match="max_steps"):
            await nb.runtime.submit("janitor", "Clean up.", max_steps=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("line", "cell", "expected"),
    [
        ("", "Clean up.", "the following arguments are required: AGENT"),
        ("nobody", "Clean up.", "no variable 'nobody' in this notebook"),
        ("text", "Clean up.", "'text' is a str, not an nbdurable.Agent"),
        ("janitor", "  \n", "the cell's text is the prompt, and it is empty"),
        ("janitor --bogus", "Clean up.", "unrecognized arguments: --bogus"),
        ("janitor", None, "%%agent is a cell magic"),
        ("janitor --as 2run", "Clean up.", "invalid variable name value: '2run'"),
        ("janitor --as class", "Clean up.", "invalid variable name value: 'class'"),
    ],
)
async def test_wrong_agent_arguments_print_a_short_message(
    ip: Any,
    nb: NotebookSession,
    magic: Any,
    views: list[Shown],
    line: str,
    cell: str | None,
    expected: str,
) -> None:
    ip.user_ns["janitor"] = janitor()
    ip.user_ns["text"] = "not an agent"
    out = magic("agent", line, cell)
    assert expected in out.stderr
    assert out.value is None and views == []
    assert "Traceback" not in out.text
    assert len(out.stderr.strip().splitlines()) <= 3


async def test_agent_help_lists_every_option(magic: Any) -> None:
    out = magic("agent", "--help")
    for option in ("AGENT", "--run-id", "--as", "--session", "--max-steps", "--enqueue"):
        assert option in out.stdout
    assert out.stderr == ""
