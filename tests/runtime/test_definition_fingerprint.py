"""A run executes only under the definition it was submitted with (issue 16).

Each run records the fingerprint of its agent's definition; a runtime whose
registration of that (id, version) has another fingerprint never claims it and
records why the run waits. Two real processes on one SQLite store stand for two
notebooks defining ``janitor`` v1 differently.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.records import pending_run

import nbdurable as nd
from nbdurable.durable._definitions import parts_of
from nbdurable.runs import RuntimeRun, mismatch_reason, unclaimable_by_definition
from nbdurable.runtime import Agent, DurableRuntime

from .conftest import FakeClock, eventually

PROCESS = Path(__file__).with_name("definition_process.py")
ROOT = Path(__file__).resolve().parents[2]
REASON = "waits for a runtime whose janitor v1 matches the submitted definition"
"""How the waiting reason starts; then what the definition that saw the run differs in."""
OLD = f"{REASON}; it was submitted under an older fingerprint, whose parts were not recorded"
"""The reason of a run whose fingerprint has no parts (the synthetic ``X`` and ``Y`` here)."""
NOW = 1_800_000_000_000


def process(
    role: str, script: str, url: str, *extra: str, seed: str = "0"
) -> subprocess.Popen[str]:
    """A definition process (its own __main__, its own hash seed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed}
    return subprocess.Popen(
        [sys.executable, str(PROCESS), role, script, url, *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def output(proc: subprocess.Popen[str], timeout: float = 90) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out.strip()


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM by PID, SIGKILL if it does not exit."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


# -- across processes, on one store -------------------------------------------------------


async def test_a_runtime_with_another_definition_never_claims_the_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    other = process("serve", "y", url)  # notebook B: janitor v1 with script Y, running
    try:
        assert other.stdout is not None
        assert other.stdout.readline().strip() == "ready"
        run_id = output(process("submit", "x", url, "run-a"))  # notebook A submits (script X)
        assert run_id == "run-a"
        store = nd.open_store(url)
        try:
            await eventually(lambda: store.rt_get(run_id).waiting_reason is not None, 20)
            await asyncio.sleep(1.0)  # B polls every 20 ms: dozens of chances to take it
            record = store.rt_get(run_id)
            assert record.state == "pending" and record.lease_owner is None and record.fence == 0
            assert record.waiting_reason == (
                f"{REASON}; a runtime that saw it differs in its model, tool recovery "
                "and tools (sweep missing, vacuum added)"
            )
            assert store.read_events(run_id) == [] or all(
                e.type == "run_state" for e in store.read_events(run_id)
            )
            assert store.load(run_id) is None  # no step ran anywhere
            shown = " ".join(str(nd.inspect.explain(store, run_id)).split())
            assert record.waiting_reason in shown and "pending" in shown
            frame = nd.inspect.runs(store)
            assert frame.loc[run_id, "waiting_reason"] == record.waiting_reason
            compact = nd.inspect.runs(store, compact=True).loc[run_id, "reason"]  # the compact view
            assert compact == record.waiting_reason

            # A (its definition again, in a new process) executes it: A's text
            assert output(process("execute", "x", url, run_id, seed="1")) == (
                "Notebook A swept stg_a."
            )
            done = store.rt_get(run_id)
            assert done.state == "completed" and done.waiting_reason is None
            assert done.fence == 1  # claimed once, by A
            tools = [
                m.content[0].result  # type: ignore[union-attr]
                for m in store.load(run_id).messages
                if m.role == "tool"
            ]
            assert tools == ["swept stg_a"]  # A's tool, never B's
        finally:
            store.close()
    finally:
        stop(other)
    assert other.returncode == 0


async def test_the_waiting_reason_is_written_once_and_shown_by_runs_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert output(process("submit", "x", url, "run-list")) == "run-list"
    store = nd.open_store(url)
    try:
        clock = FakeClock()
        runtime = await DurableRuntime.open(
            store=store, agents=[_janitor(["B's text"])], deps=clock.deps()
        )
        try:
            expected = f"{REASON}; a runtime that saw it differs in its model, tool recovery and "
            expected += "tools (sweep missing)"
            await eventually(lambda: store.rt_get("run-list").waiting_reason == expected)
            first = store.rt_get("run-list")
            changes = store._db.conn.total_changes  # every row this connection wrote so far
            for _ in range(20):  # twenty more looks for work
                await clock.skip(1_000)
            assert store._db.conn.total_changes == changes  # the reason is not written again
            assert store.rt_get("run-list") == first
        finally:
            await runtime.close()
        from nbdurable.cli import main

        assert main(["runs", "list", "--store", url]) == 0
        out = capsys.readouterr().out
        assert "run-list" in out and expected in " ".join(out.split())
    finally:
        store.close()


def test_an_unchanged_definition_has_the_same_fingerprint_in_every_process(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    prints = [output(process("fingerprint", "x", url, seed=str(s))) for s in (1, 2, 3)]
    assert len(set(prints)) == 1 and parts_of(prints[0]) is not None
    assert output(process("fingerprint", "y", url)) != prints[0]


# -- the fingerprint -------------------------------------------------------------------

CELL = '''
import nbdurable as nd
from pydantic import BaseModel
from nbdurable.runtime import Agent

class Report(BaseModel):
    tables: list[str]

@nd.tool(needs_approval=lambda args: args["name"].startswith("prod"))
def drop_table(name: str) -> str:
    """Drop a warehouse table."""
    return name

limit = 30
janitor = Agent(
    "janitor",
    nd.ScriptedModel([
        lambda request: nd.Turn.call("drop_table", name=f"stg_{limit}"),
        nd.Turn(text="done", output={"tables": ["stg"]}),
    ]),
    tools=[drop_table],
    version="1",
    instructions="Only staging tables.",
    output_type=Report,
    tool_recovery={"drop_table": "idempotent"},
    model_retry={"max_attempts": 3},
)
'''


def run_cell(source: str = CELL) -> Agent:
    """Execute a notebook cell's source in a fresh namespace; its ``janitor``."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(source, "<cell>", "exec"), namespace)
    return namespace["janitor"]  # type: ignore[no-any-return]


def test_running_an_unchanged_cell_again_gives_the_same_fingerprint() -> None:
    first, again = run_cell(), run_cell()
    assert first.fingerprint() == again.fingerprint()
    runtime = DurableRuntime(store=nd.open_store("memory://"), agents=[first])
    runtime.register_agents([again])  # the same registration: no conflict


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('name=f"stg_{limit}"', 'name=f"prod_{limit}"'),  # the callable's code
        ('Turn(text="done"', 'Turn(text="all done"'),  # a scripted turn
        ("name: str) -> str:", "name: str, cascade: bool = False) -> str:"),  # tool schema
        ('"""Drop a warehouse table."""', '"""Drop any table."""'),  # tool description
        ('startswith("prod")', 'startswith("stg")'),  # the approval gate's code
        ("Only staging tables.", "Only production tables."),  # instructions
        ("tables: list[str]", "tables: list[int]"),  # output schema
        ('"idempotent"', '"safe"'),  # recovery policy
    ],
)
def test_a_changed_definition_changes_the_fingerprint(old: str, new: str) -> None:
    assert old in CELL
    changed = run_cell(CELL.replace(old, new, 1))
    assert changed.fingerprint() != run_cell().fingerprint()


def test_a_changed_script_under_the_same_version_is_a_registration_conflict() -> None:
    runtime = DurableRuntime(store=nd.open_store("memory://"), agents=[_janitor(["X"])])
    with pytest.raises(nd.DurableConflictError, match="new version"):
        runtime.register_agents([_janitor(["Y"])])
    runtime.register_agents([_janitor(["Y"], version="2")])


@pytest.mark.spec("S003-57")
def test_the_retry_policy_is_saved_per_run_not_fingerprinted_but_still_conflicts() -> None:
    """A run keeps the retry policy saved at submission, so a runtime with
    another policy may execute it; one runtime still refuses a changed policy."""
    cautious = _janitor(["X"], model_retry={"max_attempts": 2})
    generous = _janitor(["X"], model_retry={"max_attempts": 6})
    assert cautious.fingerprint() == generous.fingerprint()
    runtime = DurableRuntime(store=nd.open_store("memory://"), agents=[cautious])
    with pytest.raises(nd.DurableConflictError):
        runtime.register_agents([generous])


def test_a_closure_value_counts_but_not_the_scripted_pace_or_fault_injection() -> None:
    def script(text: str) -> Any:
        return lambda request: text

    base = _janitor([script("A")]).fingerprint()
    assert _janitor([script("A")]).fingerprint() == base
    assert _janitor([script("B")]).fingerprint() != base
    paced = Agent(
        "janitor", nd.ScriptedModel([script("A")], stream_delay=0.5, fail_on=[1]), version="1"
    )
    assert paced.fingerprint() == base


def test_host_settings_and_secrets_do_not_change_the_fingerprint() -> None:
    openai = pytest.importorskip("nbdurable.models._openai")
    pytest.importorskip("openai")

    def agent(**options: Any) -> Agent:
        model = openai.OpenAIChatModel("llama3.1", **options)
        return Agent("janitor", model, version="1")

    here = agent(base_url="http://127.0.0.1:1/v1", api_key="k1", timeout=5)
    there = agent(
        base_url="http://10.0.0.7:11434/v1",
        api_key="k2",
        timeout=60,
        default_headers={"X-Team": "data"},
    )
    assert here.fingerprint() == there.fingerprint()
    warmer = agent(base_url="http://127.0.0.1:1/v1", options={"temperature": 0.9})
    assert warmer.fingerprint() != here.fingerprint()
    other = Agent(
        "janitor", openai.OpenAIChatModel("gpt-4o-mini", base_url="http://x/v1"), version="1"
    )
    assert other.fingerprint() != here.fingerprint()


def test_a_model_can_name_what_shapes_its_answers() -> None:
    class Custom:
        model_id = "custom"

        def __init__(self, temperature: float, endpoint: str) -> None:
            self.temperature, self.endpoint, self.calls = temperature, endpoint, 0

        async def generate(self, request: Any) -> Any:
            raise NotImplementedError

    a, b = Custom(0.1, "http://a"), Custom(0.1, "http://b")
    b.calls = 7  # instance state is not part of the definition
    assert Agent("j", a, version="1").fingerprint() == Agent("j", b, version="1").fingerprint()
    hot = Agent("j", Custom(0.9, "http://a"), version="1")
    assert hot.fingerprint() != Agent("j", a, version="1").fingerprint()


# -- claims (the pure rule and every store) ------------------------------------------------


def _record(run_id: str, fingerprint: str | None) -> RuntimeRun:
    return pending_run(run_id, at=NOW, agent_id="janitor", fingerprint=fingerprint)


def test_a_store_claims_only_with_the_submitted_definition(store: Any) -> None:
    store.rt_insert(_record("r1", "X"), enqueue=False, max_pending=10)
    assert store.rt_claim("b", NOW, 1000, {("janitor", "1"): "Y"}) is None
    waiting = store.rt_get("r1")
    assert waiting.state == "pending" and waiting.waiting_reason == OLD
    assert waiting.updated_at == NOW and waiting.fence == 0
    assert store.rt_claim("b", NOW, 1000, {("janitor", "2"): "X"}) is None  # another version
    taken = store.rt_claim("a", NOW, 1000, {("janitor", "1"): "X"})
    assert taken is not None and taken.run_id == "r1" and taken.waiting_reason is None
    assert store.rt_get("r1").waiting_reason is None


def test_a_run_without_a_fingerprint_is_claimable_by_any_definition(store: Any) -> None:
    store.rt_insert(_record("old", None), enqueue=False, max_pending=10)
    taken = store.rt_claim("b", NOW, 1000, {("janitor", "1"): "Y"})
    assert taken is not None and taken.run_id == "old"
    store.rt_insert(_record("new", "X"), enqueue=False, max_pending=10)
    taken = store.rt_claim("c", NOW, 1000, [("janitor", "1")])  # keys only: no check
    assert taken is not None and taken.run_id == "new"


def test_the_waiting_reason_is_recorded_once() -> None:
    run = _record("r", "X")
    first = unclaimable_by_definition(run, NOW, {("janitor", "1"): "Y"})
    served = {("janitor", "1"): "Y"}
    assert first is not None and first.waiting_reason == mismatch_reason(run, served) == OLD
    assert unclaimable_by_definition(first, NOW, {("janitor", "1"): "Y"}) is None
    assert unclaimable_by_definition(run, NOW, {("janitor", "1"): "X"}) is None
    # an unserved (agent, version) waits for a worker serving it; never over a mismatch
    unserved = unclaimable_by_definition(run, NOW, {("other", "1"): "Y"})
    assert (
        unserved is not None and unserved.waiting_reason == "waits for a worker serving janitor v1"
    )
    assert unclaimable_by_definition(unserved, NOW, {("other", "1"): "Y"}) is None
    assert unclaimable_by_definition(first, NOW, {("other", "1"): "Y"}) is None
    parked = run.model_copy(update={"state": "waiting_approval"})
    assert unclaimable_by_definition(parked, NOW, {("janitor", "1"): "Y"}) is None


async def test_graph_nodes_owned_runs_forks_and_retries_keep_the_submitted_fingerprint() -> None:
    store = nd.open_store("memory://")
    agent = Agent("janitor", nd.ScriptedModel(["ok"], fail_on=[1]), version="1")
    expected = agent.fingerprint()

    async def spawn(ctx: nd.TaskContext, state: Any) -> Any:
        return (await ctx.spawn_agent("janitor", "from a task")).text

    task = nd.define_task("sweeper", spawn, agents=["janitor"])
    async with DurableRuntime(
        store=store, agents=[agent], tasks=[task], poll_interval=0.01
    ) as runtime:
        run = await runtime.submit("janitor", "go")
        assert run.record().fingerprint == expected
        assert (await run.wait()).state == "failed"  # the scripted first call fails
        await run.retry()
        assert run.record().fingerprint == expected
        assert (await run.result()).text == "ok"
        fork = await runtime.fork(run.run_id, 0)
        assert fork.record().fingerprint == expected
        graph = await runtime.submit_graph([{"id": "n", "agent": "janitor", "prompt": "go"}])
        assert {r.fingerprint for r in store.rt_graph(graph.graph_id)} == {expected}
        assert await (await runtime.submit_task("sweeper", {})).result() == "ok"
        owned = [r for r in store.rt_list() if r.owner_run_id is not None]
        assert owned and {r.fingerprint for r in owned} == {expected}


def _janitor(script: list[Any], version: str = "1", **options: Any) -> Agent:
    return Agent("janitor", nd.ScriptedModel(script), version=version, **options)


async def test_runs_resume_refuses_agents_with_another_definition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    module = tmp_path / "other_janitor.py"
    module.write_text(
        "import nbdurable as nd\n"
        "agents = [nd.Agent('janitor', nd.ScriptedModel(['Not A.']), version='1')]\n"
    )
    assert output(process("submit", "x", url, "run-resume")) == "run-resume"
    from nbdurable.cli import main

    sys.path.insert(0, str(tmp_path))
    try:
        args = ["--store", url, "--agents", "other_janitor:agents", "--timeout", "2"]
        status = await asyncio.to_thread(main, ["runs", "resume", "run-resume", *args])
    finally:
        sys.path.remove(str(tmp_path))
    assert status == 2
    assert REASON in " ".join(capsys.readouterr().err.split())
    store = nd.open_store(url)
    try:
        assert store.rt_get("run-resume").state == "pending"
    finally:
        store.close()


async def test_a_cancelled_run_no_longer_shows_what_it_waited_for() -> None:
    pytest.importorskip("pandas", reason="the inspect extra is not installed")
    store = nd.open_store("memory://")
    client = DurableRuntime(store=store, agents=[_janitor(["X"])])  # never opened
    run = await client.submit("janitor", "go")
    assert store.rt_claim("b", NOW, 1000, {("janitor", "1"): "Y"}) is None
    assert REASON in str(nd.inspect.explain(store, run.run_id))
    await run.cancel()
    assert REASON not in str(nd.inspect.explain(store, run.run_id))
    assert nd.inspect.runs(store).loc[run.run_id, "waiting_reason"] is None
