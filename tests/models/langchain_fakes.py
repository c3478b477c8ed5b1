"""LangChain's fake chat model with tool calling, for the tests and the worker's agents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field


class ToolCallingFake(FakeMessagesListChatModel):
    """LangChain's fake chat model, with ``bind_tools`` and answers chosen by the turn.

    ``responses[n]`` answers a conversation holding ``n`` AI messages (a resumed run
    in a new process gets the right one); ``bind_tools`` binds the tools as a real
    integration does, and every call's messages and bound arguments are recorded.
    """

    seen: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[dict[str, Any]] = Field(default_factory=list)

    def bind_tools(
        self,
        tools: Sequence[Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Any:
        return self.bind(tools=list(tools), tool_choice=tool_choice, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        self.bound.append(dict(kwargs))
        turn = sum(isinstance(m, AIMessage) for m in messages)
        response = self.responses[min(turn, len(self.responses) - 1)]
        return ChatResult(generations=[ChatGeneration(message=response)])
