"""Every model adapter names itself the same way: ``provider`` and ``model_name`` (the
identity a run's definition fingerprint can cover)."""

from __future__ import annotations

import pytest

import nbdurable as nd
from nbdurable.models import LangChainModel, PydanticAIModel


def test_every_adapter_has_a_provider_and_a_model_name() -> None:
    pytest.importorskip("pydantic_ai")
    pytest.importorskip("langchain_core")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    models = {
        ("scripted", "scripted"): nd.ScriptedModel(["hi"]),
        ("openai", "gpt-4o-mini"): nd.OpenAIChatModel("gpt-4o-mini", api_key="sk-test"),
        ("anthropic", "claude-haiku-4-5"): nd.AnthropicModel("claude-haiku-4-5", api_key="k"),
        ("test", "test"): PydanticAIModel("test"),
        ("genericfakechatmodel", "generic-fake-chat-model"): LangChainModel(
            GenericFakeChatModel(messages=iter(["hi"]))
        ),
    }
    for (provider, name), model in models.items():
        assert (model.provider, model.model_name) == (provider, name), model
        assert model.model_id == name
