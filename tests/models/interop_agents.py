"""Agents on Pydantic AI's and LangChain's own test models, for tests and `nbdurable worker`.

Both models answer from the conversation they are given, not from a counter, so a
run resumed in another process gets the right next turn: first a tool call of
``drop_table`` (needs approval) with a fixed call id, then, once its result is in
the history, a final answer. Every ``drop_table`` execution appends a line to the
file named by NBDURABLE_TEST_LOG (O_APPEND, fsync'd).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolReturnPart
from pydantic_ai.messages import TextPart as PaiText
from pydantic_ai.messages import ToolCallPart as PaiCall
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

import nbdurable as nd
from nbdurable.models import LangChainModel, Price, PydanticAIModel

try:
    from .langchain_fakes import ToolCallingFake
except ImportError:  # imported as a top-level module by `nbdurable worker`
    from langchain_fakes import ToolCallingFake  # type: ignore[no-redef]

PRICE = Price(input=1.0, output=2.0)
CALL_ID = "call_drop_stg_2023"
PREAMBLE = "I will drop the stale table stg_2023."
ANSWER = "Dropped stg_2023; nothing else was stale."


def log_line(line: str) -> None:
    path = os.environ.get("NBDURABLE_TEST_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@nd.tool(needs_approval=True)
def drop_table(name: str, ctx: nd.ToolContext) -> str:
    """Drop a warehouse table."""
    log_line(f"drop {ctx.run_id} {ctx.tool_call_id}")
    return f"dropped {name}"


# -- Pydantic AI: FunctionModel ---------------------------------------------------------------


def _answered(messages: list[ModelMessage]) -> bool:
    last = messages[-1]
    return isinstance(last, ModelRequest) and any(
        isinstance(part, ToolReturnPart) for part in last.parts
    )


def pai_turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if _answered(messages):
        return ModelResponse(parts=[PaiText(ANSWER)])
    return ModelResponse(
        parts=[PaiText(PREAMBLE), PaiCall("drop_table", {"name": "stg_2023"}, CALL_ID)]
    )


async def pai_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    if _answered(messages):
        words = ANSWER.split(" ")
        for i, word in enumerate(words):
            yield word if i == len(words) - 1 else word + " "
        return
    # Pydantic AI's stream functions yield all text or all tool-call deltas: the
    # streamed first turn is the call alone, its arguments in fragments.
    yield {0: DeltaToolCall(name="drop_table", json_args='{"na', tool_call_id=CALL_ID)}
    yield {0: DeltaToolCall(json_args='me": "stg_2023"}')}


def pydantic_ai_model() -> PydanticAIModel:
    return PydanticAIModel(FunctionModel(pai_turn, stream_function=pai_stream), price=PRICE)


# -- LangChain: FakeMessagesListChatModel with tool calling -----------------------------------


def lc_responses() -> list[BaseMessage]:
    return [
        AIMessage(
            content=PREAMBLE,
            tool_calls=[{"name": "drop_table", "args": {"name": "stg_2023"}, "id": CALL_ID}],
            usage_metadata={"input_tokens": 40, "output_tokens": 12, "total_tokens": 52},
            response_metadata={"finish_reason": "tool_calls"},
        ),
        AIMessage(
            content=ANSWER,
            usage_metadata={"input_tokens": 70, "output_tokens": 9, "total_tokens": 79},
            response_metadata={"finish_reason": "stop"},
        ),
    ]


def langchain_model() -> LangChainModel:
    return LangChainModel(ToolCallingFake(responses=lc_responses()), price=PRICE)


def tool_messages(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


MODELS: dict[str, Callable[[], nd.Model]] = {
    "pydantic-ai": pydantic_ai_model,
    "langchain": langchain_model,
}

agents = [
    nd.Agent(
        f"janitor-{name}",
        make(),
        [drop_table],
        "You clean up stale staging tables.",
        version="1",
        stream=True,
        tool_recovery={"drop_table": "manual"},
    )
    for name, make in MODELS.items()
]
