"""ScriptedModel's request log: empty by default, complete on request, calls always counted."""

from __future__ import annotations

import re

import pytest

import nbdurable as nd


def _ping_turns(n: int) -> list[nd.Turn]:
    return [*(nd.Turn.call("ping", i=i) for i in range(n)), nd.Turn(text="done")]


async def _run(model: nd.ScriptedModel, steps: int) -> nd.GenerateTextResult:
    @nd.tool
    def ping(i: int) -> str:
        """Answer a ping."""
        return f"pong {i} " * 10

    return await nd.generate_text(model=model, messages="go", tools=[ping], max_steps=steps + 1)


async def test_by_default_no_request_is_kept_and_the_turns_play_in_order() -> None:
    model = nd.ScriptedModel(_ping_turns(5))
    assert model.keep_requests == 0
    result = await _run(model, 5)
    assert result.text == "done"
    assert [[c.args["i"] for c in s.tool_calls] for s in result.steps] == [
        [0],
        [1],
        [2],
        [3],
        [4],
        [],
    ]
    assert model.calls == 6
    assert model.requests == []


async def test_sequential_turns_play_in_order_without_a_log() -> None:
    model = nd.ScriptedModel(["one", "two", "three"], mode="sequential", fail_on=[2])
    texts = []
    for _ in range(4):
        try:
            texts.append((await nd.generate_text(model=model, messages="same")).text)
        except nd.ModelError:
            texts.append("failed")
    # The failed call uses up no turn: turns follow the calls, not a request log.
    assert texts == ["one", "failed", "two", "three"]
    assert model.calls == 4 and model.requests == []


async def test_keeping_requests_changes_no_turn_and_no_usage() -> None:
    kept = nd.ScriptedModel(_ping_turns(3), keep_requests=None)
    plain = nd.ScriptedModel(_ping_turns(3))
    with_log, without = await _run(kept, 3), await _run(plain, 3)
    assert with_log.messages == without.messages
    assert [s.usage for s in with_log.steps] == [s.usage for s in without.steps]
    assert [len(r.messages) for r in kept.requests] == [1, 3, 5, 7]
    assert plain.requests == []


async def test_the_log_keeps_the_latest_requests_and_counts_every_call() -> None:
    model = nd.ScriptedModel(_ping_turns(6), keep_requests=3)
    result = await _run(model, 6)
    assert result.text == "done"
    assert model.calls == 7
    assert len(model.requests) == 3
    # The latest three, in order: their histories grow by two messages a step.
    assert [len(r.messages) for r in model.requests] == [9, 11, 13]


async def test_none_keeps_every_request() -> None:
    model = nd.ScriptedModel(_ping_turns(4), keep_requests=None)
    await _run(model, 4)
    assert model.calls == 5
    assert [len(r.messages) for r in model.requests] == [1, 3, 5, 7, 9]


async def test_zero_keeps_none_and_fail_on_still_counts_calls() -> None:
    model = nd.ScriptedModel(["hi"], keep_requests=0, fail_on={1: RuntimeError("boom")})
    with pytest.raises(RuntimeError, match="boom"):
        await nd.generate_text(model=model, messages="go")
    result = await nd.generate_text(model=model, messages="go")
    assert result.text == "hi"
    assert model.calls == 2
    assert model.requests == []


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(nd.ConfigurationError, match="keep_requests"):
        nd.ScriptedModel(["hi"], keep_requests=-1)


def _tokens_of_whole_prompt(request: nd.ModelRequest) -> int:
    # The count as the whole request's JSON, joined by spaces, gives it.
    prompt = " ".join(m.model_dump_json() for m in request.messages)
    return max(1, len(re.findall(r"\S+\s*|\s+", prompt)) // 4)


async def test_input_tokens_match_the_whole_prompt_across_calls_and_runs() -> None:
    model = nd.ScriptedModel(
        [nd.Turn.call("ping", i=1), nd.Turn.call("ping", i=2), "done"], keep_requests=None
    )
    first = await _run(model, 2)
    # A second run on the same instance: a history that does not extend the last one.
    model.turns = ["again  with   spaces\n"]
    second = await nd.generate_text(model=model, messages="other   prompt \n" * 30)
    assert first.text == "done" and second.text == "again  with   spaces\n"
    counted = [s.usage.input_tokens for s in (*first.steps, *second.steps)]
    assert counted == [_tokens_of_whole_prompt(r) for r in model.requests]
    assert counted[0] < counted[1] < counted[2]  # the history grew and was counted
    assert counted[3] != counted[2]  # a new history, counted afresh
