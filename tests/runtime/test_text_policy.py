"""Runtime runs with lone surrogates (undecodable bytes as Python holds them) on every store.

The prompt, the session id, tool arguments and results, model text and streamed
deltas all carry ``"a\\udcffb"``: the run completes with U+FFFD in their place,
and a model error quoting such text fails the run with a readable error
instead of leaving it ``running`` with nothing recorded.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime, RunFailedError

BAD = "a\udcffb"
GOOD = "a\ufffdb"


def _agents(ran: list[str]) -> list[Agent]:
    @nd.tool
    def list_dir(path: str) -> list[str]:
        """List a directory (names as os.listdir gives them)."""
        ran.append(path)
        return [f"{path}/{BAD}"]

    def fail(request: Any) -> str:
        raise nd.ModelError(f"the provider choked on {BAD}")

    lister = Agent(
        "lister",
        nd.ScriptedModel(
            [nd.Turn(text=f"listing {BAD}", tool_calls=[("list_dir", {"path": BAD})]), f"got {BAD}"]
            * 4,
            mode="sequential",
        ),
        [list_dir],
        version="1",
        stream=True,
    )
    broken = Agent("broken", nd.ScriptedModel([fail] * 4, mode="sequential"), version="1")
    return [lister, broken]


@pytest.mark.parametrize("as_message", [False, True], ids=["string", "message"])
async def test_runtime_run_with_lone_surrogates_completes(store: Any, as_message: bool) -> None:
    ran: list[str] = []
    async with await DurableRuntime.open(store=store, agents=_agents(ran)) as rt:
        prompt = nd.user(f"list {BAD}") if as_message else f"list {BAD}"
        run = await rt.submit("lister", prompt, session_id=f"s-{BAD}", request_id=f"r-{BAD}")
        result = await asyncio.wait_for(run.result(), 20)
        assert result.text == f"got {GOOD}"
        assert ran == [GOOD]
        record = run.record()
        assert record.state == "completed" and record.session_id == f"s-{GOOD}"
        # the same raw request id maps to the same stored one: deduplicated
        again = await rt.submit("lister", prompt, request_id=f"r-{BAD}", session_id=f"s-{BAD}")
        assert again.run_id == run.run_id
        events = await nd.events.read_events(store, run.run_id)
        deltas = "".join(e.payload["delta"] for e in events if e.type == "model_delta")
        assert GOOD in deltas
        checkpoint = await nd.durable.store.maybe_await(store.load(run.run_id))
        assert checkpoint.messages[0].text == f"list {GOOD}"
        assert GOOD in str(checkpoint.messages[-2].tool_results[0].result)


async def test_model_error_with_lone_surrogates_fails_the_run_cleanly(store: Any) -> None:
    async with await DurableRuntime.open(store=store, agents=_agents([])) as rt:
        run = await rt.submit("broken", "go")
        with pytest.raises(RunFailedError):
            await asyncio.wait_for(run.result(), 20)
        record = run.record()
        assert record.state == "failed"
        assert record.error == f"ModelError: the provider choked on {GOOD}"
        events = await nd.events.read_events(store, run.run_id)
        failed = [e for e in events if e.type == "model_attempt_failed"]
        assert failed and failed[0].payload["message"] == f"the provider choked on {GOOD}"
