"""Graphs of agent runs: ordering, dependency results, failure policies, approvals and
concurrency inside graphs (issue 10)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.models._base import ModelRequest
from nbdurable.runtime import Agent, DurableRuntime, GraphNode, Limits

from .conftest import states_of


class Recorder:
    """An agent's model that answers ``<agent>(<prompt text>)`` and records what it saw.

    ``seen`` holds, per call, the first user message and the states of every run
    of the store at that moment; ``fail`` holds prompt texts whose calls raise.
    """

    def __init__(self, store: Any, agent_id: str, delay: float = 0.0) -> None:
        self.store = store
        self.agent_id = agent_id
        self.delay = delay
        self.seen: list[tuple[nd.Message, dict[str, str]]] = []
        self.fail: set[str] = set()
        self.active = 0
        self.peak = 0

    def turn(self, request: ModelRequest) -> nd.Turn:
        first = next(m for m in request.messages if m.role == "user")
        states = {r.run_id: r.state for r in self.store.rt_list()}
        self.seen.append((first, states))
        head = first.content[0].text if isinstance(first.content[0], nd.TextPart) else "media"
        if head in self.fail:
            raise RuntimeError(f"model broke on {head}")
        return nd.Turn(text=f"{self.agent_id}({head})")

    def agent(self, **kwargs: Any) -> Agent:
        recorder = self

        class Model(nd.ScriptedModel):
            async def generate(self, request: ModelRequest) -> nd.ModelResponse:
                recorder.active += 1
                recorder.peak = max(recorder.peak, recorder.active)
                try:
                    if recorder.delay:
                        await asyncio.sleep(recorder.delay)
                    return await super().generate(request)
                finally:
                    recorder.active -= 1

        model = Model([self.turn] * 500, mode="sequential")
        # the recorder counts in generate(): the agent must not stream
        return Agent(self.agent_id, model, version="1", **{"stream": False, **kwargs})


@pytest.mark.spec("S003-02", "S003-38")
async def test_a_node_starts_after_its_dependencies_with_their_results_appended(
    store: Any,
) -> None:
    """A node runs only once every dependency completed; their result texts are
    appended to its prompt as one text part, its media parts and metadata kept.
    The agents option holds the registrations graph nodes run."""
    rec = Recorder(store, "a")
    image = nd.ImagePart(data=os.urandom(16), media_type="image/png")
    prompt = nd.Message(
        role="user", content=[nd.TextPart(text="combine"), image], metadata={"ticket": 7}
    )
    async with await DurableRuntime.open(store=store, agents=[rec.agent()]) as rt:
        graph = await rt.submit_graph(
            [
                GraphNode("left", "a", "left"),
                {"id": "right", "agent": "a", "prompt": "right"},
                GraphNode("join", "a", prompt, depends_on=["left", "right"]),
            ],
            graph_id="g",
        )
        assert graph.node("join").status in ("queued", "pending", "running", "completed")
        results = await graph.result()
    assert graph.status == "completed"
    assert results["left"].text == "a(left)" and results["right"].text == "a(right)"
    [(first, states)] = [(m, s) for m, s in rec.seen if m.text.startswith("combine")]
    assert states["g:left"] == states["g:right"] == "completed"  # ordering
    assert first.content[:2] == (nd.TextPart(text="combine"), image)  # media kept, in place
    assert first.metadata == {"ticket": 7}  # user metadata kept
    appended = first.content[2]
    assert isinstance(appended, nd.TextPart) and len(first.content) == 3
    assert "Result of left:\na(left)" in appended.text
    assert "Result of right:\na(right)" in appended.text
    # the appended prompt is the node's persisted history (restart, retry, inspection)
    checkpoint = store.load("g:join")
    assert checkpoint.messages[0] == first
    assert await states_of(store, "g:join") == ["queued", "pending", "running", "completed"]


@pytest.mark.spec("S003-37")
async def test_graph_nodes_take_the_prompt_shapes_of_submit_and_nothing_is_written_on_error(
    store: Any,
) -> None:
    """Graph node prompts are a nonblank string or a user message (a dict too);
    invalid prompts and invalid graphs (unknown agent or dependency, cycle, repeated or
    blank id, bad policy, no nodes) raise ConfigurationError before anything is written."""
    rec = Recorder(store, "a")
    async with await DurableRuntime.open(store=store, agents=[rec.agent()]) as rt:
        ok = {"id": "x", "agent": "a", "prompt": "fine"}
        bad_graphs: list[list[Any]] = [
            [],
            [{"id": "x", "agent": "a", "prompt": "   "}],
            [{"id": "x", "agent": "a", "prompt": nd.assistant("hi")}],
            [{"id": "x", "agent": "a", "prompt": {"role": "user", "content": []}}],
            [{"id": "x", "agent": "nobody", "prompt": "hi"}],
            [ok, {"id": "y", "agent": "a", "prompt": "hi", "depends_on": ["zzz"]}],
            [ok, {"id": "x", "agent": "a", "prompt": "again"}],
            [{"id": " ", "agent": "a", "prompt": "hi"}],
            [{"id": "x", "agent": "a", "prompt": "hi", "depends_on": ["x"]}],
            [
                {"id": "x", "agent": "a", "prompt": "hi", "depends_on": ["y"]},
                {"id": "y", "agent": "a", "prompt": "hi", "depends_on": ["x"]},
            ],
            [{"id": "x", "agent": "a", "prompt": "hi", "on_dependency_failure": "ignore"}],
            [{"id": "x", "agent": "a", "prompt": "hi", "colour": "red"}],
        ]
        for nodes in bad_graphs:
            with pytest.raises(nd.ConfigurationError):
                await rt.submit_graph(nodes)
        assert rt.list_runs() == []
        image = nd.ImagePart(url="https://example.com/cat.png", media_type="image/png")
        graph = await rt.submit_graph(
            [
                {"id": "text", "agent": "a", "prompt": "plain"},
                {"id": "msg", "agent": "a", "prompt": nd.user("as a message")},
                {"id": "dict", "agent": "a", "prompt": {"role": "user", "content": "as dict"}},
                {"id": "media", "agent": "a", "prompt": nd.Message(role="user", content=[image])},
            ]
        )
        results = await graph.result()
    assert results["media"].text == "a(media)" and results["dict"].text == "a(as dict)"


async def test_a_graph_id_is_idempotent_and_a_different_graph_under_it_conflicts(
    store: Any,
) -> None:
    """Submitting the same graph id with the same nodes returns the original graph."""
    rec = Recorder(store, "a")
    async with await DurableRuntime.open(store=store, agents=[rec.agent()]) as rt:
        nodes = [{"id": "x", "agent": "a", "prompt": "one"}]
        first = await rt.submit_graph(nodes, graph_id="same")
        again = await rt.submit_graph(nodes, graph_id="same")
        assert first.graph_id == again.graph_id and len(rt.list_runs()) == 1
        with pytest.raises(nd.DurableConflictError):
            await rt.submit_graph([{"id": "x", "agent": "a", "prompt": "two"}], graph_id="same")
        await first.result()
        assert rt.graph("same").status == "completed"
        with pytest.raises(nd.RunNotFoundError):
            rt.graph("unknown")


async def test_retrying_a_failed_dependent_waits_for_its_dependencies_again(store: Any) -> None:
    """A node failed by its dependency and retried goes back to queued (not pending)
    until the dependency is retried and completes."""
    rec = Recorder(store, "a")
    rec.fail.add("flaky")
    async with await DurableRuntime.open(store=store, agents=[rec.agent()]) as rt:
        graph = await rt.submit_graph(
            [GraphNode("flaky", "a", "flaky"), GraphNode("after", "a", "x", depends_on=["flaky"])]
        )
        await graph.wait()
        await graph.node("after").retry()
        assert graph.node("after").status == "queued"
        rec.fail.clear()
        await graph.node("flaky").retry()
        results = await graph.result()
    assert results["after"].text == "a(x)"


async def test_approvals_inside_a_graph_node_pause_it_and_the_graph_goes_on_after_approve(
    store: Any,
) -> None:
    """A node that calls a tool needing approval waits in waiting_approval (dependents
    stay queued, the graph is waiting_approval); approving it lets the graph finish."""

    @nd.tool(needs_approval=True)
    def deploy(target: str) -> str:
        """Deploy somewhere."""
        return f"deployed {target}"

    rec = Recorder(store, "a")
    deployer = Agent(
        "deployer",
        nd.ScriptedModel([nd.Turn.call("deploy", target="prod"), "deployed."]),
        [deploy],
        version="1",
    )
    async with await DurableRuntime.open(store=store, agents=[rec.agent(), deployer]) as rt:
        graph = await rt.submit_graph(
            [
                GraphNode("build", "a", "build"),
                GraphNode("ship", "deployer", "ship it", depends_on=["build"]),
                GraphNode("announce", "a", "announce", depends_on=["ship"]),
            ]
        )
        assert await graph.wait("waiting_approval") == "waiting_approval"
        ship = graph.node("ship")
        assert ship.status == "waiting_approval"
        assert graph.node("announce").status == "queued"
        [request] = await ship.pending_approvals()
        assert request.token  # signed as for any run
        await ship.approve(request.approval_id)
        results = await graph.result()
    assert results["ship"].text == "deployed."
    assert "Result of ship:\ndeployed." in results["announce"].messages[0].text


async def test_fifty_nodes_never_exceed_max_concurrent_runs(store: Any) -> None:
    """A graph of 50 nodes (5 layers of 10, each node depending on one of the layer
    before) under max_concurrent_runs=3: the peak of model calls in flight is at most
    3, every node completes, none before its dependency."""
    rec = Recorder(store, "a", delay=0.005)
    nodes = [
        GraphNode(f"n{i}", "a", f"n{i}", depends_on=[f"n{i - 10}"] if i >= 10 else [])
        for i in range(50)
    ]
    async with await DurableRuntime.open(
        store=store, agents=[rec.agent()], max_concurrent_runs=3
    ) as rt:
        graph = await rt.submit_graph(nodes, graph_id="big")
        results = await asyncio.wait_for(graph.result(), 60)
    assert len(results) == 50 and rec.peak <= 3 and rec.peak >= 2
    for message, states in rec.seen:
        i = int(message.content[0].text[1:])  # type: ignore[union-attr]
        if i >= 10:
            assert states[f"big:n{i - 10}"] == "completed"


@pytest.mark.spec("S003-32")
async def test_stream_and_model_retry_apply_to_graph_nodes(store: Any) -> None:
    """A streaming agent's node persists model deltas (stream fixed at
    submission); model_retry retries a node's model errors as for any run."""
    streamer = Agent(
        "streamer", nd.ScriptedModel(["streamed words"], stream_delay=0.0), version="1", stream=True
    )
    calls = {"n": 0}

    def flaky(request: ModelRequest) -> nd.Turn:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("transient")
        return nd.Turn(text="second try")

    retrier = Agent(
        "retrier",
        nd.ScriptedModel([flaky] * 5, mode="sequential"),
        version="1",
        model_retry=nd.ModelRetry(max_attempts=3, initial_delay_ms=1, max_delay_ms=1),
    )
    async with await DurableRuntime.open(store=store, agents=[streamer, retrier]) as rt:
        graph = await rt.submit_graph(
            [GraphNode("s", "streamer", "talk"), GraphNode("r", "retrier", "x", depends_on=["s"])]
        )
        results = await graph.result()
        events = [e async for e in graph.node("s").stream()]
        assert graph.node("s").record().stream is True
    assert results["r"].text == "second try" and calls["n"] == 2
    assert any(e.type == "model_delta" for e in events)
    assert "retry_wait" in await states_of(store, graph.node("r").run_id)


async def test_limits_apply_to_graph_nodes(store: Any) -> None:
    """Limits apply at submission (nothing written) and to each node as to any run: a
    node whose checkpoint is over max_payload_bytes fails (limit_exceeded), and so
    does its dependent (dependency_failed)."""
    rec = Recorder(store, "a")
    limits = Limits(max_payload_bytes=2000, max_pending_runs=3)
    async with await DurableRuntime.open(store=store, agents=[rec.agent()], limits=limits) as rt:
        with pytest.raises(nd.LimitExceededError):
            await rt.submit_graph([GraphNode("big", "a", "x" * 2500)])
        with pytest.raises(nd.LimitExceededError):
            await rt.submit_graph([GraphNode(f"n{i}", "a", "hi") for i in range(4)])
        assert rt.list_runs() == []
        graph = await rt.submit_graph(
            [
                GraphNode("small", "a", "hi"),
                GraphNode("large", "a", "y" * 1500),
                GraphNode("after", "a", "hi", depends_on=["large"]),
            ]
        )
        assert await graph.wait() == "failed"
        records = {r.node_id: r for r in graph.records()}
    assert records["small"].state == "completed"
    assert records["large"].reason == "limit_exceeded"
    assert records["after"].reason == "dependency_failed"


@pytest.mark.spec("S003-13")
async def test_graphs_use_agents_registered_after_open(store: Any) -> None:
    """A graph submitted after register_agents() can use the new agent at once."""
    async with await DurableRuntime.open(store=store) as rt:
        with pytest.raises(nd.ConfigurationError):
            await rt.submit_graph([GraphNode("x", "late", "hi")])
        rt.register_agents([Recorder(store, "late").agent()])
        graph = await rt.submit_graph([GraphNode("x", "late", "hi")])
        assert (await graph.result())["x"].text == "late(hi)"


async def test_cancelling_a_graph_cancels_its_unfinished_nodes(store: Any) -> None:
    """graph.cancel() cancels every unfinished node; the graph is cancelled."""

    @nd.tool(needs_approval=True)
    def wait_here() -> str:
        """Wait for a human."""
        return "ok"

    waiter = Agent(
        "w", nd.ScriptedModel([nd.Turn.call("wait_here"), "done"]), [wait_here], version="1"
    )
    rec = Recorder(store, "a")
    async with await DurableRuntime.open(store=store, agents=[waiter, rec.agent()]) as rt:
        graph = await rt.submit_graph(
            [GraphNode("w", "w", "go"), GraphNode("after", "a", "x", depends_on=["w"])]
        )
        await graph.wait("waiting_approval")
        await graph.cancel()
        assert await graph.wait() == "cancelled"
        assert {r.state for r in graph.records()} == {"cancelled"}


async def test_graph_nodes_in_the_runs_frame_the_cli_and_per_node_history(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """inspect.runs() has each node's run with graph_id, node_id, depends_on and the
    graph's derived status; `nbdurable runs list` shows them; inspect.history works
    per node."""
    pytest.importorskip("pandas", reason="the inspect extra is not installed")
    from nbdurable.cli import main

    url = f"sqlite:///{tmp_path}/runs.db"
    store = nd.open_store(url)
    rec = Recorder(store, "a")
    async with await DurableRuntime.open(store=store, agents=[rec.agent()]) as rt:
        graph = await rt.submit_graph(
            [
                GraphNode("fetch", "a", "fetch"),
                GraphNode("report", "a", "report", depends_on=["fetch"]),
            ],
            graph_id="nightly",
        )
        await graph.result()
    frame = nd.inspect.runs(store)
    assert list(frame.index) == ["nightly:fetch", "nightly:report"]
    row = frame.loc["nightly:report"]
    assert (row["graph_id"], row["node_id"], row["depends_on"]) == ("nightly", "report", "fetch")
    assert row["graph_status"] == "completed" and row["kind"] == "agent"
    history = nd.inspect.history(store, "nightly:report")
    assert list(history["status"]) == ["completed"]
    store.close()
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["runs", "list", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "graph" in out.splitlines()[0] and "after" in out.splitlines()[0]
    report = next(line for line in out.splitlines() if line.startswith("nightly:report"))
    assert "nightly (completed)" in report and "fetch" in report


async def test_runs_list_filters_one_graph(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nbdurable runs list --graph ID` shows only that graph's nodes."""
    from nbdurable.cli import main

    url = f"sqlite:///{tmp_path}/runs.db"
    store = nd.open_store(url)
    rec = Recorder(store, "a")
    async with await DurableRuntime.open(store=store, agents=[rec.agent()]) as rt:
        for graph_id in ("nightly", "weekly"):
            graph = await rt.submit_graph([GraphNode("fetch", "a", "fetch")], graph_id=graph_id)
            await graph.result()
    store.close()
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["runs", "list", "--graph", "weekly", "--store", url]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[0] for line in lines] == ["weekly:fetch"]
    assert main(["runs", "--graph", "monthly", "--store", url]) == 2
    assert "no graph 'monthly' in sqlite:///" in capsys.readouterr().err
