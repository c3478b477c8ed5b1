"""What splits definitions, and what a run waiting on one is told (issue 34).

A run's fingerprint covers what decides its behaviour (code, schemas, policies)
and leaves out what the run captured at its submission (``stream``,
``max_steps``, the retry policy) and the current values of state a callable
closes over (a call counter): a worker registered with ``stream=False``
executes a run submitted with ``stream=True``, streaming as captured, and a
failed run of a scripted model whose script counts its calls is retried by a
new runtime with the same code. Fingerprints are kept in named parts, so a run
that waits for a matching definition says which part differs. Runs recorded
under the previous fingerprint scheme are still served by an unchanged
definition (the old scheme is recomputed for them).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import definition_agents as da

import nbdurable as nd
from nbdurable.durable._definitions import parts_of
from nbdurable.models._base import ModelRequest
from nbdurable.runtime import Agent, DurableRuntime
from nbdurable.runtime._fingerprint import legacy_fingerprint

from .conftest import eventually

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "waits for a runtime whose janitor v1 matches the submitted definition"


def worker(url: str, agents: str = "support.definition_agents:agents") -> subprocess.Popen[str]:
    """``nbdurable worker`` in a process of its own, serving ``agents``."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    command = [sys.executable, "-m", "nbdurable.cli", "worker", "--store", url]
    command += ["--agents", agents, "--poll-interval", "0.05"]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM by PID (SIGKILL if it hangs); its stderr."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.stderr is not None
    return proc.stderr.read()


# -- a run's captured settings do not split definitions -------------------------------


@pytest.mark.spec("S003-32")
async def test_a_worker_registered_without_streaming_runs_a_streamed_submission(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = nd.open_store(url)
    proc = worker(url)  # registers janitor v1 with stream=False
    try:
        notebook = DurableRuntime(store=store, agents=[da.janitor(stream=True, max_steps=7)])
        run = await notebook.submit("janitor", "Clean up.", run_id="run-streamed")
        assert run.record().stream is True and run.record().max_steps == 7

        def done() -> bool:
            return store.rt_get("run-streamed").state == "completed"  # type: ignore[attr-defined]

        try:
            await eventually(done, 45, interval=0.1)
        except AssertionError:
            waiting = store.rt_get("run-streamed").waiting_reason  # type: ignore[attr-defined]
            raise AssertionError(f"the worker never ran it: {waiting}") from None
        record = store.rt_get("run-streamed")  # type: ignore[attr-defined]
        assert record.result_text == "Swept stg_a." and record.waiting_reason is None
        events = store.read_events("run-streamed")  # type: ignore[attr-defined]
        # executed as captured: streamed (deltas persisted), with the run's max_steps
        assert any(e.type == "model_delta" for e in events)
        assert record.stream is True and record.max_steps == 7
    finally:
        err = stop(proc)
        store.close()
    assert proc.returncode == 0, err


def test_per_run_settings_are_not_part_of_the_fingerprint_but_still_conflict() -> None:
    streamed = da.janitor(stream=True, max_steps=7)
    plain = da.janitor(stream=False)
    assert streamed.fingerprint() == plain.fingerprint()
    runtime = DurableRuntime(store=nd.open_store("memory://"), agents=[plain])
    # one runtime still has one registration per version (new submissions read it)
    with pytest.raises(nd.DurableConflictError, match="new version"):
        runtime.register_agents([streamed])


# -- mutable closure state does not split definitions ----------------------------------


def _list_counter() -> tuple[Any, list[int]]:
    calls = [0]

    def first(request: ModelRequest) -> nd.Turn:
        calls[0] += 1
        return nd.Turn.call("sweep", table="stg_a")

    return first, calls


def _nonlocal_counter() -> tuple[Any, list[int]]:
    seen: list[int] = []
    calls = 0

    def first(request: ModelRequest) -> nd.Turn:
        nonlocal calls
        calls += 1
        seen.append(calls)
        return nd.Turn.call("sweep", table="stg_a")

    return first, seen


@pytest.mark.spec("S003-24")
@pytest.mark.parametrize("counter", [_list_counter, _nonlocal_counter], ids=["list", "nonlocal"])
async def test_a_new_runtime_with_the_same_code_retries_a_run_whose_script_counts(
    tmp_path: Path, counter: Any
) -> None:
    first, calls = counter()
    # the second model call fails: the run fails after its first response is checkpointed
    model = nd.ScriptedModel([first, "Swept stg_a."], fail_on=[2])
    janitor = Agent(
        "janitor", model, tools=[da.sweep], version="1", tool_recovery={"sweep": "safe"}
    )
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = nd.open_store(url)
    try:
        async with DurableRuntime(store=store, agents=[janitor], poll_interval=0.02) as rt:
            run = await rt.submit("janitor", "Clean up.", run_id="run-counted")
            assert (await asyncio.wait_for(run.wait(), 30)).state == "failed"
        assert sum(calls) == 1 or calls == [1]  # the counter moved
    finally:
        store.close()

    # the notebook opens a new runtime (a new store handle) with the same agent object
    store = nd.open_store(url)
    try:
        async with DurableRuntime(store=store, agents=[janitor], poll_interval=0.02) as rt:
            run = await rt.get_run("run-counted")
            await run.retry()
            try:
                result = await asyncio.wait_for(run.result(), 20)
            except TimeoutError:
                raise AssertionError(
                    f"the retried run waits: {store.rt_get('run-counted').waiting_reason}"
                ) from None
            assert result.text == "Swept stg_a."
        # the completed first response was reused, not asked again
        assert sum(calls) == 1 or calls == [1]
    finally:
        store.close()


def test_closure_state_counts_by_type_and_code_by_code() -> None:
    def agent(entry: Any) -> Agent:
        return Agent("janitor", nd.ScriptedModel([entry]), version="1")

    first, calls = _list_counter()
    before = agent(first).fingerprint()
    calls[0] = 41
    assert agent(first).fingerprint() == before  # a mutated list
    counted, _ = _nonlocal_counter()
    before = agent(counted).fingerprint()
    counted(None)
    assert agent(counted).fingerprint() == before  # a rebound nonlocal

    def gated(helper: Any) -> Any:
        return lambda request: helper(request)

    def helper_a(request: Any) -> str:
        return "A"

    def helper_b(request: Any) -> str:
        return "B"

    # a function it closes over counts by its code: another function, another definition
    assert agent(gated(helper_a)).fingerprint() != agent(gated(helper_b)).fingerprint()
    assert agent(gated(helper_a)).fingerprint() == agent(gated(helper_a)).fingerprint()

    def default(request: Any, seen: list[int] = []) -> str:  # noqa: B006 - state on purpose
        seen.append(1)
        return "ok"

    before = agent(default).fingerprint()
    default(None)
    assert agent(default).fingerprint() == before  # a mutated default


# -- the waiting run says which part differs ---------------------------------------------


def test_the_fingerprint_has_named_parts() -> None:
    parts = parts_of(da.janitor(stream=False).fingerprint())
    assert parts is not None
    assert set(parts) == {"model", "instructions", "output", "recovery", "retry_if", "tool:sweep"}
    changed = parts_of(da.changed_agents[0].fingerprint())
    assert changed is not None
    assert [name for name in parts if parts[name] != changed[name]] == ["tool:sweep"]


async def test_a_waiting_run_says_which_part_of_the_definition_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = nd.open_store(url)
    proc = worker(url, "support.definition_agents:changed_agents")  # another sweep schema
    try:
        notebook = DurableRuntime(store=store, agents=[da.janitor(stream=True)])
        await notebook.submit("janitor", "Clean up.", run_id="run-waits")

        def told() -> bool:
            return store.rt_get("run-waits").waiting_reason is not None  # type: ignore[attr-defined]

        await eventually(told, 45, interval=0.1)
        record = store.rt_get("run-waits")  # type: ignore[attr-defined]
        expected = f"{PREFIX}; a runtime that saw it differs in its tools (sweep changed)"
        assert record.state == "pending" and record.waiting_reason == expected
        assert expected in " ".join(str(nd.inspect.explain(store, "run-waits")).split())
        from nbdurable.cli import main

        assert main(["runs", "show", "run-waits", "--store", url]) == 0
        assert expected in " ".join(capsys.readouterr().out.split())
    finally:
        err = stop(proc)
        store.close()
    assert proc.returncode == 0, err


def test_the_difference_names_models_tools_added_and_missing() -> None:
    from nbdurable.durable._definitions import difference

    base = da.janitor(stream=False)
    other = Agent(
        "janitor",
        nd.ScriptedModel(["Another answer."]),
        tools=[nd.tool(lambda name: name, name="vacuum", description="Vacuum.")],
        version="1",
        instructions="Be brief.",
    )
    assert difference(base.fingerprint(), other.fingerprint()) == (
        "differs in its model, instructions, tool recovery and tools (sweep missing, vacuum added)"
    )
    assert difference(base.fingerprint(), base.fingerprint()) is None
    legacy = legacy_fingerprint(base, stream=False, max_steps=20)
    assert difference(legacy, base.fingerprint()) == (
        "was submitted under an older fingerprint, whose parts were not recorded"
    )


# -- runs recorded under the previous scheme -------------------------------------------


OLD_STORE = ROOT / "tests" / "stores" / "fixtures" / "5faba37.sqlite"


async def test_a_run_recorded_under_the_old_scheme_is_served_by_the_same_definition(
    tmp_path: Path,
) -> None:
    from stores.fixtures import store_agents as sa

    copy = tmp_path / "old.sqlite"
    shutil.copy(OLD_STORE, copy)
    store = nd.open_store(f"sqlite:///{copy}")
    try:
        old = store.rt_get("rt-pending")  # type: ignore[attr-defined]
        assert old.fingerprint is not None and parts_of(old.fingerprint) is None
        assert len(old.fingerprint) == 64 and old.stream is True
        # a worker registering the same agents without streaming: the old scheme,
        # recomputed with the run's own captured settings, still matches
        quiet = [
            Agent(a.id, a.model, a.tools, a.instructions, a.version, stream=False)
            for a in sa.agents
        ]
        runtime = DurableRuntime(
            store=store, agents=quiet, approval_signer=nd.ApprovalSigner(sa.SECRET)
        )
        async with runtime as rt:
            pending = await rt.get_run("rt-pending")
            assert (await asyncio.wait_for(pending.result(), 30)).text == "First answer."
    finally:
        store.close()  # type: ignore[attr-defined]


async def test_an_old_run_of_another_definition_still_waits_and_says_so(tmp_path: Path) -> None:
    copy = tmp_path / "old.sqlite"
    shutil.copy(OLD_STORE, copy)
    store = nd.open_store(f"sqlite:///{copy}")
    try:
        old = store.rt_get("rt-pending")  # type: ignore[attr-defined]
        other = Agent(old.agent_id, nd.ScriptedModel(["Not the old script."]), version="1")
        async with DurableRuntime(store=store, agents=[other], poll_interval=0.02):

            def told() -> bool:
                return store.rt_get("rt-pending").waiting_reason is not None  # type: ignore[attr-defined]

            await eventually(told, 10)
        record = store.rt_get("rt-pending")  # type: ignore[attr-defined]
        assert record.state == "pending"
        assert record.waiting_reason == (
            f"waits for a runtime whose {old.agent_id} v1 matches the submitted definition; "
            "it was submitted under an older fingerprint, whose parts were not recorded"
        )
    finally:
        store.close()  # type: ignore[attr-defined]


def test_a_tool_part_is_named_by_the_tool() -> None:
    from nbdurable.durable._definitions import difference

    def agent(description: str) -> Agent:
        odd = nd.tool(lambda path: path, name="fs.read-file", description=description)
        return Agent("janitor", nd.ScriptedModel(["ok"]), tools=[odd], version="1")

    parts = parts_of(agent("Read a file.").fingerprint())
    assert parts is not None and "tool:fs.read-file" in parts
    changed = agent("Read any file.").fingerprint()
    assert difference(agent("Read a file.").fingerprint(), changed) == (
        "differs in its tools (fs.read-file changed)"
    )
