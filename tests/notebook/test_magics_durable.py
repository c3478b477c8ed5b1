"""%durable: inspect and steer the runs of the kernel's store."""

from __future__ import annotations

import re
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.models._base import ModelRequest, ModelResponse
from nbdurable.notebook import NotebookSession

from .conftest import Shown, eventually, greeter, janitor, state


async def waiting(ip: Any, nb: NotebookSession, magic: Any, run_id: str) -> None:
    """A janitor run, stopped on its gated drop_table call."""
    ip.user_ns.setdefault("janitor", janitor())
    magic("agent", f"janitor --run-id {run_id}", "Clean up the staging tables.")
    await eventually(lambda: state(nb, run_id) == "waiting_approval")


async def test_store_shows_and_switches_the_store(
    tmp_path: Any, ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    new = " (new: the first run submitted here creates it)"
    assert magic("durable", "store").stdout == f"store: sqlite:///.nbdurable/runs.db{new}\n"
    ip.user_ns["greet"] = greeter()
    magic("agent", "greet --run-id first", "Hi")
    assert (tmp_path / ".nbdurable" / "runs.db").exists()
    await nb.run("first").result()
    out = magic("durable", "store sqlite:///other/runs.db")
    assert out.stdout == f"store: sqlite:///other/runs.db{new}\n"
    read = magic("durable", "runs")  # reading a new URL creates nothing (issue 36)
    assert read.stderr.startswith("nbdurable: no SQLite store file at ")
    assert "other/runs.db" in read.stderr and not (tmp_path / "other").exists()
    magic("agent", "greet --run-id second", "Hi")
    assert (await nb.run("second").result()).text == "Hello!"
    assert list(magic("durable", "runs").value.index) == ["second"]
    assert magic("durable", "store").stdout == "store: sqlite:///other/runs.db\n"
    bad = magic("durable", "store nowhere")
    assert bad.stderr.startswith("nbdurable: store URL 'nowhere' has no scheme")
    assert nb.url == "sqlite:///other/runs.db"
    magic("durable", "store sqlite:///.nbdurable/runs.db")
    assert list(magic("durable", "runs").value.index) == ["first"]


async def test_runs_is_a_compact_dataframe_and_all_gives_every_column(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    await waiting(ip, nb, magic, "r1")
    ip.user_ns["greet"] = nd.Agent(
        "greeter",
        nd.ScriptedModel(["Hello!"] * 5, mode="sequential", price_per_million=(300.0, 1500.0)),
        version="1",
    )
    magic("agent", "greet --run-id r2", "Hi")
    await nb.run("r2").result()
    runs = magic("durable", "runs").value
    assert list(runs.index) == ["r1", "r2"]
    assert list(runs.columns) == ["status", "agent", "steps", "tokens", "cost", "age", "reason"]
    assert runs.loc["r1", "status"] == "waiting_approval"
    assert runs.loc["r1", "reason"] == "1 approval"
    assert runs.loc["r1", "cost"] == ""  # the janitor's model has no price: blank, not <NA>
    assert runs.loc["r2", "cost"].startswith("$0.0")
    assert runs.loc["r2", "age"].endswith("s") and runs.loc["r2", "reason"] == ""
    assert "<NA>" not in runs.to_string() and "<NA>" not in runs._repr_html_()
    assert list(magic("durable", "runs --status completed").value.index) == ["r2"]
    every = magic("durable", "runs --all").value
    data = nd.inspect.runs(nb.reading_store)
    # --all: what the compact view shows, then every column of the data
    assert list(every.columns[:7]) == list(runs.columns)
    assert set(data.columns) - {"reason"} <= set(every.columns)
    assert every.loc["r1", "pending_approvals"] == 1
    assert every.loc["r2", "age"].endswith("s") and every.loc["r2", "tokens"] > 0
    assert every.loc["r2", "total_tokens"] == every.loc["r2", "tokens"]


async def test_show_redisplays_the_run_widget(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    await waiting(ip, nb, magic, "r1")
    out = magic("durable", "show r1")
    assert out.value is None and out.text == ""
    assert views[-1] == Shown("run", "r1")
    missing = magic("durable", "show nope")
    assert missing.stderr == "nbdurable: Run 'nope' not found.\n"
    assert views[-1] == Shown("run", "r1")


async def test_history_and_explain(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    await waiting(ip, nb, magic, "r1")
    steps = magic("durable", "history r1").value
    assert list(steps.index) == [0, 1]
    assert steps["tool_calls"].tolist() == ["lookup", "drop_table"]
    assert magic("durable", "history r1 --browse").value is None
    assert views[-1] == Shown("history", "r1")
    why = magic("durable", "explain r1").value
    assert why.summary.startswith("Waiting for 1 approval(s)")
    assert why.approvals[0].args == {"name": "stg_2023"}
    assert why.context == "notebook" and "%durable approve r1 [APPROVAL_ID]" in why.actions
    assert "nbdurable: " in magic("durable", "history nope").stderr


async def test_approve_resumes_the_run_in_this_kernel(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    await waiting(ip, nb, magic, "r1")
    [request] = await nb.run("r1").pending_approvals()
    out = magic("durable", "approve r1")
    approved, goes_on = out.stdout.splitlines()
    assert approved == f"approved drop_table(name='stg_2023') ({request.approval_id})"
    # this kernel's runtime may claim it before the line is printed: its own lease is no wait
    assert re.fullmatch(
        r"r1: (pending|running); the run resumes here \(this kernel serves janitor v1\)",
        goes_on,
    ), goes_on
    assert (await nb.run("r1").result()).text == "Done: dropped stg_2023."
    tool = nb.store.load("r1").messages[-2]
    assert tool.role == "tool" and "dropped stg_2023" in tool.model_dump_json()
    again = magic("durable", "approve r1")
    assert again.stderr == "nbdurable: run 'r1' waits for no approval (it is completed)\n"


async def test_deny_with_a_reason_and_approval_ids(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    await waiting(ip, nb, magic, "r1")
    wrong = magic("durable", "approve r1 approval_nope --deny")
    assert "has no approval 'approval_nope'; it waits for: approval_" in wrong.stderr
    assert "drop_table(name='stg_2023')" in wrong.stderr
    assert magic("durable", "approve r1 --reason why").stderr == (
        "nbdurable: --reason goes with --deny\n"
    )
    [request] = await nb.run("r1").pending_approvals()
    out = magic("durable", f'approve r1 {request.approval_id} --deny --reason "not today"')
    assert out.stdout.startswith(f"denied drop_table(name='stg_2023') ({request.approval_id})")
    await nb.run("r1").result()
    [result] = nb.store.load("r1").messages[-2].content
    assert result.is_error and result.result == "not today"


async def test_verdict_for_a_run_whose_agent_is_not_in_this_kernel(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    await waiting(ip, nb, magic, "r1")
    await nb.close()  # the kernel restarts ...
    del ip.user_ns["janitor"]  # ... and the agent cell has not run again yet
    out = magic("durable", "approve r1")
    assert out.stdout.splitlines()[1] == (
        "r1: pending; the run waits for a worker serving janitor v1: run the cell defining "
        f"agent 'janitor' version '1' ({janitor().origin}), then %durable resume r1, or start "
        "`nbdurable worker --store sqlite:///.nbdurable/runs.db --agents MODULE:AGENTS`"
    )
    ip.user_ns["janitor"] = janitor()
    magic("durable", "resume r1")
    assert (await nb.run("r1").result()).text == "Done: dropped stg_2023."


async def test_cancel(ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]) -> None:
    await waiting(ip, nb, magic, "r1")
    assert magic("durable", "cancel r1").stdout == "r1: cancelled\n"
    assert state(nb, "r1") == "cancelled"


class FailsOnce:
    """A model whose first call raises; later calls answer."""

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls == 1:
            raise nd.ModelError("the provider is down")
        return await nd.ScriptedModel(["Recovered."]).generate(request)


async def test_retry_lets_a_failed_run_go_on(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["flaky"] = nd.Agent("flaky", FailsOnce(), version="1")
    magic("agent", "flaky --run-id f1", "Try.")
    await eventually(lambda: state(nb, "f1") == "failed")
    why = magic("durable", "explain f1").value
    assert "the provider is down" in str(why)
    out = magic("durable", "retry f1")
    # this kernel's runtime may claim it before the line is printed: its own lease is no wait
    assert re.fullmatch(
        r"f1: (pending|running); the run resumes here \(this kernel serves flaky v1\)\n",
        out.stdout,
    ), out.stdout
    assert (await nb.run("f1").result()).text == "Recovered."
    assert magic("durable", "retry f1").stderr == (
        "nbdurable: only failed or needs_attention runs retry, not completed\n"
    )


async def test_rewind_forks_and_shows_the_fork(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    await waiting(ip, nb, magic, "r1")
    magic("durable", "approve r1")
    await nb.run("r1").result()
    out = magic("durable", 'rewind r1 0 --run-id r1-b --edit "Only look, drop nothing."')
    assert out.stdout.splitlines()[0] == "forked r1-b from r1 at step 0"
    assert views[-1] == Shown("run", "r1-b")
    await eventually(lambda: state(nb, "r1-b") == "waiting_approval")
    fork = nb.store.load("r1-b")
    assert "Only look, drop nothing." in [m.text for m in fork.messages]
    assert magic("durable", "runs --all").value.loc["r1-b", "parent_run"] == "r1"
    bad = magic("durable", "rewind r1 9")
    assert bad.stderr.startswith("nbdurable: run 'r1' has no checkpoint at step 9")
    assert "usage: %durable rewind" in magic("durable", "rewind r1 two").stderr


async def test_a_loop_api_run_gets_a_clear_message(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    await nd.generate_text(
        model=nd.ScriptedModel([nd.Turn.call("lookup", table="t"), "ok"]),
        messages="Look.",
        tools=[janitor().tool_map["lookup"]],
        session=nd.DurableSession(nb.store, run_id="plain"),
    )
    assert magic("durable", "runs").value.loc["plain", "status"] == "completed"
    out = magic("durable", "resume plain")
    assert out.stderr.startswith("nbdurable: run 'plain' ran through generate_text/stream_chat")
    assert "nd.resume_from_checkpoint(store, 'plain', ...)" in out.stderr


async def test_worker_serves_the_notebooks_agents(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    # runs submitted elsewhere (a client runtime that executes nothing) wait for a server
    client = nd.DurableRuntime(store=nb.store, agents=[greeter(), janitor()])
    run = await client.submit("greeter", "Hi")
    other = await client.submit("janitor", "Clean up.")
    ip.user_ns["greet"] = greeter()
    out = magic("durable", "worker")
    assert out.stdout.splitlines() == [
        "this kernel executes runs of: greeter v1; store: sqlite:///.nbdurable/runs.db",
        "1 run(s) to execute here",
        "waiting for agents this kernel does not have: janitor v1 (1)",
    ]
    assert (await nb.run(run.run_id).result()).text == "Hello!"
    assert state(nb, other.run_id) == "pending"


async def test_worker_and_resume_say_which_part_of_the_definition_differs(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    # a run submitted with another greeter v1 (another script) never runs here
    client = nd.DurableRuntime(store=nb.store, agents=[greeter("Bonjour!")])
    run = await client.submit("greeter", "Hi")
    ip.user_ns["greet"] = greeter()
    reason = (
        "waits for a runtime whose greeter v1 matches the submitted definition; "
        "a runtime that saw it differs in its model"
    )
    out = magic("durable", "worker")
    assert out.stdout.splitlines() == [
        "this kernel executes runs of: greeter v1; store: sqlite:///.nbdurable/runs.db",
        "0 run(s) to execute here",
        f"{run.run_id} {reason}",
    ]
    out = magic("durable", f"resume {run.run_id}")
    assert out.stdout.splitlines()[0] == f"{run.run_id}: pending; it {reason}"
    assert state(nb, run.run_id) == "pending"


async def test_dashboard(ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]) -> None:
    assert magic("durable", "dashboard").text == ""
    assert views == [Shown("dashboard", None)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("bogus", "invalid choice: 'bogus'"),
        ("approve", "the following arguments are required: RUN"),
        ("rewind r1", "the following arguments are required: STEP"),
        ("show a b", "unrecognized arguments: b"),
        ('explain "unclosed', "No closing quotation"),
        ("runs --status", "expected one argument"),
    ],
)
async def test_wrong_arguments_print_usage_not_a_traceback(
    magic: Any, views: list[Shown], line: str, expected: str
) -> None:
    out = magic("durable", line)
    assert out.value is None and out.stdout == ""
    assert out.stderr.startswith("usage: %durable")
    assert expected in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 3


async def test_through_run_cell_a_mistake_is_no_traceback(
    ip: Any, nb: NotebookSession, views: list[Shown], capfd: pytest.CaptureFixture[str]
) -> None:
    result = ip.run_cell("%durable approve nope")
    assert result.success
    out = capfd.readouterr()
    assert "nbdurable: Run 'nope' not found." in out.err + out.out
    assert "Traceback" not in out.err + out.out


async def test_graphs_is_the_graphs_dataframe_and_runs_takes_a_graph(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    assert "default store" in magic("durable", "graphs").stderr  # not created by reading
    nb.register(greeter())
    nb.register(janitor())
    assert magic("durable", "graphs").value.empty
    nightly = await nb.runtime.submit_graph(
        [
            nd.GraphNode("fetch", "greeter", "Fetch."),
            nd.GraphNode("report", "greeter", "Report.", depends_on=["fetch"]),
        ],
        graph_id="nightly",
    )
    assert await nightly.wait() == "completed"
    gated = await nb.runtime.submit_graph(
        [
            nd.GraphNode("clean", "janitor", "Clean up."),
            nd.GraphNode("after", "greeter", "Report.", depends_on=["clean"]),
        ],
        graph_id="gated",
    )
    await gated.wait("waiting_approval")
    out = magic("durable", "graphs")
    assert out.text == "" and views == []
    graphs = out.value
    assert list(graphs.index) == ["nightly", "gated"]
    assert graphs["status"].tolist() == ["completed", "waiting_approval"]
    assert graphs.loc["gated", ["nodes", "waiting", "queued"]].tolist() == [2, 1, 1]
    nodes = magic("durable", "runs --graph gated").value
    assert list(nodes.index) == ["gated:clean", "gated:after"]
    assert nodes["reason"].tolist() == ["1 approval", "after clean"]
    assert magic("durable", "runs --graph gated --all").value["node_id"].tolist() == [
        "clean",
        "after",
    ]
    waiting = magic("durable", "runs --graph gated --status waiting_approval").value
    assert list(waiting.index) == ["gated:clean"]
    assert magic("durable", "graphs --help").stdout.startswith("usage: %durable graphs")
