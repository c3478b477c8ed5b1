"""The agent spec (``AgentOptions``): one list of options for every loop entry point."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.loop import AgentOptions

ENTRY_POINTS: list[Any] = [
    nd.generate_text,
    nd.stream_chat,
    nd.resume_from_checkpoint,
    nd.resume_stream_from_checkpoint,
    nd.generate_text_sync,
]


def test_every_entry_point_names_every_option_with_its_default() -> None:
    """The signature lists the spec's keys as keyword-only parameters (model required)."""
    for func in ENTRY_POINTS:
        params = inspect.signature(func).parameters
        for name in AgentOptions.__annotations__:
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, (func, name)
        assert params["model"].default is inspect.Parameter.empty
        assert params["max_steps"].default == 20
        assert params["tools"].default is None and params["deps"].default is None


def test_an_unknown_or_missing_option_is_a_type_error_at_the_call() -> None:
    """Before anything is awaited or started, worded as the interpreter words it."""
    model = nd.ScriptedModel(["x"])
    with pytest.raises(TypeError, match=r"generate_text\(\) .*'max_step'"):
        nd.generate_text(model=model, messages="hi", max_step=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"stream_chat\(\) missing .*'model'"):
        nd.stream_chat(messages="hi")  # type: ignore[call-arg]


async def test_a_kept_spec_runs_again_and_an_agent_builds_one() -> None:
    """A dict of options is passed again as it is; ``Agent.loop_options()`` is one."""
    options: AgentOptions = {"model": nd.ScriptedModel(["one"]), "max_steps": 3}
    first = await nd.generate_text(messages="a", **options)
    second = await nd.stream_chat(messages="b", **options).result()
    assert first.text == second.text == "one"  # a scripted model answers each call anew

    agent = nd.Agent("a", nd.ScriptedModel(["three"]), version="1", instructions="Be brief.")
    spec = agent.loop_options()
    assert spec["instructions"] == "Be brief." and spec["max_steps"] == 20
    assert (await nd.generate_text(messages="c", **spec)).text == "three"
